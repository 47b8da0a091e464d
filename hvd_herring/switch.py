"""HOROVOD_BACKEND=herring: run unchanged Horovod scripts on the herring engine.

A one-line .pth file installed with the package calls install() at interpreter start-up, but only
when HOROVOD_BACKEND=herring; otherwise nothing is imported and Horovod behaves as installed. The
finder answers imports of Horovod's framework packages with ours."""

import importlib
import importlib.abc
import importlib.util
import os
import sys

# Horovod module -> the hvd_herring module that stands in for it.
_REPLACEMENTS = {
    "horovod.torch": "hvd_herring.torch",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self._target = target

    def create_module(self, spec):
        return importlib.import_module(self._target)

    def exec_module(self, module):
        pass  # already executed under its own name


class HerringFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        target_name = _REPLACEMENTS.get(fullname)
        if target_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name), is_package=True)


def enabled():
    return os.environ.get("HOROVOD_BACKEND", "").strip().lower() == "herring"


def install():
    """Puts the finder in front of the import system (idempotent)."""
    if not any(isinstance(f, HerringFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, HerringFinder())
