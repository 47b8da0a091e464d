"""Horovod's own parallel test suites (v0.28.1, unmodified, in ../shared/horovod-tests) run on the
herring engine in real ranks, as Horovod runs them: `horovodrun --gloo -np N python -m pytest
<suite>` with HOROVOD_BACKEND=herring. This is the compatibility contract: each suite runs whole (nothing deselected, so that one failure
cannot hide a cascade of others behind it), and any failure fails this test, except the ones
listed below, each with the reason it lies outside the backend and a piece of its failure message
that proves it failed for that reason (checked on the same run).

Where ../shared/horovod-tests is absent (a clone outside this project's CI) the suites are skipped
with a message saying so; HERRING_HOROVOD_TESTS points elsewhere."""

import importlib.util
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

import pytest

import launch
from tiers import param_in_tier

SUITES_DIR = os.environ.get("HERRING_HOROVOD_TESTS") or os.path.join(
    os.path.dirname(launch.ROOT), "shared", "horovod-tests")
RANK_WORKER = os.path.join("tests", "horovod_api", "workers", "horovod_suite_rank.py")
KERAS2 = {"TF_USE_LEGACY_KERAS": "1"}
# Short enough that a divergence the suites provoke on purpose costs seconds, not minutes.
ENGINE_ENV = {"HERRING_DEADLOCK_TIME_SECONDS": "5", "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"}


@dataclass
class KnownFailure:
    test: str             # Class::method
    reason: str           # why it lies outside the backend
    message: str          # a piece of the failure message that shows it failed for that reason
    # False: the test's own check fails on some ranks only (e.g. on the ranks whose slice of a
    # reducescatter holds a value the test rounds differently); it must fail on one at least.
    on_every_rank: bool = True


MUON = ("torch 2.13 added torch.optim.Muon, which takes 2-D parameters only; the test builds every "
        "optimizer in torch.optim for a model with 1-D biases, so it fails in Muon's constructor "
        "before any collective (real Horovod-gloo 0.28.1 fails the same three)")
FP16_SUM_OF_THREE = ("the float16 sum of three ranks is rounded to float16 (as Horovod's CPU "
                     "reduction rounds it), but the test compares it bit for bit with the unrounded "
                     "float32 product factor * x * 3; it holds only for sizes where that is "
                     "representable (np <= 2)")
AVERAGE_BY_RECIPROCAL = ("Average is a sum scaled by float32(1 / size), as Horovod computes it "
                         "(ScaleBufferCPUImpl with (float)scale_factor); the test compares bit for bit with "
                         "a division by the size, which rounds differently when 1 / size is not a power of "
                         "two (np = 3). Only the ranks that did not join first check: the first joiner "
                         "goes on to allgather_object alone and gets the deadlock error")

TORCH_KNOWN = [
    KnownFailure("TorchTests::test_broadcast_state", MUON, "Muon only supports 2D parameters"),
    KnownFailure("TorchTests::test_broadcast_state_options", MUON, "Muon only supports 2D parameters"),
    KnownFailure("TorchTests::test_force_allreduce", MUON, "Muon only supports 2D parameters"),
]
TORCH_NP3_KNOWN = TORCH_KNOWN + [
    KnownFailure("TorchTests::test_horovod_allreduce_prescale", FP16_SUM_OF_THREE,
                 "hvd.allreduce produces incorrect results"),
    KnownFailure("TorchTests::test_horovod_reducescatter_prescale", FP16_SUM_OF_THREE,
                 "hvd.reducescatter produces incorrect results", on_every_rank=False),
    KnownFailure("TorchTests::test_horovod_grouped_reducescatter_prescale", FP16_SUM_OF_THREE,
                 "hvd.grouped_reducescatter produces incorrect results", on_every_rank=False),
    KnownFailure("TorchTests::test_horovod_join_allreduce", AVERAGE_BY_RECIPROCAL,
                 "hvd.join with hvd.allreduce produces incorrect results", on_every_rank=False),
]


KERAS2_ONLY_TEST_CODE = ("the test's own code is written for Keras 2 and fails under Keras 3 before "
                         "any collective (the same suite passes under Keras 2, run above)")
TF_KERAS3_KNOWN = [
    KnownFailure("TensorFlowTests::test_horovod_syncbn_cpu", KERAS2_ONLY_TEST_CODE + ": its reference "
                 "layer passes BatchNormalization(fused=False), an argument Keras 3 removed",
                 "Unrecognized keyword arguments passed to BatchNormalization"),
    KnownFailure("TensorFlowTests::test_partial_distributed_gradient_tape", KERAS2_ONLY_TEST_CODE +
                 ": it calls var.ref(), which Keras 3 variables do not have", "has no attribute 'ref'"),
]


