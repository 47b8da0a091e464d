"""Ranks for tests/torch_distributed/test_torch_distributed_departures.py, launched by torchrun with backend
"herring": receives from any source (torch's recv/irecv without src), and ranks that leave the
job while the others go on, and c10d's abort. One scenario per launch (HERRING_DEPARTURE_SCENARIO);
each rank writes {check: "ok" or the traceback} to $HERRING_TEST_RESULTS/<rank>.json before it leaves."""

import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import hvd_herring.torch.distributed  # noqa: F401  (registers "herring")
from references import allreduce_checked

TIMEOUT_SECONDS = float(os.environ.get("HERRING_TEST_TIMEOUT", "60"))
R = N = None


def message(sender, k, n=16):
    """What `sender` sends as its k-th message: its rank, k, then a pattern of both."""
    t = torch.arange(n, dtype=torch.float64) + 1000 * sender + 100 * k
    t[0], t[1] = sender, k
    return t


def check_message(t, sender, k):
    assert torch.equal(t, message(sender, k, t.numel())), f"expected message {k} of rank {sender}, got {t[:4].tolist()}"


# --- receives from any source (3 ranks) ------------------------------------------------------------

def any_source_takes_buffered_messages_in_each_senders_order():
    """The senders' messages are all here before rank 0 posts a receive: recv() and irecv()
    without a source take them one by one, name each sender, and keep each sender's order."""
    K = 4
    if R != 0:
        for k in range(K):
            dist.send(message(R, k), dst=0, tag=7)
    dist.barrier()
    if R == 0:
        time.sleep(0.2)  # every message is buffered by now
        next_k = {r: 0 for r in range(1, N)}
        for i in range((N - 1) * K):
            t = torch.zeros(16, dtype=torch.float64)
            if i % 2 == 0:
                sender = dist.recv(t, tag=7)
            else:
                work = dist.irecv(t, tag=7)
                work.wait()
                sender = work._source_rank()
            assert sender in next_k, f"sender {sender}"
            check_message(t, sender, next_k[sender])  # one sender's messages in its order
            next_k[sender] += 1
        assert next_k == {r: K for r in range(1, N)}, next_k
    dist.barrier()


