"""op=Adasum on the herring engine (native/ops/adasum_allreduce.h): real ranks through mpirun and
horovodrun run tests/horovod_api/workers/adasum_worker.py (every float dtype and odd sizes against a float64
reference of the formula, fused tensors, scaling, errors, Horovod's DistributedOptimizer(op=Adasum)
against a replay), the results' bits compared across ranks; and Horovod's own Adasum suites
(../shared/horovod-tests), run whole under mpirun as Horovod's CI runs them."""

import json
import os

import pytest

import checks
import launch
from tiers import param_in_tier
from test_horovod_suites import RANK_WORKER, SUITES_DIR, _outcomes, _require_suite, Suite

WORKER = os.path.join("tests", "horovod_api", "workers", "adasum_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
LAUNCHERS = {"mpirun": launch.mpirun, "horovodrun": launch.horovodrun}


def run_worker(launcher, np):
    return launch.run_with_results(LAUNCHERS[launcher], np, [WORKER], prefix="herring-adasum-", timeout=600,
                                   HOROVOD_DYNAMIC_PROCESS_SETS=1)


@pytest.mark.parametrize("launcher,np", [("mpirun", 2), ("horovodrun", 4)])
def test_adasum_against_the_formula_with_the_same_bits_on_every_rank(launcher, np):
    run, per_rank = run_worker(launcher, np)
    assert sorted(per_rank) == list(range(np)), f"ranks reported {sorted(per_rank)}\n{run.output[-5000:]}"
    assert run.returncode == 0, run.output[-5000:]
    for r, data in sorted(per_rank.items()):
        failed = checks.failed_checks(CHECK_NAMES, data)
        assert not failed, f"rank {r}: {failed}"
        assert data["counters"]["adasum_allreduces"] > 0, data["counters"]
    digests = {r: json.dumps(data["digests"], sort_keys=True) for r, data in per_rank.items()}
    assert len(set(digests.values())) == 1, f"ranks got different bits: {digests}"


def test_adasum_on_three_ranks_is_refused_as_horovod_refuses_it():
    run, per_rank = run_worker("horovodrun", 3)
    assert sorted(per_rank) == [0, 1, 2], f"ranks reported {sorted(per_rank)}\n{run.output[-5000:]}"
    for r, data in per_rank.items():
        assert data["results"] == {"non_power_of_two_sizes_are_refused_as_horovod_refuses_them": "ok"}, data


ADASUM_SUITES = {
    "adasum_pytorch-np2": Suite("test_adasum_pytorch.py", 2),
    "adasum_pytorch-np4": Suite("test_adasum_pytorch.py", 4),
    "adasum_tensorflow-np2": Suite("test_adasum_tensorflow.py", 2, {"TF_USE_LEGACY_KERAS": "1"}, framework="tensorflow"),
    "adasum_tensorflow-np4": Suite("test_adasum_tensorflow.py", 4, {"TF_USE_LEGACY_KERAS": "1"}, framework="tensorflow"),
}
# The tests of these suites that need a GPU skip themselves (torch.cuda / NCCL); on CPU the ones
# that run are these, and each must pass.
MUST_PASS = {
    "test_adasum_pytorch.py": {"TorchAdasumTests::test_stability", "TorchAdasumTests::test_stability_2"},
    "test_adasum_tensorflow.py": {"TensorFlowAdasumTests::test_horovod_adasum_multiple_allreduce_cpu"},
}


# Wide (tests/conftest.py: the horovod_suites_wide tier): TensorFlow's at np=4. Adasum's combining
# at 4 ranks is the engine's, the same for either framework (torch's suite and the worker above run
# it at np=4); TensorFlow's front is the np=2 run's. 49 s of a TF launch at 4 ranks in CI.
ADASUM_WIDE = {"adasum_tensorflow-np4"}


@pytest.mark.parametrize("name", [param_in_tier("horovod_suites_wide", ADASUM_WIDE, n, n)
                                  for n in sorted(ADASUM_SUITES)])
def test_horovods_adasum_suite_under_mpirun(name, capsys):
    suite = ADASUM_SUITES[name]
    _require_suite(suite)
    results = launch.scratch_dir(f"herring-horovod-{name}-")
    suite_file = os.path.join(SUITES_DIR, "parallel", suite.file)
    args = [RANK_WORKER, results, "-q", "--timeout=300", "-o", "addopts=", "--rootdir", os.path.dirname(suite_file),
            suite_file]
    run = launch.mpirun(suite.np, args, timeout=900, **suite.env)
    per_rank = _outcomes(results, suite.np)
    assert sorted(per_rank) == list(range(suite.np)), f"ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    for r, cases in per_rank.items():
        failed = {t: m[:1500] for t, (o, m) in cases.items() if o == "failed"}
        assert not failed, f"rank {r}: {failed}"
        passed = {t for t, (o, _) in cases.items() if o == "passed"}
        assert MUST_PASS[suite.file] <= passed, f"rank {r}: passed only {sorted(passed)} of {sorted(cases)}"
    assert run.returncode == 0, run.output[-6000:]
    counts = {o: sum(1 for (oo, _) in per_rank[0].values() if oo == o) for o in ("passed", "skipped")}
    with capsys.disabled():
        print(f"\n[horovod suite {name}] np={suite.np} under mpirun: {counts['passed']} passed, "
              f"{counts['skipped']} skipped (GPU-only); {run.seconds:.0f} s")
