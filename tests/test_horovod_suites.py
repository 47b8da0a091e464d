"""Horovod's own parallel test suites (v0.28.1, unmodified, in ../shared/horovod-tests) run on the
herring engine in real ranks, as Horovod runs them: `horovodrun --gloo -np N python -m pytest
<suite>` with HOROVOD_BACKEND=herring. This is the compatibility contract: any failure fails this
test, except the ones listed below, each with the reason it lies outside the backend and a piece
of its failure message that proves it failed for that reason (checked in a launch of its own).

Where ../shared/horovod-tests is absent (a clone outside this project's CI) the suites are skipped
with a message saying so; HERRING_HOROVOD_TESTS points elsewhere."""

import importlib.util
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

import pytest

import launch

SUITES_DIR = os.environ.get("HERRING_HOROVOD_TESTS") or os.path.join(
    os.path.dirname(launch.ROOT), "shared", "horovod-tests")
RANK_WORKER = os.path.join("tests", "workers", "horovod_suite_rank.py")
KERAS2 = {"TF_USE_LEGACY_KERAS": "1"}
# Short enough that a divergence the suites provoke on purpose costs seconds, not minutes.
ENGINE_ENV = {"HERRING_DEADLOCK_TIME_SECONDS": "5", "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"}


@dataclass
class KnownFailure:
    test: str             # Class::method
    reason: str           # why it lies outside the backend
    message: str          # a piece of the failure message that shows it failed for that reason
    # The test leaves the ranks out of step (some ranks fail an assertion others pass), which
    # would fail whatever runs after it: it runs in a launch of its own.
    alone: bool = False


MUON = ("torch 2.13 added torch.optim.Muon, which takes 2-D parameters only; the test builds every "
        "optimizer in torch.optim for a model with 1-D biases, so it fails in Muon's constructor "
        "before any collective (real Horovod-gloo 0.28.1 fails the same three)")
FP16_SUM_OF_THREE = ("the float16 sum of three ranks is rounded to float16 (as Horovod's CPU "
                     "reduction rounds it), but the test compares it bit for bit with the unrounded "
                     "float32 product factor * x * 3; it holds only for sizes where that is "
                     "representable (np <= 2)")
UNNAMED_AFTER_JOIN = ("an unnamed allgather is named after how many collectives its rank issued "
                      "before (Horovod: the handle counter); at np >= 3 the rank that joined in the "
                      "previous round issued fewer, so the two ranks' allgathers get different names "
                      "and can never match. Horovod 0.28.1 hangs here; we raise the deadlock error "
                      "naming both")

AVERAGE_BY_RECIPROCAL = ("Average is a sum scaled by float32(1 / size), as Horovod computes it; the "
                         "test compares bit for bit with a division by the size, which rounds "
                         "differently when 1 / size is not a power of two (np = 3)")

TORCH_KNOWN = [
    KnownFailure("TorchTests::test_broadcast_state", MUON, "Muon only supports 2D parameters"),
    KnownFailure("TorchTests::test_broadcast_state_options", MUON, "Muon only supports 2D parameters"),
    KnownFailure("TorchTests::test_force_allreduce", MUON, "Muon only supports 2D parameters"),
]
TORCH_NP3_KNOWN = TORCH_KNOWN + [
    KnownFailure("TorchTests::test_horovod_allreduce_prescale", FP16_SUM_OF_THREE,
                 "hvd.allreduce produces incorrect results"),
    KnownFailure("TorchTests::test_horovod_reducescatter_prescale", FP16_SUM_OF_THREE,
                 "hvd.reducescatter produces incorrect results", alone=True),
    KnownFailure("TorchTests::test_horovod_grouped_reducescatter_prescale", FP16_SUM_OF_THREE,
                 "hvd.grouped_reducescatter produces incorrect results", alone=True),
    KnownFailure("TorchTests::test_horovod_join_allgather", UNNAMED_AFTER_JOIN, "Deadlock:", alone=True),
    KnownFailure("TorchTests::test_horovod_join_allreduce", AVERAGE_BY_RECIPROCAL,
                 "hvd.join with hvd.allreduce produces incorrect results", alone=True),
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
    # Horovod's TensorFlow suites were written for Keras 2: tf_keras through TF_USE_LEGACY_KERAS.
    "tensorflow-keras2": Suite("test_tensorflow.py", 2, KERAS2, framework="tensorflow"),
    "tensorflow2_keras-keras2": Suite("test_tensorflow2_keras.py", 2, KERAS2, framework="tensorflow"),
    # TF1-only: every test skips itself on TensorFlow 2; run so that nothing else breaks.
    "tensorflow_keras-keras2": Suite("test_tensorflow_keras.py", 2, KERAS2, framework="tensorflow"),
    "tensorflow-keras3": Suite("test_tensorflow.py", 2, known=TF_KERAS3_KNOWN, framework="tensorflow"),
    "timeline-np2": Suite("test_timeline.py", 2),
}


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


