"""The wheel, as a user gets it: `bash scripts/build_wheel.sh` builds it (or finds it in dist/, fresh
for this source tree), a fresh venv WITHOUT system site-packages installs it with pip alone, with no
compiler, CMake or make reachable and `--only-binary :all:` (pip may build nothing), and jobs run
from that venv only:
  - the wheel alone (no framework): the core loads, its bundled libraries come from the wheel;
  - `<wheel>[torch,horovod]`: the extras bring torch 2.13.0 and Horovod; `pip show` and the metadata
    declare them; a 2-rank torch.distributed job on "herring" (torchrun) with the C++ torch calls
    loaded, and a 2-rank Horovod-API job (`HOROVOD_BACKEND=herring horovodrun --gloo`);
  - a torch other than the one built against (simulated: the recorded version is changed): a
    warning naming both, the C++ torch calls not loaded, collectives still right.
Horovod 0.28.1 is published as source only: it is compiled once (about a minute, with the system
compiler, pip's wheel cache keeps it) into a wheel beside ours, so that installing is compile-free too."""

import fcntl
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
DEPS = os.path.join(ROOT, "build", "wheel", "deps")   # the Horovod wheel, built once
HOROVOD = "horovod==0.28.1"
TORCH = "torch==2.13.0"
COMPILERS = ("gcc", "g++", "cc", "c++", "clang", "clang++", "cmake", "make", "ld")


def run(args, timeout, env=None, cwd=None, check=True):
    """Runs a command, its output in the failure message."""
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {done.returncode}\n--- stdout\n{done.stdout[-6000:]}"
                    f"\n--- stderr\n{done.stderr[-6000:]}")
    return done


def clean_env(**extra):
    """This machine's environment without what would point into the source tree or .venv, nor any
    Horovod or herring setting of the caller's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
           and not k.startswith(("HOROVOD_", "HERRING_", "OMPI_", "PMI_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel():
    built = run(["bash", os.path.join(ROOT, "scripts", "build_wheel.sh")], timeout=1800)
    path = built.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r".*/hvd_herring-[^/]+-cp\d+-cp\d+-manylinux_\d+_\d+_x86_64\.whl", path), path
    return path


@pytest.fixture(scope="module")
def horovod_wheel():
    """Horovod 0.28.1 without frameworks as a wheel (pip wheel: compiled the first time only)."""
    os.makedirs(DEPS, exist_ok=True)
    with open(os.path.join(DEPS, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = glob.glob(os.path.join(DEPS, "horovod-0.28.1-*.whl"))
        if not found:
            env = clean_env(HOROVOD_WITHOUT_PYTORCH="1", HOROVOD_WITHOUT_TENSORFLOW="1", HOROVOD_WITHOUT_MXNET="1")
            run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", DEPS, HOROVOD], timeout=1200, env=env)
            found = glob.glob(os.path.join(DEPS, "horovod-0.28.1-*.whl"))
        assert found, os.listdir(DEPS)
        return found[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv, without system site-packages; `tools` is a PATH holding the venv's bin/ and
    nothing else (no compiler, no CMake, no make)."""
    base = tmp_path_factory.mktemp("wheel-venv")
    path = base / "venv"
    python = getattr(sys, "_base_executable", None) or sys.executable
    run([python, "-m", "venv", str(path)], timeout=300)
    assert "include-system-site-packages = false" in (path / "pyvenv.cfg").read_text()
    bin_dir = str(path / "bin")
    for tool in COMPILERS:
        assert shutil.which(tool, path=bin_dir) is None, tool
    return {"dir": str(path), "python": os.path.join(bin_dir, "python"), "bin": bin_dir, "work": str(base)}


def pip_install(venv, *requirements):
    """pip alone, no compiler reachable, and nothing built from source (--only-binary)."""
    env = clean_env(PATH=venv["bin"])
    for var in ("CC", "CXX", "CMAKE", "LD"):
        env.pop(var, None)
    done = run([venv["python"], "-m", "pip", "install", "--only-binary", ":all:", "--find-links", DEPS,
                *requirements], timeout=900, env=env)
    assert "Building wheel" not in done.stdout, done.stdout
    return done


def python_in(venv, code, timeout=300, check=True, **env):
    # Run from the venv's own folder: the source tree must not be importable.
    return run([venv["python"], "-c", code], timeout=timeout, check=check, cwd=venv["work"],
               env=clean_env(PATH=venv["bin"] + os.pathsep + os.environ.get("PATH", ""), **env))


@pytest.fixture(scope="module")
def installed(wheel, horovod_wheel, venv):
    """The wheel alone first (nothing but the core), then with its torch and horovod extras."""
    pip_install(venv, wheel)
    core = python_in(venv, "import hvd_herring, hvd_herring._native as n, importlib.util as u; "
                           "print(hvd_herring.__file__); print(u.find_spec('torch')); "
                           "print(''.join(open('/proc/self/maps').read()))")
    lines = core.stdout.splitlines()
    assert lines[0].startswith(venv["dir"]), lines[0]
    assert lines[1] == "None", "the venv must start without torch"
    crypto = {line.split()[-1] for line in lines[2:] if "libcrypto" in line}
    assert crypto and all(p.startswith(os.path.join(venv["dir"], "lib")) and "hvd_herring.libs" in p
                          for p in crypto), f"libcrypto must come from the wheel, not the system: {crypto}"
    pip_install(venv, f"{wheel}[torch,horovod]")
    return venv


