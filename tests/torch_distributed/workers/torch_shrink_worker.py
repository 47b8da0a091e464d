"""Ranks for tests/torch_distributed/test_torch_shrink.py: torch.distributed.shrink_group on
herring in plain processes (env:// init; no launcher that would stop the survivors when a rank
dies). One scenario per launch (HERRING_SHRINK_SCENARIO); each rank writes {"results": {check:
"ok" or the traceback}, "figures": {...}} to $HERRING_TEST_RESULTS/<rank>.json.

    python torch_shrink_worker.py --spawn <np>   starts the ranks (rank = index) and waits for each

Scenarios:
- crash_kill / crash_exception (3 ranks): rank 2 dies (SIGKILL / an uncaught exception) while the
  others reduce; they read its loss as data (err.lost_ranks), shrink the default group, reduce 20
  more times with the right sums, then make a group with new_group on the shrunk world.
- subgroup (4 ranks): rank 3 leaves in order, rank 2 is killed while the others reduce in
  new_group([0, 1, 2]); ranks 0 and 1 shrink that subgroup (not the default group).
- voluntary (3 ranks, nobody dies): ranks 0 and 1 shrink rank 2 out with SHRINK_ABORT while a
  collective of theirs is in flight (it fails at once, naming the shrink); rank 2 calling
  shrink_group([2]) gets torch's own refusal."""

import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import hvd_herring.torch.distributed  # registers "herring"; lost_ranks_of
from references import allreduce_checked

TIMEOUT_SECONDS = float(os.environ.get("HERRING_TEST_TIMEOUT", "60"))
MORE_STEPS = 20
R = N = None


def run(results, name, fn, *args):
    try:
        fn(*args)
        results[name] = "ok"
    except Exception:  # noqa: BLE001  (the traceback is the report)
        results[name] = traceback.format_exc()


