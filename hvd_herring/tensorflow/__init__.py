"""Horovod's TensorFlow API on the herring engine.

This package *is* `horovod.tensorflow` when HOROVOD_BACKEND=herring (see hvd_herring.switch), and
is also importable directly as `hvd_herring.tensorflow`. The collectives are TensorFlow custom ops
(native/tensorflow, libherring_tensorflow.so) that enqueue into the same engine the PyTorch side
uses: one engine per process, whichever frameworks drive it.

Importing the package is cheap: it does not import TensorFlow. The topology functions (init, rank,
size, gloo_built...) work at once; the first use of anything else loads TensorFlow and the ops.
That keeps `horovodrun`'s launch check, which imports horovod.tensorflow and calls gloo_built(),
from paying TensorFlow's start-up on every launch.

Horovod's pure-Python TensorFlow modules (compression, util, functions) are found through this
package's path under their usual names and run on top of hvd_herring.tensorflow.mpi_ops, which
takes the place of Horovod's compiled library. The parts that break on TF 2.21 / Keras 3 (the
package's own __init__, the Keras layer, the elastic state) are replaced; the Keras layer serves
Keras 3 and Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1) alike, see hvd_herring.tensorflow.keras.
"""

import importlib.util
import os
import sys

import horovod
from horovod.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from horovod.common.process_sets import _setup as _setup_process_sets
from horovod.common.util import gpu_available  # noqa: F401  (horovod.tensorflow exports it)

from hvd_herring import switch as _switch
from hvd_herring.basics import basics as _basics, export_basics as _export_basics

OP_LIBRARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libherring_tensorflow.so")

if importlib.util.find_spec("tensorflow") is None:
    raise ImportError("hvd_herring.tensorflow needs TensorFlow (pip install tensorflow-cpu==2.21.0)")
if not os.path.exists(OP_LIBRARY):
    raise ImportError(
        f"hvd_herring was built without its TensorFlow ops: {OP_LIBRARY} not found. Rebuild the package "
        "where TensorFlow is importable (bash scripts/setup.sh, or pip install . with TensorFlow installed).")

_HOROVOD_TF_DIR = os.path.join(os.path.dirname(horovod.__file__), "tensorflow")
__path__.append(_HOROVOD_TF_DIR)
sys.modules["horovod.tensorflow"] = sys.modules[__name__]
horovod.tensorflow = sys.modules[__name__]
_switch.alias_submodules("horovod.tensorflow", __name__)

# --- what works without TensorFlow ----------------------------------------------------------------

_export_basics(globals())

_setup_process_sets(_basics)


def init(*args, **kwargs):
    """Horovod's hvd.init(comm=None, process_sets=None): starts (or joins) this process's engine."""
    _basics.init(*args, **kwargs)
    _setup_process_sets(_basics)


def shutdown():
    """Stops the engine (every rank must call it; Horovod semantics)."""
    _basics.shutdown()


def _check_has_gpu():
    return False


# --- everything else loads TensorFlow on first use ------------------------------------------------

_LAZY_MODULE = "hvd_herring.tensorflow._api"


def _load():
    api = importlib.import_module(_LAZY_MODULE)
    globals().update({k: v for k, v in vars(api).items() if not k.startswith("__")})
    return api


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    api = _load()
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'horovod.tensorflow' (hvd_herring) has no attribute {name!r}") from None


def __dir__():
    return sorted(set(globals()) | set(vars(_load())))