def test_pip_show_declares_the_dependencies(installed):
    """`pip show` finds the distribution in the venv; its Requires line is empty because the core
    needs nothing from PyPI, and pip show prints no extras, so those are read from the metadata."""
    show = run([installed["python"], "-m", "pip", "show", "hvd-herring"], timeout=120,
               env=clean_env(PATH=installed["bin"])).stdout
    print(show)
    assert re.search(r"^Name: hvd-herring$", show, re.M) and re.search(r"^Version: 0\.1\.0$", show, re.M), show
    assert f"Location: {installed['dir']}" in show, show
    # The core needs nothing from PyPI; the frameworks, Horovod, Spark and Ray are extras.
    requires = python_in(installed, "import importlib.metadata as m; print('\\n'.join(m.requires('hvd-herring')))")
    declared = set(requires.stdout.splitlines())
    for wanted in ('torch==2.13.0; extra == "torch"', 'tensorflow-cpu==2.21.0; extra == "tensorflow"',
                   'horovod==0.28.1; extra == "horovod"', 'pyspark==4.3.0; extra == "spark"',
                   'ray[train]==2.60.0; extra == "ray"'):
        assert wanted in declared, (wanted, declared)
    check = run([installed["python"], "-m", "pip", "check"], timeout=120, env=clean_env(PATH=installed["bin"]))
    assert "No broken requirements" in check.stdout, check.stdout


def test_check_reports_the_build(installed):
    out = python_in(installed, "import hvd_herring.check as c; c.main([])").stdout
    assert "[X] PyTorch 2.13.0" in out and "C++ torch calls built against 2.13.0" in out, out
    assert "[X] horovodrun --gloo" in out, out


def test_torch_distributed_two_ranks(installed):
    done = run([os.path.join(installed["bin"], "torchrun"), "--standalone", "--nproc-per-node", "2",
                os.path.join(WORKERS, "wheel_dist_worker.py")], timeout=300, cwd=installed["work"],
               env=clean_env(PATH=installed["bin"] + os.pathsep + os.environ.get("PATH", "")))
    oks = re.findall(r"WHEEL-DIST-OK rank=(\d) package=(\S+) torch_native=(\w+)", done.stdout)
    assert sorted(r for r, _, _ in oks) == ["0", "1"], done.stdout + done.stderr
    for _, package, torch_native in oks:
        assert package.startswith(installed["dir"]), package
        assert torch_native == "True", "the wheel's C++ torch calls did not load"


def test_horovod_api_two_ranks(installed):
    done = run([os.path.join(installed["bin"], "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                installed["python"], os.path.join(WORKERS, "wheel_horovod_worker.py")],
               timeout=300, cwd=installed["work"],
               env=clean_env(HOROVOD_BACKEND="herring", PATH=installed["bin"] + os.pathsep + os.environ.get("PATH", "")))
    oks = re.findall(r"WHEEL-HOROVOD-OK rank=(\d) module=(\S+) file=(\S+)", done.stdout)
    assert sorted(r for r, _, _ in oks) == ["0", "1"], done.stdout + done.stderr
    for _, module, file in oks:
        assert module.startswith("hvd_herring") and file.startswith(installed["dir"]), (module, file)


def test_another_torch_falls_back_to_python(installed):
    """A torch other than the one built against: simulated by recording another version in the
    installed wheel (no second torch is downloaded). The C++ torch calls must not be loaded, a
    warning names both versions, and a collective still runs (in Python)."""
    info = python_in(installed, "import hvd_herring._build_info as b; print(b.__file__)").stdout.strip()
    original = open(info).read()
    assert "'torch': '2.13.0" in original, original
    try:
        with open(info, "w") as f:
            f.write(original.replace("'torch': '2.13.0", "'torch': '2.12.0"))
        code = ("import warnings; warnings.simplefilter('always')\n"
                "import torch, torch.distributed as dist, hvd_herring.torch.distributed\n"
                "from hvd_herring.torch import storage_hold\n"
                "assert storage_hold._torch_native is None\n"
                "import sys; assert 'hvd_herring._torch_native' not in sys.modules\n"
                "dist.init_process_group('herring', init_method='file://' + sys.argv[1], rank=0, world_size=1)\n"
                "t = torch.arange(4.0); dist.all_reduce(t); assert t.tolist() == [0.0, 1.0, 2.0, 3.0], t\n"
                "dist.destroy_process_group(); print('FALLBACK-OK')\n")
        store = os.path.join(installed["work"], "store")
        done = run([installed["python"], "-c", code, store], timeout=300, cwd=installed["work"],
                   env=clean_env(PATH=installed["bin"] + os.pathsep + os.environ.get("PATH", "")))
        assert "FALLBACK-OK" in done.stdout, done.stdout + done.stderr
        assert "built against torch 2.12.0" in done.stderr and "runs torch 2.13.0" in done.stderr, done.stderr
        out = python_in(installed, "import hvd_herring.check as c; c.main([])").stdout
        assert "NOT loaded with this torch" in out, out
    finally:
        with open(info, "w") as f:
            f.write(original)