def reduce_until_it_fails(group):
    """Reduces until a peer's loss fails a collective; returns that error and when it came."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            dist.all_reduce(torch.ones(1000), group=group)
        except dist.DistBackendError as e:
            return e, time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"rank {R}: no collective failed within {TIMEOUT_SECONDS} s of the peer's death")


def survive_and_shrink(results, figures, group, lost, group_rank_of, contributors, died_at_file):
    """The survivors' part: the error names the lost rank as data, the shrink and the first
    collective after it take < 2 s, then MORE_STEPS right sums."""
    error, seen_at = reduce_until_it_fails(group)
    figures["error_text"] = str(error)[:300]

    def error_exposes_the_lost_rank():
        assert getattr(error, "lost_ranks", None) == [lost], (getattr(error, "lost_ranks", None), str(error))
        assert f"rank {lost}" in str(error), str(error)
        # DDP's backward quotes the collective's error in a RuntimeError of its own (the text
        # torch 2.13 gives it), which cannot carry the property: lost_ranks_of reads both.
        quoted = RuntimeError(f"Cannot extract tensors from value: DistBackendError: {error}")
        assert hvd_herring.torch.distributed.lost_ranks_of(quoted) == [lost], str(quoted)
        assert hvd_herring.torch.distributed.lost_ranks_of(RuntimeError("unrelated")) is None

    run(results, "error_exposes_the_lost_rank_as_data", error_exposes_the_lost_rank)
    shrunk = {}

    def shrink_then_reduce():
        start = time.monotonic()
        shrunk["group"] = dist.shrink_group([group_rank_of(r) for r in error.lost_ranks], group=group)
        figures["shrink_seconds"] = time.monotonic() - start
        t = torch.full((1000,), float(R + 1))
        dist.all_reduce(t, group=None if group is None else shrunk["group"])
        figures["shrink_and_first_collective_seconds"] = time.monotonic() - start
        assert torch.all(t == sum(r + 1 for r in contributors)), t[:3].tolist()
        assert figures["shrink_and_first_collective_seconds"] < 2.0, figures
        try:
            with open(died_at_file) as f:
                figures["death_to_first_collective_seconds"] = time.time() - float(f.read())
        except OSError:
            pass

    run(results, "shrink_and_first_collective_within_2_s", shrink_then_reduce)

    def twenty_more_allreduces():
        g = None if group is None else shrunk["group"]
        assert shrunk["group"].size() == len(contributors), shrunk["group"].size()
        if group is None:  # the default group was shrunk: the world is the survivors
            assert dist.get_world_size() == len(contributors), dist.get_world_size()
            assert dist.get_rank() == contributors.index(R), dist.get_rank()
        start = time.monotonic()
        allreduce_checked(R, g, contributors, MORE_STEPS)
        figures["more_allreduces_seconds"] = time.monotonic() - start

    run(results, "twenty_more_allreduces_with_right_sums", twenty_more_allreduces)
    return shrunk.get("group")


def write_death_time(path):
    with open(path, "w") as f:
        f.write(repr(time.time()))


def crash(results, figures, how):
    """3 ranks; rank 2 dies while everyone reduces."""
    died_at = os.path.join(os.environ["HERRING_TEST_RESULTS"], "died_at")
    allreduce_checked(R, None, range(N), 3)
    dist.barrier()
    if R == 2:
        time.sleep(0.3)  # the others are reducing by now
        write_death_time(died_at)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("rank 2 fails on purpose (an uncaught exception)")
    survive_and_shrink(results, figures, None, 2, lambda r: r, [0, 1], died_at)

    def new_group_on_the_shrunk_world():
        pair = dist.new_group([0, 1])
        allreduce_checked(R, pair, [0, 1], 3)
        # Groups smaller than the world are process sets, made by every rank of the new engine.
        singles = [dist.new_group([r]) for r in range(dist.get_world_size())]
        allreduce_checked(R, singles[dist.get_rank()], [R], 2)

    run(results, "new_group_works_on_the_shrunk_world", new_group_on_the_shrunk_world)


def subgroup(results, figures):
    """4 ranks: rank 3 leaves in order; rank 2 is killed while the others reduce in [0, 1, 2];
    ranks 0 and 1 shrink that subgroup."""
    died_at = os.path.join(os.environ["HERRING_TEST_RESULTS"], "died_at")
    sub = dist.new_group([0, 1, 2])
    if R == 3:
        dist.destroy_process_group()
        return
    allreduce_checked(R, sub, [0, 1, 2], 3)
    dist.barrier(group=sub)
    if R == 2:
        time.sleep(0.3)
        write_death_time(died_at)
        os.kill(os.getpid(), signal.SIGKILL)
    default = dist.group.WORLD
    shrunk = survive_and_shrink(results, figures, sub, 2, lambda r: dist.get_group_rank(sub, r), [0, 1], died_at)

    def old_groups_refuse_naming_the_shrink():
        try:
            dist.all_reduce(torch.ones(4), group=default)
        except dist.DistBackendError as e:
            assert "shrink_group replaced" in str(e), str(e)
        else:
            raise AssertionError("a collective of the group made on the replaced engine succeeded")
        assert shrunk is not None and shrunk.size() == 2

    run(results, "groups_of_the_replaced_engine_refuse_naming_the_shrink", old_groups_refuse_naming_the_shrink)


def voluntary(results, figures):
    """Nobody dies: ranks 0 and 1 shrink rank 2 out with SHRINK_ABORT while an allreduce of theirs
    is in flight (never matched: the shapes differ, rank 2 never issues it)."""
    allreduce_checked(R, None, range(N), 3)
    dist.barrier()
    if R == 2:
        def excluded_rank_gets_torchs_error():
            try:
                dist.shrink_group([2])
            except RuntimeError as e:
                assert "is in the exclusion list" in str(e), str(e)
            else:
                raise AssertionError("rank 2 shrank itself out")
        run(results, "excluded_rank_gets_torchs_error", excluded_rank_gets_torchs_error)
        # Stays until the survivors' shrink aborts this rank's engine: leaving earlier would fail
        # their in-flight collective with this rank's departure instead of their shrink.
        from hvd_herring.engine_front import front
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while front.is_initialized() and time.monotonic() < deadline:
            time.sleep(0.01)
        return
    in_flight = dist.all_reduce(torch.ones(8 + R), async_op=True)
    time.sleep(0.2)
    start = time.monotonic()
    new = dist.shrink_group([2], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
    figures["shrink_seconds"] = time.monotonic() - start

    def in_flight_work_fails_at_once_naming_the_shrink():
        waited = time.monotonic()
        try:
            in_flight.wait()
        except Exception as e:  # noqa: BLE001  (the message is what is checked)
            assert "shrank process group" in str(e), f"{type(e).__name__}: {e}"
        else:
            raise AssertionError("the in-flight allreduce completed")
        assert time.monotonic() - waited < 1.0, time.monotonic() - waited

    run(results, "in_flight_work_fails_at_once_naming_the_shrink", in_flight_work_fails_at_once_naming_the_shrink)

    def survivors_reduce():
        assert new.size() == 2 and dist.get_world_size() == 2
        allreduce_checked(R, None, [0, 1], MORE_STEPS)

    run(results, "survivors_reduce_after_a_shrink_without_a_death", survivors_reduce)


def write_results(results, figures):
    with open(os.path.join(os.environ["HERRING_TEST_RESULTS"], f"{R}.json"), "w") as f:
        json.dump({"results": results, "figures": figures}, f)


def spawn(np):
    """Starts `np` plain processes with env:// variables and waits for every one, whatever
    happens to the others (a launcher that stops the job when one rank dies would stop the
    survivors before they shrink)."""
    import socket
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(np):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(np))
        for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    codes = [p.wait(timeout=4 * TIMEOUT_SECONDS) for p in procs]
    print(f"exit codes by rank: {codes}", flush=True)


def main():
    global R, N
    if "--spawn" in sys.argv:
        return spawn(int(sys.argv[sys.argv.index("--spawn") + 1]))
    dist.init_process_group("herring", init_method="env://", timeout=timedelta(seconds=TIMEOUT_SECONDS))
    R, N = dist.get_rank(), dist.get_world_size()
    scenario = os.environ["HERRING_SHRINK_SCENARIO"]
    results, figures = {}, {}
    if scenario == "crash_kill":
        crash(results, figures, "kill")
    elif scenario == "crash_exception":
        crash(results, figures, "exception")
    elif scenario == "subgroup":
        subgroup(results, figures)
    elif scenario == "voluntary":
        voluntary(results, figures)
    write_results(results, figures)
    sys.stdout.flush()
    if scenario == "voluntary" and R == 2:
        os._exit(0)  # the survivors aborted this rank's engine: nothing to leave in order
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
