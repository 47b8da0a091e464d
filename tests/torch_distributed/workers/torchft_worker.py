"""Child processes of tests/torch_distributed/test_torchft.py (started with multiprocessing's
'forkserver'; this directory is on sys.path in the parent, which hands its sys.path to the server).

- `rank_main`: one rank of torchft's MultiPgBaseTest, as a process (herring runs one engine per
  process, so its ranks cannot be the threads torchft's test uses): it holds that rank's
  ProcessGroupHerring and runs what the parent sends it through a pipe.
- `replica_main`: one replica group of torchft's manager_integ_test (Runner.run_replica) in its own
  process, with ProcessGroupHerring in place of ProcessGroupGloo in ddp_train_loop (or gloo's,
  timed the same way, for comparison), timing each configure() and each committed step."""

import io
import os
import sys
import time
import traceback
from datetime import timedelta


def _quiet():
    os.environ.setdefault("HERRING_LOG_LEVEL", "warning")


def rank_main(rank, conn):
    _quiet()
    import torch
    from hvd_herring.torch.torchft import ProcessGroupHerring
    from torchft import process_group_test as pgt

    pg = ProcessGroupHerring(timeout=timedelta(seconds=10))
    while True:
        message = conn.recv()
        if message is None:
            break
        what, args = message
        try:
            if what == "configure":
                pg.set_timeout(timedelta(seconds=10))  # a resiliency case leaves it at 1 s
                start = time.perf_counter()
                pg.configure(*args)
                result = (time.perf_counter() - start) * 1e3
            elif what == "collective":
                pgt._COLLECTIVE_TO_FUNC[args[0]](pg, rank, torch.tensor([rank + 1]))
                result = None
            else:
                result = globals()[what](pg, rank, *args)
            conn.send(("ok", result))
        except BaseException as e:  # the parent asserts on it
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    try:
        pg.shutdown()
    except Exception:
        pass
    conn.send(("ok", None))


def resiliency(pg, rank, collective, store_addr, world_size):
    """torchft's MultiPgBaseTest._run_with_resiliency's worker, in a process (see test_torchft.py's
    docstring for what differs)."""
    import re

    import torch
    from torchft import process_group_test as pgt

    pg.set_timeout(timedelta(seconds=30))
    fault_rank = world_size - 1
    test = pgt._COLLECTIVE_TO_FUNC[collective]
    start = time.perf_counter()
    pg.configure(store_addr, "0", rank, world_size)
    configure_ms = (time.perf_counter() - start) * 1e3
    test(pg, rank, torch.tensor([rank + 1]))
    if rank == fault_rank:
        pg.shutdown()
        return {"configure_ms": configure_ms}
    pg.set_timeout(timedelta(seconds=1))
    start = time.perf_counter()
    try:
        test(pg, rank, torch.tensor([rank + 1]))
    except Exception as e:
        error = str(e)
    else:
        error = "no error"  # upstream accepts it too: send/recv between ranks 0 and 1 needs no rank 2
    failed_after = time.perf_counter() - start
    # upstream's expected words (gloo's, nccl's) and herring's, which name the rank that is gone
    if not re.search(r"(no error|Connection closed by peer|timed out after|Timed out waiting|Read error|not equal|"
                     r"not close|process group not initialized|rank %d)" % fault_rank, error):
        raise AssertionError(f"rank {rank}: unexpected error: {error}")
    err = pg.errored()
    if err is None and "herring" in error:
        # the collective failed through the group: errored() must say so (the Manager reads it)
        raise AssertionError(f"rank {rank}: errored() is None after {error}")
    return {"configure_ms": configure_ms, "failed_after_s": failed_after, "error": error.splitlines()[0],
            "errored": None if err is None else str(err).splitlines()[0]}


def abort_in_flight(pg, rank, store_addr, world_size):
    """Rank 0 starts an allreduce rank 1 never joins, then aborts: the Work must fail at once."""
    import torch
    from torch.distributed import AllreduceOptions

    pg.configure(store_addr, "0", rank, world_size)
    pg.allreduce([torch.ones(4)], AllreduceOptions()).wait()
    if rank != 0:
        time.sleep(1.5)
        return {}
    work = pg.allreduce([torch.ones(4)], AllreduceOptions())
    time.sleep(0.2)
    start = time.perf_counter()
    pg.abort()
    try:
        work.wait()
    except Exception as e:
        return {"failed_after_s": time.perf_counter() - start, "error": str(e).splitlines()[0]}
    raise AssertionError("the Work in flight completed after abort()")


def errored(pg, rank):
    err = pg.errored()
    return None if err is None else str(err).splitlines()[0]


def crash(pg, rank):
    os._exit(3)


def replica_main(replica_id, lighthouse_address, fail_steps, manager_args, out, process_group="herring"):
    _quiet()
    import torch
    from torchft import manager_integ_test as mit

    from hvd_herring.torch.torchft import ProcessGroupHerring

    events = {"configure_ms": [], "commits": [], "failures": []}

    base = ProcessGroupHerring if process_group == "herring" else mit.ProcessGroupGloo

    class TimedProcessGroupHerring(base):
        def configure(self, *args, **kwargs):
            start = time.perf_counter()
            super().configure(*args, **kwargs)
            events["configure_ms"].append((time.perf_counter() - start) * 1e3)

    class TimedManager(mit.Manager):
        def should_commit(self, *args, **kwargs):
            committed = super().should_commit(*args, **kwargs)
            events["commits"].append((time.time(), self.current_step(), committed))
            return committed

    class TimedInjector(mit.EventInjector):
        def check(self, rank, step):
            try:
                super().check(rank, step)
            except mit.InjectedFailure:
                events["failures"].append(time.time())
                raise

    mit.ProcessGroupGloo = TimedProcessGroupHerring  # ddp_train_loop's `pg = ProcessGroupGloo()` (timed)
    mit.Manager = TimedManager
    injector = TimedInjector()
    for step in fail_steps:
        injector.fail_at(0, step)
    runner = mit.Runner(replica_id=replica_id, num_replicas=2, lighthouse_address=lighthouse_address,
                        event_injector=injector, train_loop=mit.ddp_train_loop, manager_args=manager_args)
    try:
        state_dicts = runner.run_replica()
        buf = io.BytesIO()  # as bytes: a tensor put on a queue is shared by a descriptor this exit closes
        torch.save(state_dicts, buf)
        out.put((replica_id, "ok", buf.getvalue(), dict(injector.count), events))
    except BaseException as e:
        out.put((replica_id, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}", {}, events))
    out.close()
    out.join_thread()  # the queue's feeder thread has sent it
    sys.stdout.flush()
    os._exit(0)  # the lighthouse-facing threads of the finished manager need not be joined
