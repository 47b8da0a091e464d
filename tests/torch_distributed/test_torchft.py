"""torchft (0.2.0) on herring: hvd_herring.torch.torchft.ProcessGroupHerring run through torchft's
own tests, shipped in its wheel (torchft/process_group_test.py, torchft/manager_integ_test.py),
which are imported, not copied, and left unmodified.

What differs from upstream, and why:
- herring runs one engine per process, and torchft's tests run their ranks (process_group_test's
  MultiPgBaseTest) and replica groups (manager_integ_test's Runner) as threads of one process. So
  here each rank, and each replica group, is a process (multiprocessing 'forkserver';
  workers/torchft_worker.py), running upstream's functions: the collective checks
  (process_group_test._COLLECTIVE_TO_FUNC, all eleven: herring has alltoall and reduce_scatter,
  which upstream's gloo cases skip), and Runner.run_replica with ddp_train_loop, whose
  `ProcessGroupGloo()` is replaced by ProcessGroupHerring in the replica's process.
- test_collective_with_resiliency: upstream's worker is a closure of the test case
  (_run_with_resiliency); workers/torchft_worker.resiliency is that worker, step for step, with
  herring's words beside gloo's in the error it expects (herring names the rank that is gone), and
  errored() checked to be set after a collective failed through the group (upstream only checks it
  says "aborted" if set; herring's says who left).
- The gloo cases (NormalGlooMultiPgTest) run beside, as upstream has them (threads), but for two
  resiliency cases gloo spends its 30 s timeout on (see the class).

Upstream tests that cannot apply to herring, and why:
- CUDA/NCCL/XCCL only: test_nccl_*, test_baby_nccl_*, BabyNcclMultiPgTest, NormalNcclMultiPgTest,
  test_manager_allreduce(use_cuda=True), test_gloo_apis('cuda'): herring is CPU-only.
- ProcessGroupBaby*: herring's group is not a Baby (subprocess) group; configure() reconfigures in
  this process.
- test_ddp_recovery_multi_rank: two ranks of one replica group are threads of one process, each
  with its own process group (one per group rank across replicas), i.e. two engines in one process.
- torchcomms tests: torchcomms is not installed (upstream skips them too).
"""

import io
import multiprocessing
import os
import sys
import time
import unittest
from datetime import timedelta

import pytest

pytest.importorskip("torchft")

import torch
from parameterized import parameterized
from torch.distributed import TCPStore
from torchft import manager_integ_test as mit
from torchft import process_group_test as pgt

from hvd_herring.torch.torchft import ProcessGroupHerring

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import torchft_worker  # noqa: E402

# Ranks and replicas are forked from one server process that imported torch, torchft and herring
# once (an import costs 4 s of CPU, 25 s on this shared 2-core machine under load): no engine and
# no thread of this test process is in them.
_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "torchft.process_group_test", "torchft.manager_integ_test",
                             "hvd_herring.torch.torchft", "torchft_worker"])
_REPLY_SECONDS = 120