FLOAT16_NEP50 = ("NumPy 2 compares a float16 with a Python float in float16 (NEP 50): the test's "
                 "assertLess(err, 1e-8) rounds 1e-8 to float16 zero, so an exact gradient (err 0.0, the "
                 "message shows it) fails; tf.Tensor.__rsub__ made err a float16. Not a difference in the "
                 "result")
TF_PROCESS_SETS_KNOWN = [
    KnownFailure("TensorFlowProcessSetsTests::test_horovod_reducescatter_grad_cpu_process_sets", FLOAT16_NEP50,
                 "np.float16(0.0) not less than 1e-08"),
]


@dataclass
class Suite:
    file: str
    np: int
    env: dict = field(default_factory=dict)
    known: list = field(default_factory=list)
    framework: str = "torch"


SUITES = {
    "torch-np2": Suite("test_torch.py", 2, known=TORCH_KNOWN),
    "torch-np3": Suite("test_torch.py", 3, known=TORCH_NP3_KNOWN),
    "torch-np4": Suite("test_torch.py", 4, known=TORCH_KNOWN),
    # Horovod's TensorFlow suites were written for Keras 2: tf_keras through TF_USE_LEGACY_KERAS.
    "tensorflow-keras2": Suite("test_tensorflow.py", 2, KERAS2, framework="tensorflow"),
    "tensorflow2_keras-keras2": Suite("test_tensorflow2_keras.py", 2, KERAS2, framework="tensorflow"),
    # TF1-only: every test skips itself on TensorFlow 2; run so that nothing else breaks.
    "tensorflow_keras-keras2": Suite("test_tensorflow_keras.py", 2, KERAS2, framework="tensorflow"),
    "tensorflow-keras3": Suite("test_tensorflow.py", 2, known=TF_KERAS3_KNOWN, framework="tensorflow"),
    "timeline-np2": Suite("test_timeline.py", 2),
    # Process sets (issue 25), at np=2 and np=3 (the dynamic suite's tests need np >= 3).
    **{f"process_sets_static-np{n}": Suite("test_process_sets_static.py", n, framework="tensorflow")
       for n in (2, 3)},
    **{f"tensorflow_process_sets-keras2-np{n}": Suite("test_tensorflow_process_sets.py", n, KERAS2,
                                                      TF_PROCESS_SETS_KNOWN, "tensorflow") for n in (2, 3)},
    **{f"tensorflow_process_sets-keras3-np{n}": Suite("test_tensorflow_process_sets.py", n,
                                                      known=TF_PROCESS_SETS_KNOWN, framework="tensorflow")
       for n in (2, 3)},
    **{f"tensorflow_process_sets_dynamic-np{n}": Suite("test_tensorflow_process_sets_dynamic.py", n, KERAS2,
                                                       framework="tensorflow") for n in (2, 3)},
    **{f"tensorflow2_keras_process_sets-np{n}": Suite("test_tensorflow2_keras_process_sets.py", n, KERAS2,
                                                      framework="tensorflow") for n in (2, 3)},
}


# Each suite file runs whole in the default run (what CI runs) at least once; these runs, at more
# ranks or under the other Keras, form the separate tier horovod_suites_wide (tests/conftest.py:
# `bash scripts/test.sh -m horovod_suites_wide`), 5.4 min of the 13.6 the suites took on
# 2026-11-29 (test_tensorflow.py alone 130-143 s per Keras). Kept in the default run: the first
# run of each file, the torch suite at np=3 (odd sizes), process sets at np=3 under Keras 2 and at
# np=2 under Keras 3. The process-set suites that run at np=3 in the default run are wide at np=2:
# at np=3 their sets have 1 to 3 members (a set of one rank beside a set of the others, as at np=2,
# and the even and odd ranks' sets of unequal sizes), and each launch costs 4-5 s of CPU per
# TensorFlow rank start (np=3 instead of 4: since 2026-12-07, a rank start less per suite).
# test_tensorflow_process_sets.py uses no Keras: under Keras 3 it runs the code it runs under Keras 2
# (the default run's, at np=3), so both of its Keras 3 runs are wide.
WIDE = {"torch-np4", "tensorflow-keras3", "tensorflow_process_sets-keras2-np2",
        "tensorflow_process_sets-keras3-np2", "tensorflow_process_sets-keras3-np3", "process_sets_static-np2",
        "tensorflow_process_sets_dynamic-np2", "tensorflow2_keras_process_sets-np2"}


def _param(name, *values, **kwargs):
    return param_in_tier("horovod_suites_wide", WIDE, name, *values, **kwargs)


