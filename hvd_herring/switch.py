"""HOROVOD_BACKEND=herring: run unchanged Horovod scripts on the herring engine.

A one-line .pth file installed with the package calls at_startup() at interpreter start-up when
HOROVOD_BACKEND is set; unset, nothing is imported and Horovod behaves as installed. With
`herring`, install() puts a finder in front of the import system that answers imports of Horovod's
framework packages with ours. With a value we do not know (a typo: `hering`), `import horovod`
raises ValueError naming the choices: otherwise the job would run on stock Horovod and nobody would
notice. It is raised there rather than at start-up because a .pth cannot stop the interpreter (site
prints the traceback and goes on), and because Python that never imports Horovod (pip, other
tools run in the same environment) must keep working; horovodrun and every Horovod script import
horovod first, so they stop at once with the message.

Independently of the switch, a package of ours that stands in for a Horovod package (our
hvd_herring.tensorflow is horovod.tensorflow) registers with alias_submodules(): then
`horovod.tensorflow.X` is the same module object as `hvd_herring.tensorflow.X` whenever we have an
X, instead of a second copy loaded under the other name (which would, for instance, register the
TensorFlow gradients twice). Horovod's own modules (compression, functions...) are still found
through the package's path."""

import importlib
import importlib.abc
import importlib.util
import os
import sys

# Horovod module -> the hvd_herring module that stands in for it.
_REPLACEMENTS = {
    "horovod.torch": "hvd_herring.torch",
    "horovod.tensorflow": "hvd_herring.tensorflow",
    "horovod.tensorflow.keras": "hvd_herring.tensorflow.keras",
    # Keras 3 is tf.keras: Horovod's standalone-Keras package is the same as its tf.keras one.
    "horovod.keras": "hvd_herring.tensorflow.keras",
    "horovod.keras.callbacks": "hvd_herring.tensorflow.keras.callbacks",
}

# Horovod module -> "our_module:function" (or a tuple of them) applied to it right after Horovod's
# code ran: where Horovod's own module works under the switch but needs changes (named in the
# functions).
_AFTER_IMPORT = {
    # RayExecutor's errors name the Horovod rank whose actor died.
    "horovod.ray.runner": "hvd_herring.ray.failed_ranks:name_failed_ranks",
    # horovodrun / horovod.spark.run without --gloo or --mpi: gloo mode, as before mpi_built() was true.
    "horovod.runner.launch": "hvd_herring.launch_defaults:prefer_gloo",
    # Horovod's Spark estimators on pyarrow >= 15 and without Petastorm (hvd_herring/spark).
    "horovod.spark.common.store": "hvd_herring.spark.parquet_dataset:give_stores_the_legacy_view",
    "horovod.spark.torch.datamodule": "hvd_herring.spark.defaults:torch_default",
    "horovod.spark.keras.datamodule": "hvd_herring.spark.defaults:keras_default",
    "horovod.spark.keras.util": ("hvd_herring.spark.defaults:keras_dataset",
                                 "hvd_herring.spark.keras3_serialization:adapt_util"),
    # ... and Horovod's Keras estimator, written for Keras 2, under Keras 3.
    "horovod.spark.keras.estimator": "hvd_herring.spark.keras3_estimator:adapt",
    "horovod.spark.keras.tensorflow": "hvd_herring.spark.keras_backend:use_tf_keras",
}

# Horovod package -> our package answering for its submodules (see alias_submodules).
_SUBMODULE_ALIASES = {}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self._target = target

    def create_module(self, spec):
        return importlib.import_module(self._target)

    def exec_module(self, module):
        pass  # already executed under its own name


def _alias_spec(fullname, target_name):
    target_spec = importlib.util.find_spec(target_name)
    if target_spec is None:
        return None
    return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name),
                                           is_package=target_spec.submodule_search_locations is not None)


class _AfterImportLoader(importlib.abc.Loader):
    """Horovod's own loader, then the changes named in _AFTER_IMPORT."""

    def __init__(self, loader, changes):
        self._loader, self._changes = loader, (changes,) if isinstance(changes, str) else changes

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for change in self._changes:
            module_name, function = change.split(":")
            getattr(importlib.import_module(module_name), function)(module)