def _launch(suite, label, tests=None, deselect=()):
    """One horovodrun job running the suite (or only `tests` of it) in every rank."""
    results_dir = launch.scratch_dir(f"herring-horovod-{label}-")
    suite_file = os.path.join(SUITES_DIR, "parallel", suite.file)
    args = [RANK_WORKER, results_dir, "-q", "--timeout=300", "-o", "addopts=",
            "--rootdir", os.path.dirname(suite_file)]
    args += [suite_file] if tests is None else [f"{suite_file}::{t}" for t in tests]
    for t in deselect:
        args += ["--deselect", f"{suite.file}::{t}"]  # node ids are relative to --rootdir
    run = launch.horovodrun(suite.np, args, timeout=1200, **ENGINE_ENV, **suite.env)
    return run, _outcomes(results_dir, suite.np)


def _require_suite(suite):
    if not os.path.isdir(os.path.join(SUITES_DIR, "parallel")):
        pytest.skip(f"Horovod's test suites are not at {SUITES_DIR} (they come with this project's CI "
                    "as ../shared/horovod-tests; set HERRING_HOROVOD_TESTS to run them elsewhere)")
    if suite.framework == "tensorflow" and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")


@pytest.mark.parametrize("name", sorted(SUITES))
def test_horovod_suite_passes(name, capsys):
    suite = SUITES[name]
    _require_suite(suite)
    known = sorted(k.test for k in suite.known)
    run, per_rank = _launch(suite, name, deselect=known)
    assert sorted(per_rank) == list(range(suite.np)), f"ranks reported {sorted(per_rank)}\n{run.output[-8000:]}"
    failures = {f"rank {r}: {t}": m[:1500] for r, cases in per_rank.items() for t, (o, m) in cases.items()
                if o == "failed"}
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in sorted(failures.items()))
    counts = {o: sum(1 for (oo, _) in per_rank[0].values() if oo == o) for o in ("passed", "skipped")}
    assert per_rank[0] and run.returncode == 0, run.output[-8000:]
    with capsys.disabled():
        print(f"\n[horovod suite {name}] {suite.file} np={suite.np}: {counts['passed']} passed, "
              f"{counts['skipped']} skipped, {len(known)} known failures run apart; {run.seconds:.0f} s")


def _known_cases():
    for name in sorted(SUITES):
        for k in SUITES[name].known:
            yield name, k


def _known_groups(name):
    """Known failures of a suite as launches: the ones that keep ranks in step together, the rest
    one per launch."""
    known = SUITES[name].known
    together = [k for k in known if not k.alone]
    return ([together] if together else []) + [[k] for k in known if k.alone]


_known_runs = {}


def _known_run(name, failure):
    for group in _known_groups(name):
        if failure in group:
            key = (name, tuple(k.test for k in group))
            if key not in _known_runs:
                _known_runs[key] = _launch(SUITES[name], f"{name}-known", tests=[k.test for k in group])
            return _known_runs[key]
    raise KeyError(failure.test)


@pytest.mark.parametrize("name,failure", list(_known_cases()),
                         ids=[f"{n}:{k.test.split('::')[-1]}" for n, k in _known_cases()])
def test_known_failure_fails_for_its_reason(name, failure):
    """Each listed failure still fails, and for the reason given (not for something of ours)."""
    suite = SUITES[name]
    _require_suite(suite)
    run, per_rank = _known_run(name, failure)
    # A failure that puts the ranks out of step ends the job: horovodrun terminates the others as
    # soon as the first rank exits, and a rank killed then has not written its report yet. Such a
    # rank may be missing, but only when the launcher says it killed it (SIGTERM, 143).
    unreported = [r for r in range(suite.np) if r not in per_rank]
    unexplained = [r for r in unreported if f"Process {r} exit with status code 143" not in run.output]
    assert per_rank and not unexplained, f"ranks reported {sorted(per_rank)}\n{run.output[-8000:]}"
    outcomes = {r: cases.get(failure.test, ("missing", "")) for r, cases in per_rank.items()}
    passed = [r for r, (o, _) in outcomes.items() if o != "failed"]
    assert not passed, (f"{failure.test} did not fail on ranks {passed} ({outcomes}): if it passes now, "
                        f"remove it from the known failures of {name}")
    assert any(failure.message in m for _, m in outcomes.values()), (
        f"{failure.test} failed, but not for the listed reason ({failure.reason}); messages:\n" +
        "\n".join(f"rank {r}: {m[:3000]}" for r, (_, m) in outcomes.items()))
