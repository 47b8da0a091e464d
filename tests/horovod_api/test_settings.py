"""Settings that are wrong, and sums that do not fit, are errors or exact results, never silent
surprises (issue 64, items 5 and 6):

- HOROVOD_BACKEND with a value we do not know (`hering`) stops every Horovod script and horovodrun
  at `import horovod` with an error naming the choices, while Python that does not import
  Horovod (pip) runs as usual; `horovod` means Horovod as installed.
- A malformed HOROVOD_* number (HOROVOD_FUSION_THRESHOLD=abc, HOROVOD_CYCLE_TIME=fast), which
  Horovod's core would read as 0, fails hvd.init() and init_process_group naming the variable,
  the value and what was expected.
- Average of integer tensors whose sums overflow their type is the exact average (truncated toward
  zero) on 2 ranks, through Horovod's torch API and torch.distributed: one launch runs every check
  (tests/horovod_api/workers/integer_average_worker.py).
"""

import os
import shutil

import pytest

import launch

CHOICES = "expected 'herring' (Horovod's API on the herring engine), or 'horovod' or unset (Horovod as installed)"


def test_unknown_backend_stops_a_horovod_script_naming_the_choices():
    run = launch.python(["-c", "import horovod.torch as hvd\nprint('the script ran')"], HOROVOD_BACKEND="hering")
    assert run.returncode != 0, run.output
    assert "the script ran" not in run.output, run.output
    assert f"ValueError: HOROVOD_BACKEND='hering' is not a backend: {CHOICES}" in run.output, run.output


def test_unknown_backend_stops_horovodrun_before_it_launches():
    run = launch._run([os.path.join(launch.BIN, "horovodrun"), "--check-build"],
                      launch.herring_env(HOROVOD_BACKEND="Hering "), 120)
    assert run.returncode != 0, run.output
    assert "HOROVOD_BACKEND='Hering ' is not a backend" in run.output, run.output
    assert "Available Frameworks" not in run.output, run.output


def test_unknown_backend_leaves_python_without_horovod_alone():
    # pip (and any tool that does not import Horovod) runs as usual and prints nothing more;
    # asking whether Horovod is installed still answers.
    probe = ("import importlib.util, subprocess, sys\n"
             "print('found', importlib.util.find_spec('horovod') is not None)\n"
             "sys.exit(subprocess.call([sys.executable, '-m', 'pip', '--version']))\n")
    run = launch.python(["-c", probe], HOROVOD_BACKEND="hering")
    assert run.returncode == 0, run.output
    lines = run.output.strip().splitlines()
    assert lines[0] == "found True" and lines[1].startswith("pip ") and len(lines) == 2, run.output


def test_backend_horovod_means_horovod_as_installed():
    run = launch.python(["-c", "import horovod.torch as hvd, sys; print('allreduce' in dir(hvd), "
                         "'hvd_herring.torch' in sys.modules)"], HOROVOD_BACKEND="horovod")
    assert run.returncode == 0, run.output
    # Horovod as installed here is built without torch: no collectives in horovod.torch.
    assert run.output.strip().splitlines()[-1] == "False False", run.output


MALFORMED = """
import os
import horovod.torch as hvd
import torch.distributed as dist
import hvd_herring.torch.distributed  # registers "herring"

def error_of(start):
    try:
        start()
    except ValueError as e:
        return str(e)
    return "started"

store = dist.HashStore()
os.environ["HOROVOD_FUSION_THRESHOLD"] = "abc"
print("INIT", error_of(hvd.init))
del os.environ["HOROVOD_FUSION_THRESHOLD"]
os.environ["HOROVOD_CYCLE_TIME"] = "fast"
print("DIST", error_of(lambda: dist.init_process_group("herring", store=store, rank=0, world_size=1)))
os.environ["HOROVOD_CYCLE_TIME"] = "5ms"
print("SUFFIX", error_of(hvd.init))
os.environ["HOROVOD_CYCLE_TIME"] = "2.5"
hvd.init()
print("FIXED", hvd.size())
hvd.shutdown()
"""


def test_malformed_horovod_numbers_fail_init_naming_the_variable_and_value():
    run = launch.python(["-c", MALFORMED])
    assert run.returncode == 0, run.output
    said = dict(line.split(" ", 1) for line in run.output.splitlines()
                if line.split(" ", 1)[0] in ("INIT", "DIST", "SUFFIX", "FIXED"))
    assert "HOROVOD_FUSION_THRESHOLD='abc' is not valid: expected an integer number of bytes >= 0" in said["INIT"], \
        run.output
    assert "HOROVOD_CYCLE_TIME='fast' is not valid: expected a number of milliseconds >= 0" in said["DIST"], run.output
    assert "HOROVOD_CYCLE_TIME='5ms' is not valid" in said["SUFFIX"], run.output
    assert said["FIXED"] == "1", run.output


# --- integer Average on 2 ranks -------------------------------------------------------------------

AVERAGE_WORKER = os.path.join("tests", "horovod_api", "workers", "integer_average_worker.py")
AVERAGE_CHECKS = ["the_issues_int8_case", "every_integer_type_small_and_large", "cached_repeats_in_place_and_async",
                  "grouped_with_mixed_types", "pre_and_postscale", "reducescatter_average", "empty_and_scalar",
                  "torch_distributed_avg"]


@pytest.fixture(scope="module")
def averaged():
    results_dir = launch.scratch_dir("herring-average-")
    run = launch.horovodrun(2, [AVERAGE_WORKER], timeout=300, HERRING_TEST_RESULTS=results_dir)
    per_rank = launch.rank_results(results_dir, 2)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


def test_every_rank_reported(averaged):
    run, per_rank = averaged
    assert sorted(per_rank) == [0, 1], run.output[-5000:]
    assert run.returncode == 0, run.output[-5000:]


@pytest.mark.parametrize("check", AVERAGE_CHECKS)
def test_integer_average_is_exact(averaged, check):
    run, per_rank = averaged
    for r, data in sorted(per_rank.items()):
        assert data["results"].get(check) == "ok", f"rank {r}: {data['results'].get(check, 'did not run')}"