class HerringFinder(importlib.abc.MetaPathFinder):
    """Under the switch: Horovod's framework packages are ours."""

    def find_spec(self, fullname, path=None, target=None):
        target_name = _REPLACEMENTS.get(fullname)
        if target_name is not None:
            return _alias_spec(fullname, target_name)
        change = _AFTER_IMPORT.get(fullname)
        if change is None:
            return None
        for finder in sys.meta_path:   # Horovod's own module, found as without us
            if isinstance(finder, (HerringFinder, SubmoduleAliasFinder)) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _AfterImportLoader(spec.loader, change)
                return spec
        return None


class SubmoduleAliasFinder(importlib.abc.MetaPathFinder):
    """horovod.<package>.X is our <package>.X when we have one (see the module docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        for horovod_package, ours in _SUBMODULE_ALIASES.items():
            if fullname.startswith(horovod_package + "."):
                target_name = ours + fullname[len(horovod_package):]
                try:
                    return _alias_spec(fullname, target_name)
                except ImportError:
                    return None
        return None


def alias_submodules(horovod_package, our_package):
    """From now on, imports of horovod_package.X resolve to our_package.X when it exists."""
    _SUBMODULE_ALIASES[horovod_package] = our_package
    if not any(isinstance(f, SubmoduleAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SubmoduleAliasFinder())


# HOROVOD_BACKEND's values (compared without case and surrounding spaces; "" is unset): the one
# that runs Horovod's API on herring, and those that leave Horovod as installed. Horovod itself
# does not read the variable.
HERRING = "herring"
AS_INSTALLED = ("", "horovod")


def _backend():
    return os.environ.get("HOROVOD_BACKEND", "").strip().lower()


def enabled():
    return _backend() == HERRING


def backend_error():
    """What is wrong with HOROVOD_BACKEND, or None when it is one of the choices."""
    if _backend() == HERRING or _backend() in AS_INSTALLED:
        return None
    return (f"HOROVOD_BACKEND={os.environ['HOROVOD_BACKEND']!r} is not a backend: expected {HERRING!r} "
            f"(Horovod's API on the herring engine), or {AS_INSTALLED[1]!r} or unset (Horovod as installed)")


def at_startup():
    """What hvd_herring_switch.pth runs when HOROVOD_BACKEND is set."""
    if enabled():
        install()
        return
    error = backend_error()
    if error is not None and not any(isinstance(f, RefuseHorovod) for f in sys.meta_path):
        sys.meta_path.insert(0, RefuseHorovod(error))


class _RaisingLoader(importlib.abc.Loader):
    def __init__(self, error):
        self._error = error

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ValueError(self._error)


class RefuseHorovod(importlib.abc.MetaPathFinder):
    """HOROVOD_BACKEND is no backend we know: `import horovod` (and so every horovod.X) raises
    ValueError naming the choices. Where Horovod is installed, find_spec still finds it
    (importlib.util.find_spec("horovod") answers as before); only running its code is refused."""

    def __init__(self, error):
        self._error = error

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "horovod":
            return None
        for finder in sys.meta_path:   # Horovod as found without us
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _RaisingLoader(self._error)
                return spec
        return None


def install():
    """Puts the finder in front of the import system (idempotent)."""
    if not any(isinstance(f, HerringFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, HerringFinder())
    _give_the_job_a_secret()


def _give_the_job_a_secret():
    """In the horovodrun launcher itself: draw the job's secret and pass it to the workers in their
    environment, so it never travels through horovodrun's rendezvous store (unauthenticated HTTP
    that anyone on the network can read). The workers prove it on every connection."""
    if os.path.basename(sys.argv[0] if sys.argv else "") != "horovodrun":
        return
    if not os.environ.get("HERRING_SECRET"):
        import secrets
        os.environ["HERRING_SECRET"] = secrets.token_hex(32)
