"""PyTorch Lightning's DDP strategy on CPU with a chosen process-group backend, as a Lightning user
writes it: Lightning starts the ranks itself (its subprocess launcher re-runs this script, or
mp.spawn with --strategy ddp_spawn) and calls init_process_group(backend, rank=, world_size=).

    python lightning_worker.py --backend herring|gloo --strategy ddp|ddp_spawn --devices N --out weights.pt

Rank 0 saves the initial and the trained weights to --out; the test compares herring's with gloo's."""

import argparse
import os

import torch

import hvd_herring.torch.distributed  # noqa: F401  (registers "herring" in every rank)
import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPStrategy


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(256, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(256, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--strategy", choices=["ddp", "ddp_spawn"], default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pl.seed_everything(0, workers=True)
    # "ddp": Lightning re-runs this script once per extra rank; "ddp_spawn": torch.multiprocessing.spawn.
    start_method = "popen" if args.strategy == "ddp" else "spawn"
    model = Regression()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, max_epochs=2,
                         strategy=DDPStrategy(process_group_backend=args.backend, start_method=start_method),
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, deterministic=True)
    trainer.fit(model, data())
    if trainer.global_rank == 0:
        trained = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save({"initial": initial, "trained": trained}, args.out)


if __name__ == "__main__":
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    main()
