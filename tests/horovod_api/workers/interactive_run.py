"""horovod.run() from a plain Python process, as a notebook calls it (Horovod's
test/integration/test_interactiverun.py, adapted: herring under HOROVOD_BACKEND=herring, one torch
and one TensorFlow function). Prints one JSON line per run with each rank's returned value."""

import json
import sys


def torch_fn(scale):
    import torch
    import horovod.torch as hvd
    hvd.init()
    # horovod.run exports HOROVOD_CYCLE_TIME='(None,)' and HOROVOD_CACHE_CAPACITY='(None,)': the
    # engine must read them as Horovod does (0) and run.
    import os
    knobs = (os.environ.get("HOROVOD_CYCLE_TIME"), os.environ.get("HOROVOD_CACHE_CAPACITY"))
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]) * scale, op=hvd.Sum, name="interactive")
    gathered = hvd.allgather(torch.tensor([hvd.rank()]), name="ranks")
    result = {"rank": hvd.rank(), "size": hvd.size(), "sum": total.item(),
              "ranks": gathered.tolist(), "knobs": knobs}
    hvd.shutdown()
    return result


def tf_fn(scale):
    import tensorflow as tf
    import horovod.tensorflow as hvd
    hvd.init()
    total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]) * scale, op=hvd.Sum, name="interactive_tf")
    result = {"rank": hvd.rank(), "size": hvd.size(), "sum": float(total.numpy()[0])}
    hvd.shutdown()
    return result


if __name__ == "__main__":
    import horovod
    which, np = sys.argv[1], int(sys.argv[2])
    fn = {"torch": torch_fn, "tensorflow": tf_fn}[which]
    results = horovod.run(fn, args=(10.0,), np=np, use_gloo=True)
    print("RESULTS " + json.dumps(results), flush=True)
