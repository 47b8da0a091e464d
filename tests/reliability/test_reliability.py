"""Faults in every phase, the stall inspector and HERRING_VERIFY: every survivor raises within
the deadline with a message naming the rank, nothing hangs, the launcher exits non-zero, and
nothing is left in /dev/shm (each fault's job has a /dev/shm of its own: launch.PRIVATE_SHM_SCRIPT,
so the file runs beside others)."""

import json
import os

import pytest

import launch

WORKERS = os.path.join("tests", "reliability", "workers")


def herring_segments_left(run):
    """herring's names the job left in its own /dev/shm."""
    return [name for name in run.shm_left if name.startswith("herring.")]


def run_fault(spec, np=4, hosts=2, **env):
    """Runs the phase-fault worker with HERRING_FAULT=spec on `hosts` simulated hosts."""
    results = launch.scratch_dir("herring-fault-")
    args = launch.on_simulated_hosts(np // hosts if hosts > 1 else None, os.path.join(WORKERS, "phase_fault_worker.py"))
    run = launch.horovodrun(np, args, timeout=180, private_shm=True, HERRING_TEST_RESULTS=results, HERRING_FAULT=spec,
                            HERRING_TIMEOUT_SECONDS=env.pop("HERRING_TIMEOUT_SECONDS", 5), **env)
    outcomes = launch.rank_results(results, np)
    return run, outcomes


FAULTS = [
    # (spec, victim, what the survivors' message must contain)
    ("kill:negotiate:3:5", 3, "rank 3"),
    ("kill:gather:1:4", 1, "rank 1"),
    ("kill:shm:2:3", 2, "rank 2"),
    ("kill:push:3:2", 3, "rank 3"),
    ("kill:serve:0:2", 0, "rank 0"),
    ("kill:pull:2:3", 2, "rank 2"),
    ("exit:scatter:1:2", 1, "rank 1"),
    ("reset:push:2:2", 2, "rank 2"),
    ("stop:pull:1:2", 1, "rank 1"),
    ("stop:shm:3:2", 3, "rank 3"),
]


# The same faults inside a zero-copy allreduce (one host, every tensor in zero-copy memory): the
# survivors wait for the victim's units, not for its staged chunks.
ZERO_COPY_FAULTS = [("kill:shm:2:3", 2, "rank 2"), ("stop:shm:1:2", 1, "rank 1")]
ZERO_COPY_STEP = "(during zero-copy allreduce)"


# The same faults while the ranks of one host copy each other's slices of the sum out of their
# tensors (HERRING_READ_PEER_TENSORS=outputs, 4 ranks), and while they reduce in place through
# cross-memory copies (=always: "scatter" there comes after a unit, with the units of the others
# still to copy): a victim gone mid-read is named, and the others neither crash nor hang.
PEER_READ_FAULTS = [("kill:shm:2:3", 2, "rank 2"), ("exit:scatter:1:2", 1, "rank 1"), ("stop:shm:3:2", 3, "rank 3")]
CROSS_MEMORY_FAULTS = [("kill:shm:2:3", 2, "rank 2"), ("exit:scatter:1:2", 1, "rank 1"),
                       ("kill:scatter:3:5", 3, "rank 3"), ("stop:scatter:0:3", 0, "rank 0")]


@pytest.mark.parametrize("spec,victim,needle", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_in_every_phase(spec, victim, needle):
    check_fault(spec, victim, needle, hosts=2)


@pytest.mark.parametrize("spec,victim,needle", ZERO_COPY_FAULTS, ids=[f[0] for f in ZERO_COPY_FAULTS])
def test_fault_in_a_zero_copy_allreduce(spec, victim, needle):
    outcomes = check_fault(spec, victim, needle, hosts=1, HERRING_TEST_ZERO_COPY=1)
    for r, o in outcomes.items():  # ... and say so, once: the fault hit the zero-copy path
        assert o["error"].count(ZERO_COPY_STEP) == 1, o


@pytest.mark.parametrize("spec,victim,needle", PEER_READ_FAULTS, ids=[f[0] for f in PEER_READ_FAULTS])
def test_fault_while_ranks_read_each_others_tensors(spec, victim, needle):
    check_fault(spec, victim, needle, hosts=1, HERRING_READ_PEER_TENSORS="outputs")


@pytest.mark.parametrize("spec,victim,needle", CROSS_MEMORY_FAULTS, ids=[f[0] for f in CROSS_MEMORY_FAULTS])
def test_fault_in_a_cross_memory_allreduce(spec, victim, needle):
    outcomes = check_fault(spec, victim, needle, hosts=1, HERRING_READ_PEER_TENSORS="always")
    for r, o in outcomes.items():  # ... and say so: the fault hit the cross-memory path
        assert "cross-memory allreduce" in o["error"] or "process_vm_" in o["error"], o


def check_fault(spec, victim, needle, hosts, **env):
    run, outcomes = run_fault(spec, hosts=hosts, **env)
    assert run.returncode != 0, run.output[-3000:]
    survivors = [r for r in range(4) if r != victim]
    for r in survivors:
        assert r in outcomes, f"rank {r} did not report\n{run.output[-4000:]}"
        o = outcomes[r]
        assert o["error"] and "HorovodInternalError" in o["error"], o
        assert needle in o["error"], o
        # HERRING_TIMEOUT_SECONDS=5: a stopped peer is detected by silence, a dead one at once.
        assert o["seconds_to_error"] < 5 + 5, o
    assert run.seconds < 120, run.seconds
    assert not herring_segments_left(run), f"shared-memory segments left behind: {herring_segments_left(run)}"
    return {r: outcomes[r] for r in survivors}


def test_stall_inspector_names_missing_ranks_and_tensors_then_shuts_down():
    results = launch.scratch_dir("herring-stall-")
    run = launch.horovodrun(3, [os.path.join(WORKERS, "stall_worker.py")], timeout=120,
                            HERRING_TEST_RESULTS=results, HOROVOD_STALL_CHECK_TIME_SECONDS=2,
                            HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=6)
    assert run.returncode != 0
    warning = [line for line in run.output.splitlines() if "Missing ranks" in line and "WARNING" in line]
    assert warning, run.output[-4000:]
    # Cached collectives reach the coordinator half a check period later than uncached ones, so
    # the first report may name only some; the later ones name all.
    assert any("2: ['grad.1']" in w and "0: ['only.rank2']" in w for w in warning), warning
    for r in range(3):
        with open(os.path.join(results, f"{r}.json")) as f:
            o = json.load(f)
        assert o["error"] and "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" in o["error"], o
        assert "2: ['grad.1']" in o["error"], o
        assert o["seconds"] < 20, o


def test_verify_detects_a_corrupted_result():
    run, outcomes = run_fault("corrupt:scatter:1:3", np=3, hosts=1, HERRING_VERIFY=1)
    assert run.returncode != 0
    for r in range(3):
        o = outcomes[r]
        assert o["error"], o
        assert "HERRING_VERIFY" in o["error"] and "rank 1 has another" in o["error"], o


def test_verify_passes_on_healthy_runs():
    run, outcomes = run_fault("", np=3, hosts=1, HERRING_VERIFY=1)
    assert run.returncode == 0, run.output[-3000:]
    assert all(o["error"] is None for o in outcomes.values())
