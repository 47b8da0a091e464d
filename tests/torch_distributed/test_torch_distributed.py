"""torch.distributed with backend "herring" (hvd_herring.torch.distributed), run inside real ranks
launched by torchrun, horovodrun and mpirun: every collective and dtype, DDP (plain, fp16
compression, PowerSGD, torch.compile), FSDP2, subgroups, one engine beside Horovod's API, and the
errors (mismatch, timeout, peer death), against single-process references. One launch runs every
check; each check is reported as its own test."""

import os

import pytest

import checks
import launch

WORKER = os.path.join("tests", "torch_distributed", "workers", "torch_distributed_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
LAUNCHERS = {"torchrun": launch.torchrun, "horovodrun": launch.horovodrun, "mpirun": launch.mpirun}
# name -> (launcher, ranks); the first runs as a torch user has it, without Horovod installed (every
# import of it fails in the ranks; HOROVOD_BACKEND unset).
CONFIGS = {
    "torchrun-np2-without-horovod": ("torchrun", 2),
    "torchrun-np3": ("torchrun", 3),
    "horovodrun-np2": ("horovodrun", 2),
    "horovodrun-np3": ("horovodrun", 3),
    "mpirun-np2": ("mpirun", 2),
}
EXPECTED_LAUNCHER = {"torchrun": "torchrun", "horovodrun": "horovodrun", "mpirun": "mpirun"}


def run_worker(launcher, np, options=(), **env):
    if options:
        env["options"] = options  # torchrun's and horovodrun's own flags
    return launch.run_with_results(LAUNCHERS[launcher], np, [WORKER], prefix="herring-torch-dist-", timeout=600, **env)


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    launcher, np = CONFIGS[request.param]
    env = {"HERRING_TEST_WITHOUT_HOROVOD": "1", "HOROVOD_BACKEND": None} if "without-horovod" in request.param else {}
    run, per_rank = run_worker(launcher, np, **env)
    return request.param, launcher, np, run, per_rank


def test_every_rank_reported(launched):
    name, launcher, np, run, per_rank = launched
    checks.assert_every_rank_reported(name, range(np), run, per_rank)
    for r, data in per_rank.items():
        assert data["launcher"] == EXPECTED_LAUNCHER[launcher], (r, data["launcher"])  # rank/size from one place


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(launched, check):
    name, launcher, np, run, per_rank = launched
    checks.assert_check_passed(name, check, run, per_rank)


def test_ddp_buckets_stay_in_ordinary_memory_with_the_knob_off():
    check = "ddp_buckets_move_into_zero_copy_memory"
    run, per_rank = run_worker("torchrun", 2, HERRING_DIST_ZERO_COPY="0", HERRING_TEST_ONLY=check)
    assert sorted(per_rank) == [0, 1], f"ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    for r, data in sorted(per_rank.items()):
        assert data["results"] == {check: "ok"}, f"rank {r}: {data['results']}"


@pytest.mark.parametrize("launcher,np,scenario", [("torchrun", 3, "peer_death"), ("horovodrun", 2, "peer_death"),
                                                   ("torchrun", 2, "ddp_peer_death")])
def test_peer_death_raises_on_every_rank_naming_the_rank(launcher, np, scenario):
    # torchrun looks at its ranks every 0.1 s and SIGTERMs the survivors as soon as one died, on
    # any backend: on a loaded machine it could end a survivor between its error and its report
    # (a fresh-clone run met that once). Looking every 5 s leaves the survivors time to report
    # what they raised; the worker still checks that they raised well within the deadline.
    options = ["--monitor-interval", "5"] if launcher == "torchrun" else []
    run, per_rank = run_worker(launcher, np, options=options, HERRING_TORCH_SCENARIO=scenario)
    survivors = [r for r in range(np) if r != 1]
    assert sorted(per_rank) == survivors, f"ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    for r in survivors:
        assert per_rank[r]["results"][scenario] == "ok", f"rank {r}: {per_rank[r]['results'][scenario]}"
