"""Runs inside every rank of one torchrun launch: Hugging Face Accelerate (1.15) and the Transformers
Trainer (5.23) on CPU, first on a gloo group, then (after destroy_process_group, in the same
processes) on a herring group initialized before them, which they adopt. Each rank checks that the
weights herring trains to equal gloo's (torch.allclose, rtol=1e-6, atol=1e-7; whether they are
bitwise equal is reported) and that Accelerate's refusal of backend="herring" is the one
docs/accelerate.md describes.

    torchrun --nproc-per-node 2 tests/torch_distributed/workers/accelerate_worker.py

Results go to $HERRING_TEST_RESULTS/<rank>.json (tests/harness/checks.py)."""

import os
import shutil
import tempfile
import warnings

import torch
import torch.distributed as dist

import hvd_herring.torch.distributed  # noqa: F401  (registers "herring")

from checks import check, progress, run_and_report, selected

warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # else Accelerate sets torch's threads and warns
torch.set_num_threads(1)

from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, GradientState  # noqa: E402
from accelerate.utils import DistributedType, InitProcessGroupKwargs  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

RTOL, ATOL = 1e-6, 1e-7
STEPS = 4
TRAINED = {}      # (framework, backend) -> {name: tensor}
EXACT = {}        # framework -> whether herring's weights equal gloo's bit for bit
RANK = int(os.environ["RANK"])
OUT_DIR = tempfile.mkdtemp(prefix=f"herring-trainer-{RANK}-")


class Regression(torch.nn.Module):
    """A few Linear layers; forward(x, labels) returns {"loss": ...}, as the Trainer expects."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16),
                                       torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def samples():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(64, 1, generator=g)
    return x, y


def fresh_state():
    """Accelerate keeps its state in process-wide singletons; a new run in the same process starts
    from none (what a new process would have)."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def train_with_accelerate():
    fresh_state()
    accelerator = Accelerator(cpu=True)
    state = accelerator.state
    assert state.distributed_type == DistributedType.MULTI_CPU, state.distributed_type
    assert (state.num_processes, state.process_index) == (2, RANK), (state.num_processes, state.process_index)
    torch.manual_seed(0)
    model = Regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = samples()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    assert model.process_group.name() == dist.get_backend(), (model.process_group.name(), dist.get_backend())
    for step, (xb, yb) in enumerate(loader):
        if step == STEPS:
            break
        optimizer.zero_grad()
        accelerator.backward(model(xb, yb)["loss"])
        optimizer.step()
    return {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}


def train_with_trainer():
    x, y = samples()
    dataset = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    # TrainingArguments builds Accelerate's PartialState itself (it resets the old one first).
    args = TrainingArguments(output_dir=OUT_DIR, use_cpu=True, per_device_train_batch_size=8, max_steps=STEPS,
                             learning_rate=0.01, seed=0, report_to="none", save_strategy="no",
                             logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True)
    assert (args.world_size, args.process_index) == (2, RANK), (args.world_size, args.process_index)
    torch.manual_seed(0)
    trainer = Trainer(model=Regression(), args=args, train_dataset=dataset)
    trainer.train()
    wrapped = trainer.model_wrapped
    assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel), type(wrapped)
    assert wrapped.process_group.name() == dist.get_backend(), (wrapped.process_group.name(), dist.get_backend())
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def assert_same_weights(framework):
    gloo, herring = TRAINED[(framework, "gloo")], TRAINED[(framework, "herring")]
    assert gloo.keys() == herring.keys()
    torch.manual_seed(0)
    initial = Regression().state_dict()
    for name, want in gloo.items():
        assert not torch.equal(want, initial[name]), f"{framework} on gloo did not train {name}"
        got = herring[name]
        assert torch.allclose(got, want, rtol=RTOL, atol=ATOL), \
            f"{framework}: {name} on herring differs from gloo's by {(got - want).abs().max()}"
    EXACT[framework] = all(torch.equal(herring[n], gloo[n]) for n in gloo)


@check
def gloo_reference():
    dist.init_process_group("gloo")
    try:
        TRAINED[("accelerate", "gloo")] = train_with_accelerate()
        TRAINED[("trainer", "gloo")] = train_with_trainer()
    finally:
        dist.destroy_process_group()
        fresh_state()


@check
def accelerator_adopts_herring_group():
    dist.init_process_group("herring")   # first; Accelerator(cpu=True) then finds it initialized
    assert dist.get_backend() == "herring"
    TRAINED[("accelerate", "herring")] = train_with_accelerate()
    assert_same_weights("accelerate")
    # Accelerate's own collectives go through the adopted group too (state.backend says "gloo":
    # Accelerate's decision, not the group's; gather then takes its all_gather path).
    accelerator = Accelerator(cpu=True)
    assert accelerator.state.backend == "gloo", accelerator.state.backend
    got = accelerator.gather(torch.tensor([RANK + 10.0]))
    assert got.tolist() == [10.0, 11.0], got
    assert accelerator.reduce(torch.tensor([RANK + 1.0]), reduction="sum").tolist() == [3.0]


@check
def trainer_adopts_herring_group():
    TRAINED[("trainer", "herring")] = train_with_trainer()
    assert_same_weights("trainer")


@check
def without_cpu_true_accelerate_does_not_distribute():
    """The trap: without cpu=True (use_cpu=True for the Trainer) on a machine without GPUs,
    Accelerate finds no device under torchrun and decides DistributedType.NO: prepare() wraps
    nothing, every rank trains alone. backend="herring" is then accepted (nothing refuses it) and
    num_processes says 2, which makes it look distributed."""
    fresh_state()
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="herring")])
    state = accelerator.state
    assert (state.distributed_type, state.backend, state.num_processes) == (DistributedType.NO, "herring", 2), \
        (state.distributed_type, state.backend, state.num_processes)
    model = accelerator.prepare(Regression())
    assert not isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    args = TrainingArguments(output_dir=OUT_DIR, ddp_backend="herring", report_to="none")
    assert args.parallel_mode.value == "not_parallel", args.parallel_mode
    fresh_state()


@check
def accelerate_refuses_backend_herring():
    """On CPU Accelerate's PartialState._prepare_backend decides "mpi" or "gloo" whatever it is
    asked for, and raises when that differs from the backend asked for (docs/accelerate.md)."""
    want = "Your assigned backend herring is not available, please use gloo"
    for attempt in (lambda: Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="herring")]),
                    lambda: TrainingArguments(output_dir=OUT_DIR, use_cpu=True, ddp_backend="herring",
                                              report_to="none").device):
        fresh_state()
        try:
            attempt()
        except ValueError as e:
            assert want in str(e), str(e)
        else:
            raise AssertionError("Accelerate accepted backend='herring' on CPU: update docs/accelerate.md")
    assert dist.get_backend() == "herring"  # the group is left as it was


def shutdown():
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_and_report(
        RANK, selected(), after_each=progress(RANK),
        report=lambda: {"bitwise_equal": EXACT},
        shutdown=shutdown))