class _RankProcesses:
    """WORLD_SIZE processes, each holding one rank's ProcessGroupHerring."""

    def __init__(self, world_size):
        self.conns, self.procs = [], []
        for rank in range(world_size):
            parent, child = _CTX.Pipe()
            proc = _CTX.Process(target=torchft_worker.rank_main, args=(rank, child), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def run(self, what, args_of_rank):
        for rank, conn in enumerate(self.conns):
            conn.send((what, args_of_rank(rank)))
        replies = []
        for rank, conn in enumerate(self.conns):
            if not conn.poll(_REPLY_SECONDS):
                raise AssertionError(f"rank {rank} did not answer {what} within {_REPLY_SECONDS} s")
            replies.append(conn.recv())
        errors = [f"rank {r}: {text}" for r, (status, text) in enumerate(replies) if status == "error"]
        if errors:
            raise AssertionError("\n".join(errors))
        return [value for _, value in replies]

    def close(self):
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(None)
                conn.poll(10) and conn.recv()
            except (OSError, EOFError):
                pass
            proc.join(10)
            if proc.is_alive():
                proc.kill()


class HerringMultiPgTest(unittest.TestCase):
    """torchft's MultiPgBaseTest with ProcessGroupHerring, its ranks as processes."""

    WORLD_SIZE = 3
    COLLECTIVES = list(pgt._ALL_COLLECTIVES)

    @classmethod
    def setUpClass(cls):
        cls.store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
        cls.store_addr = f"localhost:{cls.store.port}/prefix"
        cls.ranks = _RankProcesses(cls.WORLD_SIZE)
        cls.configure_ms = cls.ranks.run("configure", lambda r: (cls.store_addr, "0", r, cls.WORLD_SIZE))

    @classmethod
    def tearDownClass(cls):
        cls.ranks.close()

    def _configure(self, prefix):
        return self.ranks.run("configure", lambda r: (f"localhost:{self.store.port}/{prefix}", "0", r, self.WORLD_SIZE))

    @parameterized.expand(COLLECTIVES)
    def test_collective(self, collective):
        self.ranks.run("collective", lambda r: (collective,))

    @parameterized.expand(COLLECTIVES)
    def test_collective_with_resiliency(self, collective):
        results = self.ranks.run("resiliency", lambda r: (
            collective, f"localhost:{self.store.port}/reconfig_{collective}", self.WORLD_SIZE))
        for rank, result in enumerate(results[:-1]):
            print(f"{collective} rank {rank}: configure {result['configure_ms']:.1f} ms, failed after "
                  f"{result['failed_after_s'] * 1e3:.1f} ms: {result['error']}")
        # the next test starts from a configured group of every rank
        self._configure(f"after_{collective}")

    def test_reconfigure_is_fast(self):
        """configure() reconfigures in place: the previous engine torn down, a new one up (ms)."""
        times = [max(self._configure(f"again/{i}")) for i in range(5)]
        print(f"configure() at {self.WORLD_SIZE} ranks, slowest rank, 5 times: "
              + ", ".join(f"{t:.1f}" for t in times) + " ms")
        self.assertLess(min(times), 1000)

    def test_abort_fails_in_flight_work(self):
        results = self.ranks.run("abort_in_flight", lambda r: (f"localhost:{self.store.port}/abort", self.WORLD_SIZE))
        print(f"abort(): the Work in flight failed after {results[0]['failed_after_s'] * 1e3:.1f} ms: "
              f"{results[0]['error']}")
        self.assertLess(results[0]["failed_after_s"], 1.0)
        self.assertIn("abort", results[0]["error"])
        self._configure("after_abort")

    def test_zz_peer_crash_names_rank(self):
        """Last (zz): rank 2's process dies; the survivors' next collective fails naming it."""
        self._configure("crash")
        self.ranks.conns[2].send(("crash", ()))
        self.ranks.procs[2].join(10)
        self.assertEqual(self.ranks.procs[2].exitcode, 3)
        for rank in (0, 1):
            self.ranks.conns[rank].send(("collective", ("allreduce",)))
        for rank in (0, 1):
            self.assertTrue(self.ranks.conns[rank].poll(_REPLY_SECONDS))
            status, text = self.ranks.conns[rank].recv()
            self.assertEqual(status, "error", text)
            self.assertRegex(text.splitlines()[0], r"rank 2\b")
            print(f"rank {rank} after rank 2 died: {text.splitlines()[0]}")
            self.ranks.conns[rank].send(("errored", ()))
            self.assertTrue(self.ranks.conns[rank].poll(_REPLY_SECONDS))
            status, err = self.ranks.conns[rank].recv()
            self.assertEqual(status, "ok", err)
            self.assertRegex(err or "", r"rank 2\b")  # errored() is the collective's error


class NormalGlooMultiPgTest(pgt.NormalGlooMultiPgTest):
    """Upstream's gloo cases, beside herring's, as upstream runs them; but for the two whose
    lost rank gloo waits out for the full 30 s timeout (allreduce, allreduce_coalesced: 60 s of
    this file's CI; herring's fail in 0.25 s naming the rank). HERRING_TORCHFT_GLOO_SLOW=1 runs them."""

    # (upstream numbers its cases in set order, which changes from run to run: matched by suffix)
    _slow = os.environ.get("HERRING_TORCHFT_GLOO_SLOW") != "1"
    for _name, _test in list(vars(pgt.NormalGlooMultiPgTest).items()):
        if _slow and _name.startswith("test_collective_with_resiliency_") and _name.endswith(
                ("_allreduce", "_allreduce_coalesced")):
            locals()[_name] = unittest.skip("gloo waits its 30 s timeout for the lost rank "
                                            "(HERRING_TORCHFT_GLOO_SLOW=1 runs it)")(_test)
    del _name, _test, _slow


class HerringProcessGroupTest(unittest.TestCase):
    """torchft's ProcessGroupTest.test_gloo_apis / test_gloo_timeout with ProcessGroupHerring."""

    def test_herring_apis(self):
        store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
        pg = ProcessGroupHerring()
        pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
        try:
            self.assertEqual(pg.size(), 1)
            self.assertEqual(pg.getBackendName(), "torchft-herring")
            pgt._test_pg(pg, torch.tensor([2]))
            m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 4), process_group=pg)
            m(torch.rand(2, 3))
        finally:
            pg.shutdown()

    def test_herring_timeout(self):
        store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
        pg = ProcessGroupHerring(timeout=timedelta(seconds=0.01))
        with self.assertRaisesRegex(Exception, "timed out after"):
            pg.configure(f"localhost:{store.port}/prefix", "0", 0, 2)


    def test_refused_beside_a_herring_default_group(self):
        import torch.distributed as dist
        import hvd_herring.torch.distributed  # noqa: F401  (registers "herring")

        store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
        dist.init_process_group("herring", store=dist.HashStore(), rank=0, world_size=1)
        try:
            with self.assertRaisesRegex(RuntimeError, "runs torch.distributed's default group"):
                ProcessGroupHerring().configure(f"localhost:{store.port}/prefix", "0", 0, 1)
        finally:
            dist.destroy_process_group()


