"""Ray's worker_process_setup_hook for Ray Train on herring (docs/ray.md):

    ray.init(runtime_env={"worker_process_setup_hook": "hvd_herring.ray.worker_setup.register_backend"})

Ray Train calls init_process_group before the training function runs, so the "herring" backend
must be registered in its worker processes beforehand. Ray runs the hook in every worker process it
starts: the Ray Train workers, but also its controller, the workers it keeps idle and its helpers,
most of which never import torch. A hook that imported torch and the backend there (about 3.5 s of
CPU per process) held back the first seconds of training: on 2 cores the first 150 steps of the Ray
Train benchmark took 44 ms instead of 18-20 (issue 64). This hook imports nothing: the backend is
registered when a process's import of torch completes, and only in the processes that import it
(in a Ray Train worker, after Ray has set OMP_NUM_THREADS for its actor, so torch also sizes its
thread pool as Ray meant it to)."""

import importlib.util
import sys
import warnings


def register_backend():
    """Registers torch.distributed's "herring" backend now if torch is imported, else when it is."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "distributed", None) is not None:
        _register()
    elif not any(isinstance(f, _RegisterAfterTorchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterTorchImport())


def _register():
    try:
        import hvd_herring.torch.distributed  # noqa: F401  (registers the backend as it is imported)
    except Exception as err:  # torch's import must not fail in a process that never asks for herring
        warnings.warn(f"hvd_herring: the torch.distributed backend 'herring' could not be registered "
                      f"in this process ({type(err).__name__}: {err}); init_process_group('herring') "
                      "will not find it", RuntimeWarning)


class _RegisterAfterTorchImport:
    """A finder on sys.meta_path (importlib.abc.MetaPathFinder's protocol; the module is not imported,
    it costs 40 ms): finds torch as the other finders do, and registers the backend once torch's
    module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # once: the finders after it locate torch
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run_torch = spec.loader.exec_module

        def exec_module(module):
            run_torch(module)
            _register()
        spec.loader.exec_module = exec_module
        return spec
