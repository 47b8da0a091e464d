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
# The checks that take seconds whatever launched the ranks: inductor's compile, the engine's
# deadlock verdict (HERRING_DEADLOCK_TIME_SECONDS, 15 s), the timeouts' waits, a 1 s hold. They run
# at 2 and 3 ranks; the other launches run every other check (each well under a second).
SLOW = ["ddp_with_torch_compile", "mismatched_collectives_are_named",
        "timeouts_raise_and_the_collective_can_still_complete", "a_tensor_in_flight_keeps_its_memory"]
WITHOUT_HOROVOD = {"HERRING_TEST_WITHOUT_HOROVOD": "1", "HOROVOD_BACKEND": None}
# name -> (launcher, ranks, checks, environment). The first runs as a torch user has it, without
# Horovod installed (every import of it fails in the ranks; HOROVOD_BACKEND unset); mpirun's with
# DDP's buckets left in ordinary memory (HERRING_DIST_ZERO_COPY=0: its check says nothing moved).
CONFIGS = {
    "torchrun-np2-without-horovod": ("torchrun", 2, CHECK_NAMES, WITHOUT_HOROVOD),
    "horovodrun-np3": ("horovodrun", 3, CHECK_NAMES, {}),
    "torchrun-np3": ("torchrun", 3, [c for c in CHECK_NAMES if c not in SLOW], {}),
    "horovodrun-np2": ("horovodrun", 2, [c for c in CHECK_NAMES if c not in SLOW], {}),
    "mpirun-np2-zero-copy-off": ("mpirun", 2, [c for c in CHECK_NAMES if c not in SLOW],
                                 {"HERRING_DIST_ZERO_COPY": "0"}),
}
EXPECTED_LAUNCHER = {"torchrun": "torchrun", "horovodrun": "horovodrun", "mpirun": "mpirun"}


def run_worker(launcher, np, options=(), **env):
    if options:
        env["options"] = options  # torchrun's and horovodrun's own flags
    return launch.run_with_results(LAUNCHERS[launcher], np, [WORKER], prefix="herring-torch-dist-", timeout=600, **env)


_launches = {}


def launched(name):
    """The launch of CONFIGS[name], once per session: (Run, {rank: what it reported})."""
    if name not in _launches:
        launcher, np, names, env = CONFIGS[name]
        only = {} if names == CHECK_NAMES else {"HERRING_TEST_ONLY": ",".join(names)}
        _launches[name] = run_worker(launcher, np, **env, **only)
    return _launches[name]


EVERY_RANK_REPORTED = "every_rank_reported"
# (launch, what) in launch order: its ranks reported, then each of its checks.
RUNS = [(name, what) for name, (_, _, names, _) in CONFIGS.items() for what in [EVERY_RANK_REPORTED, *names]]


@pytest.mark.parametrize("name,what", RUNS, ids=[f"{n}-{w}" for n, w in RUNS])
def test_launch(name, what):
    launcher, np, names, _ = CONFIGS[name]
    run, per_rank = launched(name)
    if what == EVERY_RANK_REPORTED:
        checks.assert_every_rank_reported(name, range(np), run, per_rank)
        for r, data in per_rank.items():
            assert data["launcher"] == EXPECTED_LAUNCHER[launcher], (r, data["launcher"])  # rank/size from one place
            assert sorted(data["results"]) == sorted(names), (r, sorted(data["results"]))
    else:
        checks.assert_check_passed(name, what, run, per_rank)


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
