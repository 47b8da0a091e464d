"""python -m hvd_herring.check: what was built and what can run here, like
`horovodrun --check-build`. With --knobs-markdown, prints the README's table of knobs."""

import argparse
import importlib.util
import os
import shutil
import sys


def _which(tool):
    """A tool on PATH, or beside this interpreter (a venv's bin/ need not be on PATH)."""
    return shutil.which(tool) or shutil.which(tool, path=os.path.dirname(sys.executable))


def _available(module):
    return importlib.util.find_spec(module) is not None


def _version(module):
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "installed")
    except Exception as e:  # noqa: BLE001 - report, don't fail the check
        return f"broken ({type(e).__name__}: {e})"


def _distribution_version(*names):
    """An installed distribution's version without importing it (TensorFlow takes seconds)."""
    from importlib import metadata
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "installed"


def _torch_line():
    """torch's version, and what the C++ torch calls were built against (another torch: not loaded)."""
    from hvd_herring import build_info
    built = build_info.built_against("torch")
    if not _available("torch"):
        return "(not installed)" + (f"; the C++ calls were built against torch {built}" if built else "")
    version = _version("torch")
    if built is None:
        return f"{version} (C++ torch calls: not built, tensors are read in Python)"
    if build_info.mismatch("torch", version):
        return (f"{version} (C++ torch calls built against {built}: NOT loaded with this torch, "
                "tensors are read in Python)")
    return f"{version} (C++ torch calls built against {built})"


def _tensorflow_status():
    """(usable, description): TensorFlow installed, and the herring ops built against it."""
    if not _available("tensorflow"):
        return False, "(not installed)"
    version = _distribution_version("tensorflow-cpu", "tensorflow", "tensorflow-gpu")
    library = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libherring_tensorflow.so")
    if not os.path.exists(library):
        return False, f"{version} (installed, but the ops were not built: rebuild the package)"
    from hvd_herring import build_info
    built = build_info.mismatch("tensorflow", version)
    if built:
        return False, f"{version} (the ops were built against TensorFlow {built}: install that version or rebuild)"
    return True, f"{version} (ops built: {library})"


def knobs_markdown():
    from hvd_herring import _native
    lines = ["| Knob | Default | Kind | Must match on every rank | Meaning |",
             "| --- | --- | --- | --- | --- |"]
    for k in _native.KNOBS:
        default = f"`{k['default']}`" if k["default"] else "(unset)"
        lines.append(f"| `{k['name']}` | {default} | {k['kind']} | "
                     f"{'yes' if k['must_match_across_ranks'] else 'no'} | {k['description']} |")
    return "\n".join(lines)


def report():
    from hvd_herring import __version__, _native, switch
    mark = lambda ok: "[X]" if ok else "[ ]"  # noqa: E731
    print(f"hvd_herring v{__version__}")
    print(f"  native core: {_native.__file__}")
    print(f"  dtypes: {', '.join(_native.DTYPES)}")
    print(f"  reduce ops: {', '.join(k for k in _native.REDUCE_OPS if k != 'Adasum')}")
    print()
    print("Available frameworks:")
    print(f"    {mark(_available('torch'))} PyTorch {_torch_line()}")
    tf_ok, tf_line = _tensorflow_status()
    print(f"    {mark(tf_ok)} TensorFlow {tf_line}")
    print()
    print("Available launch paths:")
    print(f"    {mark(_which('horovodrun') is not None)} horovodrun --gloo (HTTP rendezvous store)")
    mpi = _which("mpirun") is not None and _available("mpi4py")
    print(f"    {mark(mpi)} mpirun / horovodrun --mpi (Open MPI + mpi4py)")
    print("    [X] single process (no launcher)")
    print()
    print("Allreduce implementations: herring (parameter servers, hierarchical), ring, "
          "hd (halving-doubling), hd-topo (EFLOPS topology-aware), local")
    print(f"HOROVOD_BACKEND=herring switch: {'active' if switch.enabled() else 'inactive'} in this process "
          f"(horovod {'installed' if _available('horovod') else 'NOT installed'})")
    if switch.backend_error():
        print(f"    [ ] {switch.backend_error()}: `import horovod` fails until it is fixed")
    knobs = _native.resolved_knobs()
    secret = {k["name"] for k in _native.KNOBS if k["kind"] == "secret"}
    changed = {k: ("***" if k in secret else v) for k, v in knobs.items() if os.environ.get(k)}
    if changed:
        print("Knobs set in the environment: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knobs-markdown", action="store_true", help="print the README's table of knobs")
    args = parser.parse_args(argv)
    if args.knobs_markdown:
        print(knobs_markdown())
    else:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
