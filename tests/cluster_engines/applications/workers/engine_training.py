"""The one training job every cluster-engine test runs (tests/cluster_engines/applications/test_spark.py, tests/cluster_engines/applications/test_ray.py):
a linear model, full-batch SGD, rank r trains on rows r::size. With equal shards the averaged
gradient equals the full batch's, so a single process training on all rows is the reference.
Imported by the test drivers in their own processes; the executors get the functions pickled."""

import json

FEATURES, ROWS, STEPS, LR = 8, 48, 6, 0.1


def data():
    import torch
    g = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, FEATURES, generator=g)
    return x, x.sum(1, keepdim=True) * 0.5 + 1.0


def model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def weights(m):
    return [v for p in m.parameters() for v in p.detach().flatten().tolist()]


def reference_weights():
    """Single process, all rows."""
    import torch
    m, (x, y) = model(), data()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return weights(m)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)
