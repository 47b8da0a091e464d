"""The HOROVOD_BACKEND switch: unchanged Horovod scripts run on herring when it is set, and Horovod
behaves as installed when it is not; horovodrun --gloo accepts it; init/shutdown/init works."""

import os

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

PROBE = ("import horovod.torch as hvd; print('allreduce' in dir(hvd)); "
         "import sys; print(sys.modules['horovod.torch'].__name__)")


def test_without_the_switch_horovod_is_untouched():
    run = launch.python(["-c", PROBE], HOROVOD_BACKEND=None)
    assert run.returncode == 0, run.output
    lines = run.output.strip().splitlines()
    # Horovod built without torch has no collectives in horovod.torch, and says so.
    assert lines[-2:] == ["False", "horovod.torch"], run.output


def test_with_the_switch_horovod_torch_is_herring():
    run = launch.python(["-c", PROBE + "; hvd.init(); print(hvd.gloo_built(), hvd.size(), hvd.rank()); "
                         "import hvd_herring.torch as h; print(h is hvd, h.DistributedOptimizer.__module__)"])
    assert run.returncode == 0, run.output
    lines = run.output.strip().splitlines()
    assert lines[-4:] == ["True", "hvd_herring.torch", "True 1 0", "True horovod.torch.optimizer"], run.output


def test_direct_import_works_without_the_switch():
    run = launch.python(["-c", "import hvd_herring.torch as hvd, torch; hvd.init(); "
                         "print(hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist())"], HOROVOD_BACKEND=None)
    assert run.returncode == 0, run.output
    assert run.output.strip().splitlines()[-1] == "[1.0, 1.0]"


# A build without hvd_herring._torch_native (HERRING_TORCH=OFF, or torch installed after the
# package): the module is made unfindable, as it is in such a build.
WITHOUT_TORCH_CALLS = (
    "import sys, importlib.machinery\n"
    "class Hide(importlib.machinery.PathFinder):\n"
    "    @classmethod\n"
    "    def find_spec(cls, name, path=None, target=None):\n"
    "        return None if name == 'hvd_herring._torch_native' else importlib.machinery.PathFinder.find_spec(name, path, target)\n"
    "sys.meta_path = [Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]\n"
    "import torch, hvd_herring.torch as hvd\n"
    "from hvd_herring.torch import mpi_ops\n"
    "hvd.init()\n"
    "t = torch.ones(3)\n"
    "hvd.allreduce_(t, op=hvd.Sum)\n"
    "b = hvd.broadcast(torch.arange(3.0), root_rank=0)\n"
    "try:\n"
    "    hvd.allreduce_(torch.ones(4, 4).t())\n"
    "except ValueError as e:\n"
    "    print('error:', e)\n"
    "print(mpi_ops._torch_native, t.tolist(), b.tolist())\n")


def test_torch_collectives_work_without_the_torch_calls_module():
    run = launch.python(["-c", WITHOUT_TORCH_CALLS], HOROVOD_BACKEND=None)
    assert run.returncode == 0, run.output
    lines = run.output.strip().splitlines()
    assert lines[-2:] == ["error: Tensor is required to be contiguous.", "None [1.0, 1.0, 1.0] [0.0, 1.0, 2.0]"], \
        run.output


def test_horovodrun_check_build_sees_torch_and_gloo():
    run = launch._run([os.path.join(launch.BIN, "horovodrun"), "--check-build"], launch.herring_env(), 120)
    assert run.returncode == 0, run.output
    assert "[X] PyTorch" in run.output and "[X] Gloo" in run.output, run.output


def test_init_shutdown_init_in_one_process():
    run = launch.horovodrun(2, [os.path.join("tests", "horovod_api", "workers", "reinit_worker.py")], timeout=180)
    assert run.returncode == 0, run.output[-4000:]
    assert run.output.count("rank ok") == 2


def test_check_entry_reports_frameworks_and_launchers():
    run = launch.python(["-m", "hvd_herring.check"])
    assert run.returncode == 0, run.output
    assert "[X] PyTorch" in run.output
    assert "[X] horovodrun --gloo" in run.output
    assert "[X] mpirun" in run.output


def test_readme_lists_every_knob():
    run = launch.python(["-m", "hvd_herring.check", "--knobs-markdown"])
    table = run.output.strip()
    with open(os.path.join(launch.ROOT, "README.md")) as f:
        readme = f.read()
    section = readme.split("<!-- knobs:begin -->")[1].split("<!-- knobs:end -->")[0].strip()
    assert section == table, "README's knob table is out of date: paste `python -m hvd_herring.check --knobs-markdown`"


def test_horovod_tensorflow_answers_gpu_available_as_horovod_does():
    """horovod.tensorflow exports Horovod's gpu_available(ext) (Horovod's suites call it): it asks
    the extension in a child process, which answers False on this CPU-only backend."""
    run = launch.python(["-c", "import horovod.tensorflow as hvd; print('GPU', hvd.gpu_available('tensorflow'))"],
                        timeout=240)
    assert run.returncode == 0 and "GPU False" in run.output, run.output[-3000:]
