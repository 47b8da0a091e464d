"""Zero-copy memory (hvd.zero_copy_empty): one-host allreduces that read every rank's tensor in
place, checked inside real ranks launched by horovodrun; the allocator's errors; and faults in the
middle of a zero-copy allreduce."""

import os
import subprocess
import sys

import pytest

import checks
import launch

WORKER = os.path.join("tests", "ops", "workers", "zero_copy_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
# name -> (ranks, ranks per simulated host or 0 for one host, is the zero-copy path expected)
CONFIGS = {"one-host-np4": (4, 0, True), "one-host-np3-fused": (3, 0, True), "2hosts-np4": (4, 2, False)}


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    np, per_host, expect = CONFIGS[request.param]
    args = launch.on_simulated_hosts(per_host, WORKER)
    env = {"HERRING_TEST_EXPECT_ZERO_COPY": "1" if expect else "0"}
    if request.param.endswith("fused"):
        env["HOROVOD_CYCLE_TIME"] = "20"  # more tensors share a fused buffer
    run, per_rank = launch.run_with_results(launch.horovodrun, np, args, prefix="herring-zero-copy-", timeout=400, **env)
    return request.param, np, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)


def allocate_in_subprocess(code, **env):
    e = dict(os.environ, **{k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", "import torch, hvd_herring.torch as hvd\n" + code],
                          env=e, capture_output=True, text=True, timeout=120)


def test_a_full_pool_names_the_knob():
    proc = allocate_in_subprocess("a = hvd.zero_copy_empty(200_000)\nb = hvd.zero_copy_empty(200_000)",
                                  HERRING_ZERO_COPY_BYTES=1 << 20)
    assert proc.returncode != 0
    assert "zero-copy memory is full" in proc.stderr and "HERRING_ZERO_COPY_BYTES" in proc.stderr, proc.stderr[-2000:]


def test_freed_memory_is_reused_and_the_pool_can_be_turned_off():
    proc = allocate_in_subprocess("for i in range(50):\n    a = hvd.zero_copy_empty(200_000)\n    del a\n"
                                  "print('ok')", HERRING_ZERO_COPY_BYTES=1 << 20)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
    proc = allocate_in_subprocess("hvd.zero_copy_empty(10)", HERRING_ZERO_COPY_BYTES=0)
    assert proc.returncode != 0 and "zero-copy memory is off (HERRING_ZERO_COPY_BYTES=0)" in proc.stderr, \
        proc.stderr[-2000:]
