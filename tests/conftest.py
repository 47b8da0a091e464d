import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The repository root: the development tools (tools/simcluster) are not part of the installed package.
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The fast tier (`bash scripts/test.sh --fast`, a few minutes): the native unit tests, the switch,
# and one multi-process smoke per framework and launch path. The full suite (what CI runs) is
# everything.
FAST_TIER = {
    "test_native.py",             # every native case (GoogleTest), no processes
    "test_layers.py",             # the native folders include only the layers below them
    "test_switch.py",             # HOROVOD_BACKEND=herring, horovodrun's build check, the knob table
    "test_cycle_policy.py",       # torch under horovodrun: lone requests and bursts
    "test_training.py",           # torch training against a single-process reference
    "test_tensorflow_training.py",  # TensorFlow 2 / Keras 3 training against references
    "test_mpirun.py",             # the mpirun launch path
}


# The cluster-engine tier (Spark and Ray launch paths; 6.2 min at load 6-9 on 2 cores, about 12 min at load 14):
# part of the full suite; `-m "not cluster_engines"` leaves it out.
CLUSTER_ENGINES_TIER = {"test_spark.py", "test_ray.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: part of the fast tier (scripts/test.sh --fast)")
    config.addinivalue_line("markers", "cluster_engines: Spark and Ray launch paths (tests/test_spark.py, test_ray.py)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in FAST_TIER:
            item.add_marker(pytest.mark.fast)
        if os.path.basename(str(item.fspath)) in CLUSTER_ENGINES_TIER:
            item.add_marker(pytest.mark.cluster_engines)