def any_source_receives_posted_first_take_the_first_arrivals():
    """Two receives without a source are posted before anything is sent: the first takes the
    first message to arrive (rank 2's), the second the next (rank 1's, sent only after rank 0
    received the first)."""
    if R == 0:
        t1, t2 = torch.zeros(16, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
        w1, w2 = dist.irecv(t1, tag=9), dist.irecv(t2, tag=9)
        dist.barrier()
        w1.wait()
        assert w1._source_rank() == 2, w1._source_rank()
        check_message(t1, 2, 0)
        assert not w2.is_completed()
        dist.barrier()
        w2.wait()
        assert w2._source_rank() == 1, w2._source_rank()
        check_message(t2, 1, 0)
    elif R == 1:
        dist.barrier()
        dist.barrier()
        dist.send(message(1, 0), dst=0, tag=9)
    else:
        dist.barrier()
        dist.send(message(2, 0), dst=0, tag=9)
        dist.barrier()


def named_receive_posted_after_an_any_source_one_is_matched_after_it():
    """MPI's order: a receive without a source posted before a receive from rank 1 (same tag)
    takes rank 1's first message, the named one its second."""
    if R == 0:
        t_any, t_named = torch.zeros(16, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
        w_any = dist.irecv(t_any, tag=11)
        w_named = dist.irecv(t_named, src=1, tag=11)
        dist.barrier()
        w_named.wait()
        w_any.wait()
        assert w_any._source_rank() == 1
        check_message(t_any, 1, 0)
        check_message(t_named, 1, 1)
    else:
        dist.barrier()
        if R == 1:
            dist.send(message(1, 0), dst=0, tag=11)
            dist.send(message(1, 1), dst=0, tag=11)


def any_source_receives_only_its_tag():
    """A receive without a source for tag 13 is not taken by rank 1's earlier message of tag 14."""
    if R == 0:
        t = torch.zeros(16, dtype=torch.float64)
        w = dist.irecv(t, tag=13)
        dist.barrier()
        w.wait()
        assert w._source_rank() == 2, w._source_rank()
        check_message(t, 2, 13)
        other = torch.zeros(16, dtype=torch.float64)
        dist.recv(other, src=1, tag=14)
        check_message(other, 1, 14)
    elif R == 1:
        dist.send(message(1, 14), dst=0, tag=14)
        dist.barrier()
    else:
        dist.barrier()
        time.sleep(0.2)  # rank 1's message of the other tag is at rank 0 first
        dist.send(message(2, 13), dst=0, tag=13)


def any_source_in_a_subgroup_takes_members_only():
    """In group [1, 2], rank 1's receive without a source takes rank 2's message, not the one rank
    0 (outside the group) sent it earlier with the same tag; it returns the global rank."""
    group = dist.new_group([1, 2])
    if R == 0:
        dist.send(message(0, 15), dst=1, tag=15)
        dist.barrier()
    elif R == 1:
        dist.barrier()
        t = torch.zeros(16, dtype=torch.float64)
        sender = dist.recv(t, group=group, tag=15)
        assert sender == 2, sender
        check_message(t, 2, 15)
        work = dist.irecv(t, group=group, tag=16)
        work.wait()
        assert work._source_rank() == 1, work._source_rank()  # the group rank, as c10d's Work has it
        check_message(t, 2, 16)
        dist.recv(t, src=0, tag=15)
        check_message(t, 0, 15)
    else:
        dist.barrier()
        time.sleep(0.2)
        dist.send(message(2, 15), dst=1, group=group, tag=15)
        dist.send(message(2, 16), dst=1, group=group, tag=16)
    dist.barrier()


ANY_SOURCE = [any_source_takes_buffered_messages_in_each_senders_order,
              any_source_receives_posted_first_take_the_first_arrivals,
              named_receive_posted_after_an_any_source_one_is_matched_after_it,
              any_source_receives_only_its_tag, any_source_in_a_subgroup_takes_members_only]


# --- departures (4 ranks) ---------------------------------------------------------------------------

def expect_failure_naming(fn, text):
    """fn() must raise, within the deadline, an error whose message contains `text`."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the message is what is checked)
        got = f"{type(e).__name__}: {e}"
    else:
        raise AssertionError(f"expected an error naming {text!r}; it succeeded")
    assert text in got, got
    assert time.monotonic() - start < TIMEOUT_SECONDS, f"took {time.monotonic() - start:.1f} s"
    return got


def departures(results):
    """Rank 3 leaves with destroy_process_group, rank 2 by the end of its process (no
    destroy_process_group: the engine's exit handler). After each, the ranks of the groups
    without the one that left go on (values checked); a collective of a group with it fails,
    naming it; a message it sent before leaving is still received."""
    sub = dist.new_group([0, 1, 2])
    pair = dist.new_group([0, 1])
    allreduce_checked(R, None, range(N), 3)
    if R == 3:
        dist.send(message(3, 0), dst=0, tag=3)
        dist.destroy_process_group()
        results["rank_3_left"] = "ok"
        return
    results["subgroup_goes_on_after_rank_3_left"] = run(allreduce_checked, R, sub, [0, 1, 2], 20)

    def world_allreduce():
        dist.all_reduce(torch.ones(8))
    results["world_collective_fails_naming_rank_3"] = run(expect_failure_naming, world_allreduce,
                                                          "rank 3 left the job")
    results["world_barrier_fails_naming_rank_3"] = run(expect_failure_naming, dist.barrier, "rank 3 left the job")
    if R == 0:
        def receive_what_rank_3_sent():
            t = torch.zeros(16, dtype=torch.float64)
            dist.recv(t, src=3, tag=3)
            check_message(t, 3, 0)

        def receive_what_rank_3_never_sent():
            dist.recv(torch.zeros(16, dtype=torch.float64), src=3, tag=4)
        results["message_sent_before_leaving_is_received"] = run(receive_what_rank_3_sent)
        results["receive_from_rank_3_fails_naming_it"] = run(expect_failure_naming, receive_what_rank_3_never_sent,
                                                            "rank 3")
    # A new collective (a coordinator round) and an allgather in the subgroup.
    def subgroup_allgather():
        outs = [torch.zeros(3, dtype=torch.int64) for _ in range(3)]
        dist.all_gather(outs, torch.tensor([R, R * 10, 7], dtype=torch.int64), group=sub)
        assert [o.tolist() for o in outs] == [[r, r * 10, 7] for r in range(3)], outs
    results["subgroup_allgather_after_rank_3_left"] = run(subgroup_allgather)
    dist.barrier(group=sub)
    if R == 2:
        results["rank_2_leaves_by_exiting"] = "ok"
        return  # main() exits without destroy_process_group
    results["pair_goes_on_after_rank_2_left"] = run(allreduce_checked, R, pair, [0, 1], 20)

    def subgroup_allreduce():
        dist.all_reduce(torch.ones(8), group=sub)
    results["subgroup_collective_fails_naming_rank_2"] = run(expect_failure_naming, subgroup_allreduce,
                                                             "rank 2 left the job")
    results["pair_still_goes_on"] = run(allreduce_checked, R, pair, [0, 1], 3)
    dist.destroy_process_group()


def killed_rank_fails_everyone(results):
    """A rank killed (SIGKILL: no goodbye) is a loss, not a departure: the collectives of a group
    it is not even in fail, naming it, as before."""
    sub = dist.new_group([0, 1, 2])
    if R != 3:
        allreduce_checked(R, sub, [0, 1, 2], 2)
    dist.barrier()
    if R == 3:
        os.kill(os.getpid(), signal.SIGKILL)

    def subgroup_keeps_reducing():
        for _ in range(200):
            dist.all_reduce(torch.ones(1000), group=sub)
            time.sleep(0.05)
    results["subgroup_collective_fails_naming_killed_rank_3"] = run(expect_failure_naming, subgroup_keeps_reducing,
                                                                    "rank 3")


def abort_fails_the_works_in_flight(results):
    """c10d's abort (torch's _abort_process_group, what torchft calls): rank 0 aborts while a
    collective of its own is in flight that rank 1 never issues, and rank 1 waits on one rank 0
    never issues. Both Works fail at once, naming the abort, instead of waiting for the timeout."""
    allreduce_checked(R, None, range(N), 2)
    mine = dist.all_reduce(torch.ones(8 + R), async_op=True)  # the ranks' shapes differ: never matched
    if R == 0:
        time.sleep(0.5)
        dist.distributed_c10d._abort_process_group()
    results["work_in_flight_fails_naming_the_abort"] = run(expect_failure_naming, mine.wait,
                                                           "rank 0 aborted process group")
    results["engine_is_gone_after_the_abort"] = run(lambda: None if R else _assert_no_engine())


def _assert_no_engine():
    from hvd_herring.engine_front import front
    assert not front.is_initialized()


def run(fn, *args):
    try:
        fn(*args)
        return "ok"
    except Exception:  # noqa: BLE001
        return traceback.format_exc()


def write_results(results):
    with open(os.path.join(os.environ["HERRING_TEST_RESULTS"], f"{R}.json"), "w") as f:
        json.dump({"results": results, "size": N}, f)


def spawn(np):
    """Starts `np` ranks as torch's own tests do (file:// init, explicit rank) and waits for every
    one, whatever happens to the others: a launcher that stops the job when one rank dies
    (torchrun's agent, mp.spawn) would stop the survivors before they report."""
    import subprocess
    import tempfile
    # torch's FileStore deletes its file when the last rank closes it cleanly; a departed rank never
    # does, so the directory goes with the job.
    with tempfile.TemporaryDirectory(prefix="herring-departures-") as store_dir:
        init = "file://" + os.path.join(store_dir, "store")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--np", str(np), "--init", init])
                 for r in range(np)]
        codes = [p.wait(timeout=4 * TIMEOUT_SECONDS) for p in procs]
    print(f"exit codes by rank: {codes}", flush=True)


def main():
    global R, N
    if "--spawn" in sys.argv:
        return spawn(int(sys.argv[sys.argv.index("--spawn") + 1]))
    if "--rank" in sys.argv:
        arg = lambda name: sys.argv[sys.argv.index(name) + 1]  # noqa: E731
        dist.init_process_group("herring", init_method=arg("--init"), rank=int(arg("--rank")),
                                world_size=int(arg("--np")), timeout=timedelta(seconds=TIMEOUT_SECONDS))
    else:  # torchrun
        dist.init_process_group("herring", timeout=timedelta(seconds=TIMEOUT_SECONDS))
    R, N = dist.get_rank(), dist.get_world_size()
    scenario = os.environ["HERRING_DEPARTURE_SCENARIO"]
    results = {}
    if scenario == "any_source":
        for fn in ANY_SOURCE:
            results[fn.__name__] = run(fn)
    elif scenario == "departures":
        departures(results)
    elif scenario == "abort":
        abort_fails_the_works_in_flight(results)
        write_results(results)
        sys.stdout.flush()
        os._exit(0)  # the job was aborted: nothing to leave in order
    elif scenario == "kill":
        killed_rank_fails_everyone(results)
        write_results(results)
        sys.stdout.flush()
        os._exit(0)  # the job is broken: nothing to leave in order
    write_results(results)
    if scenario == "departures" and R == 2:
        sys.exit(0)  # the end of the process: the engine leaves from its exit handler
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