class HerringManagerIntegTest(unittest.TestCase):
    """manager_integ_test's test_ddp_healthy and test_ddp_recovery (async and sync quorum) with
    ProcessGroupHerring, each replica group a process."""

    def _run(self, fail_steps_of_replica, manager_args, process_group="herring"):
        lighthouse = mit.LighthouseServer(bind="[::]:0", min_replicas=2)
        out = _CTX.Queue()
        procs = [_CTX.Process(target=torchft_worker.replica_main,
                              args=(replica_id, lighthouse.address(), fail_steps, manager_args, out, process_group),
                              daemon=True)
                 for replica_id, fail_steps in enumerate(fail_steps_of_replica)]
        for p in procs:
            p.start()
        try:
            results = sorted(out.get(timeout=120) for _ in procs)
        finally:
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
            lighthouse.shutdown()
        for replica_id, status, value, _, _ in results:
            self.assertEqual(status, "ok", f"replica {replica_id}: {value}")
        state_dicts = [torch.load(io.BytesIO(r[2]), weights_only=False) for r in results]
        for state_dict in state_dicts:
            torch.testing.assert_close(state_dict, state_dicts[0])
        return results

    @staticmethod
    def _report(results, process_group="herring"):
        print(f"-- {process_group}")
        for replica_id, _, _, count, events in results:
            print(f"replica {replica_id}: configure() " + ", ".join(f"{t:.1f}" for t in events["configure_ms"])
                  + f" ms; failures {len(events['failures'])}")
        recovered = []
        for replica_id, _, _, _, events in results:
            # the failed replica group restarts in its process (Runner.run_replica's next attempt):
            # from its failure to its first committed step after it, and to the next one of anyone
            everyone = sorted(t for r in results for t, _, ok in r[4]["commits"] if ok)
            for failed in events["failures"]:
                own = [t for t, _, ok in events["commits"] if ok and t > failed]
                any_ = [t for t in everyone if t > failed]
                if own:
                    recovered.append(own[0] - failed)
                    print(f"recovery of replica {replica_id}: {(own[0] - failed) * 1e3:.0f} ms from the injected "
                          f"failure to its first committed step after it (to the next commit of any replica: "
                          f"{(any_[0] - failed) * 1e3:.0f} ms)")
        return recovered

    def test_ddp_healthy(self):
        self._report(self._run([[], []], {}))

    @parameterized.expand([("async_quorum", True), ("sync_quorum", False)])
    def test_ddp_recovery(self, name, use_async_quorum):
        results = self._run([[], [2]], {"use_async_quorum": use_async_quorum})
        self.assertEqual(results[1][3].get(mit.EventInjectorEvent.Failure), 1)
        recovered = self._report(results)
        self.assertEqual(len(recovered), 1)

    def test_ddp_recovery_gloo_beside(self):
        """The same recovery on upstream's ProcessGroupGloo, timed the same way (the figure beside
        herring's in docs/fault_tolerance.md)."""
        results = self._run([[], [2]], {"use_async_quorum": False}, process_group="gloo")
        self.assertEqual(len(self._report(results, "gloo")), 1)