def _outcomes(results_dir, np):
    """{rank: {test id: (outcome, message)}} from the ranks' JUnit reports."""
    per_rank = {}
    for r in range(np):
        path = os.path.join(results_dir, f"rank{r}.xml")
        if not os.path.exists(path):
            continue
        cases = {}
        for case in ElementTree.parse(path).iter("testcase"):
            test = f"{case.get('classname').split('.')[-1]}::{case.get('name')}"
            outcome, message = cases.get(test, ("passed", ""))
            for child in case:
                if child.tag in ("failure", "error"):
                    # A failure in teardown adds a second element to the same test: keep both.
                    outcome = "failed"
                    message += f"{child.get('message') or ''}\n{child.text or ''}\n"
                elif child.tag == "skipped" and outcome == "passed":
                    outcome = "skipped"
            cases[test] = (outcome, message)
        per_rank[r] = cases
    return per_rank


def _launch(suite, label):
    """One horovodrun job running the whole suite in every rank."""
    results_dir = launch.scratch_dir(f"herring-horovod-{label}-")
    suite_file = os.path.join(SUITES_DIR, "parallel", suite.file)
    args = [RANK_WORKER, results_dir, "-q", "--timeout=300", "-o", "addopts=",
            "--rootdir", os.path.dirname(suite_file), suite_file]
    run = launch.horovodrun(suite.np, args, timeout=1200, **ENGINE_ENV, **suite.env)
    return run, _outcomes(results_dir, suite.np)


_whole_runs = {}


def _whole_run(name):
    """The suite's one launch, shared by its pass test and its known-failure tests."""
    if name not in _whole_runs:
        _whole_runs[name] = _launch(SUITES[name], name)
    return _whole_runs[name]


def _require_suite(suite):
    if not os.path.isdir(os.path.join(SUITES_DIR, "parallel")):
        pytest.skip(f"Horovod's test suites are not at {SUITES_DIR} (they come with this project's CI "
                    "as ../shared/horovod-tests; set HERRING_HOROVOD_TESTS to run them elsewhere)")
    if suite.framework == "tensorflow" and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")


@pytest.mark.parametrize("name", [_param(name, name, id=name) for name in sorted(SUITES)])
def test_horovod_suite_passes(name, capsys):
    suite = SUITES[name]
    _require_suite(suite)
    known = {k.test for k in suite.known}
    run, per_rank = _whole_run(name)
    assert sorted(per_rank) == list(range(suite.np)), f"ranks reported {sorted(per_rank)}\n{run.output[-8000:]}"
    failures = {f"rank {r}: {t}": m[:1500] for r, cases in per_rank.items() for t, (o, m) in cases.items()
                if o == "failed" and t not in known}
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in sorted(failures.items()))
    counts = {o: sum(1 for (oo, _) in per_rank[0].values() if oo == o) for o in ("passed", "skipped", "failed")}
    # pytest exits 1 in the ranks where a listed failure failed; anything else is the job's failure.
    assert per_rank[0] and (run.returncode == 0 or known), run.output[-8000:]
    with capsys.disabled():
        print(f"\n[horovod suite {name}] {suite.file} np={suite.np}, whole: {counts['passed']} passed, "
              f"{counts['skipped']} skipped, {counts['failed']} listed failures (rank 0); {run.seconds:.0f} s")


def _known_cases():
    for name in sorted(SUITES):
        for k in SUITES[name].known:
            yield name, k


@pytest.mark.parametrize("name,failure", [_param(n, n, k, id=f"{n}:{k.test.split('::')[-1]}")
                                           for n, k in _known_cases()])
def test_known_failure_fails_for_its_reason(name, failure):
    """Each listed failure still fails in the suite's whole run, and for the reason given (not for
    something of ours)."""
    suite = SUITES[name]
    _require_suite(suite)
    run, per_rank = _whole_run(name)
    assert sorted(per_rank) == list(range(suite.np)), f"ranks reported {sorted(per_rank)}\n{run.output[-8000:]}"
    outcomes = {r: cases.get(failure.test, ("missing", "")) for r, cases in per_rank.items()}
    failed = [r for r, (o, _) in outcomes.items() if o == "failed"]
    passed = [r for r in outcomes if r not in failed]
    assert failed and not (failure.on_every_rank and passed), (
        f"{failure.test} did not fail on ranks {passed} ({outcomes}): if it passes now, remove it from the "
        f"known failures of {name}")
    assert any(failure.message in outcomes[r][1] for r in failed), (
        f"{failure.test} failed, but not for the listed reason ({failure.reason}); messages:\n" +
        "\n".join(f"rank {r}: {m[:3000]}" for r, (_, m) in outcomes.items()))
