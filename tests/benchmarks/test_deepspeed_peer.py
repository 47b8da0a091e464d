"""The DeepSpeed peer of the single-host benchmarks (stack `deepspeed-shm`): its worker, launched by
the stack's real launcher (DeepSpeed's single-node `deepspeed.launcher.launch`) at np=2, runs
`deepspeed.comm.inference_all_reduce` on DeepSpeed's shared-memory op and checks every element of
the result on every rank against the reference sum (1 + 2), as every stack's worker does. The
worker refuses to measure a gloo fallback (op not built, ISA too old, LOCAL_SIZE not the world
size), so a passing launch is the shm op's result. Two sizes, one per algorithm of the op: 4100
bytes (below 1 MiB every rank sums all inputs; 1025 floats, so the scalar tail runs too) and
2 MiB + 4 bytes (each rank sums a slice, then copies the others' slices out).

Skipped only when the peer set-up (benchmarks/peers/setup_deepspeed.sh, which scripts/test.sh
runs) has not been run. About 15-30 s on the shared 2-core machine."""

import glob
import json
import subprocess

import pytest

from benchmarks.common import deepspeed_env
from benchmarks.single_host import stacks
from launch import ROOT

READY, WHY = deepspeed_env.ready()
# Exclusive: it checks that DeepSpeed's shared-memory segments are gone afterwards, and its
# rendezvous timings failed once on a machine loaded with other jobs.
pytestmark = [pytest.mark.skipif(not READY, reason=WHY), pytest.mark.exclusive]

SIZES = [4100, 2 * 1024 * 1024 + 4]
SHM_PREFIX = "/dev/shm/deepspeed_allreduce_buffer_"


def test_deepspeed_shm_allreduce_matches_the_reference_sum():
    before = set(glob.glob(SHM_PREFIX + "*"))
    spec = {"id": "allreduce", "kind": "allreduce", "sizes": SIZES,
            "timing": {"warmup": 1, "min_iters": 3, "max_iters": 3, "budget": 0.1}}
    res = stacks.launch("deepspeed-shm", 2, [spec], timeout=240)
    assert res.ok, (res.error_lines, [e.get("error") for e in res.errors], res.output_tail)
    got = {r["bytes"]: r for r in res.records}
    assert sorted(got) == SIZES, res.records
    for size, rec in got.items():
        assert rec["backend"] == "deepspeed-shm" and rec["np"] == 2, rec
        assert len(rec["times"]) == 3 and all(t > 0 for t in rec["times"]), rec
    # Each rank unlinks its 66 MiB workspace once every rank has mapped it (the op itself never
    # does): nothing is left in /dev/shm.
    assert set(glob.glob(SHM_PREFIX + "*")) <= before


def test_a_gloo_fallback_is_refused(tmp_path):
    # Launched by torchrun, which sets no LOCAL_SIZE, DeepSpeed's op never maps its shared memory
    # and inference_all_reduce silently runs gloo's all_reduce instead: the worker refuses to
    # measure that, naming why (so a passing launch above is the shm op's result).
    plan, out = tmp_path / "plan.json", tmp_path / "out.jsonl"
    plan.write_text(json.dumps({"workloads": [{"id": "allreduce", "kind": "allreduce", "sizes": [4096],
                                               "timing": {"warmup": 1, "min_iters": 1, "max_iters": 1}}]}))
    argv, env = stacks.command("torch-gloo", 2, ["--plan", str(plan), "--out", str(out)])
    argv[argv.index("--api") + 1] = "deepspeed"
    env.update(DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=deepspeed_env.extensions_dir())
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    for rank in (0, 1):
        assert (f"RuntimeError: rank {rank}: DeepSpeed's shm allreduce is not in use: LOCAL_SIZE is None, "
                "not the world size 2 (the op would not map shared memory)") in output, output[-3000:]
    assert not out.exists(), out.read_text()   # nothing was measured
