"""init -> collectives -> shutdown, three times in one process (Horovod's own tests do this for
every test case)."""

import sys

import torch

import horovod.torch as hvd

for round_ in range(3):
    hvd.init()
    out = hvd.allreduce(torch.full((4,), float(hvd.rank() + round_)), op=hvd.Sum, name="reinit")
    expected = sum(r + round_ for r in range(hvd.size()))
    assert torch.equal(out, torch.full((4,), float(expected))), (round_, out)
    gathered = hvd.allgather(torch.tensor([hvd.rank()]), name="reinit.ag")
    assert gathered.tolist() == list(range(hvd.size()))
    hvd.shutdown()
    assert not hvd.is_initialized()
    try:
        hvd.allreduce(torch.ones(1), name="after.shutdown")
    except (ValueError, hvd.HorovodInternalError) as e:
        assert "shut down" in str(e) or "not been initialized" in str(e), e
    else:
        raise AssertionError("a collective after shutdown must raise")
print("rank ok", flush=True)
sys.exit(0)
