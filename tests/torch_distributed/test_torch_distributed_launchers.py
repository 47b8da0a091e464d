"""torch.distributed on "herring" started the ways torch itself starts process groups, where the
rank and size come from init_process_group's arguments, not from a launcher's environment:
`mp.spawn` with tcp://, file:// and store= (tests/torch_distributed/workers/torch_dist_lifecycle_worker.py), and
PyTorch Lightning's DDPStrategy (tests/torch_distributed/workers/lightning_worker.py). Inside those ranks: Works,
futures and tensors dropped at every point of a collective's life, c10d's ordering, DDP + Join
with uneven inputs, fork after init. One launch per configuration runs every check."""

import os
import shutil

import pytest

import checks
import launch

WORKER = os.path.join("tests", "torch_distributed", "workers", "torch_dist_lifecycle_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
# name -> (init method, ranks)
CONFIGS = {"spawn-tcp-np2": ("tcp", 2), "spawn-file-np3": ("file", 3), "spawn-store-np2": ("store", 2)}


# The checks that drop Works, futures and tensors mid-flight (tests/native/sanitizers/test_sanitizers.py runs them
# under AddressSanitizer, where a write into freed memory is reported, not just detected by luck).
DROPPING_CHECKS = [name for name in CHECK_NAMES if "dropped" in name]


def spawn(init, np, **env):
    results_dir = launch.scratch_dir("herring-torch-spawn-")
    args = [WORKER, "--init", init, "--np", str(np), "--results", results_dir, "--port", str(launch.free_port())]
    run = launch.python(args, timeout=600, **env)
    per_rank = launch.rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    init, np = CONFIGS[request.param]
    run, per_rank = spawn(init, np)
    return request.param, np, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)


LIGHTNING_WORKER = os.path.join("tests", "torch_distributed", "workers", "lightning_worker.py")


def gloo_aborted_after_training(run):
    """torch-gloo's own rank dying at exit, after training ended: seen once in CI (ddp_spawn, a
    spawned rank's teardown: "terminate called without an active exception", SIGABRT), 0 in 12
    runs since. The herring runs are never retried."""
    return ("`Trainer.fit` stopped" in run.output and "terminate called without an active exception" in run.output
            and "terminated with signal SIGABRT" in run.output)


def lightning_weights(backend, strategy):
    import torch
    out = os.path.join(launch.scratch_dir("herring-lightning-"), "weights.pt")
    args = [LIGHTNING_WORKER, "--backend", backend, "--strategy", strategy, "--devices", "2", "--out", out]
    run = launch.python(args, timeout=600)
    if backend == "gloo" and run.returncode != 0 and gloo_aborted_after_training(run):
        print(f"the gloo reference crashed at exit; run again:\n{run.output[-3000:]}")
        run = launch.python(args, timeout=600)
    assert run.returncode == 0 and os.path.exists(out), \
        f"Lightning {strategy} on {backend}: exit {run.returncode}\n{run.output[-6000:]}"
    return torch.load(out)


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_lightning_ddp_strategy_trains_to_the_weights_gloo_trains_to(strategy):
    import torch
    gloo, herring = lightning_weights("gloo", strategy), lightning_weights("herring", strategy)
    assert gloo["trained"].keys() == herring["trained"].keys()
    for name, trained in gloo["trained"].items():
        assert not torch.equal(trained, gloo["initial"][name]), f"{name}: gloo's run did not train"
        assert torch.equal(herring["initial"][name], gloo["initial"][name]), f"{name}: the runs started apart"
        got = herring["trained"][name]
        assert torch.allclose(got, trained, rtol=1e-5, atol=1e-6), \
            f"{name}: herring differs from gloo by {(got - trained).abs().max()}"
