"""What the training examples do alike, whatever their framework: the command line, this rank's
shard of the data, and the closing check that every rank ended with the same weights. Beside the
examples so that each runs as `python examples/<name>.py` with nothing else on its path."""

import argparse


def training_parser(doc):
    """The options every example takes; an example adds its own after these."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.01)
    return parser


def add_num_groups(parser):
    parser.add_argument("--num-groups", type=int, default=0,
                        help="reduce gradients in this many explicit groups (0: Horovod's default fusion)")


def rank_shard(hvd, x, y):
    """This rank's shard of the samples (every rank holds the same data)."""
    return x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]


def finish(hvd, gathered, equal):
    """`gathered` holds every rank's flattened weights, one row a rank: rank 0 says whether they are
    identical, Horovod shuts down, and a divergence fails the script."""
    identical = all(equal(gathered[0], gathered[r]) for r in range(hvd.size()))
    if hvd.rank() == 0:
        print(f"weights identical on all {hvd.size()} ranks: {'yes' if identical else 'NO'}", flush=True)
    hvd.shutdown()
    if not identical:
        raise SystemExit("ranks diverged")
