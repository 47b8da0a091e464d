"""Hugging Face Accelerate and the Transformers Trainer on the "herring" backend (docs/accelerate.md):
one torchrun launch of 2 ranks (tests/torch_distributed/workers/accelerate_worker.py) trains a small
model with Accelerator (prepare, backward) and with Trainer on gloo, destroys the group, then
initializes herring first and lets Accelerator and Trainer adopt it; every rank checks the weights
equal gloo's (allclose, rtol=1e-6, atol=1e-7), Accelerate's collectives on the adopted group, the
cpu=True trap and Accelerate's refusal of backend="herring". The launch: about 17 s on this 2-core
machine when quiet, 48-67 s at a load average of 16-25."""

import os

import pytest

import checks
import launch

WORKER = os.path.join("tests", "torch_distributed", "workers", "accelerate_worker.py")
CHECK_NAMES = checks.names_in(WORKER)

pytest.importorskip("accelerate")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def launched():
    run, per_rank = launch.run_with_results(launch.torchrun, 2, [WORKER], prefix="herring-accelerate-", timeout=300)
    print(f"accelerate_worker: {run.seconds:.1f} s; bitwise equal to gloo: "
          f"{ {r: d.get('bitwise_equal') for r, d in per_rank.items()} }")
    return "torchrun-np2", 2, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)
