"""A collective after another rank finished: Horovod's "Horovod has been shut down" error, word for
word (horovod/common/common.h, SHUT_DOWN_ERROR: its explanation of the usual causes), and, beyond
Horovod's, the rank whose shutdown it was. Real ranks: rank 1 finishes its script (hvd.shutdown())
while rank 2 waits in an allreduce and rank 0 starts one afterwards."""

import os

import launch

HOROVOD_TEXT = ("Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to "
                "allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the "
                "shutdown was caused by an exception, you should see the exception in the log before the first "
                "shutdown message.")

SCRIPT = """
import time, torch, horovod.torch as hvd
hvd.init()
r = hvd.rank()
hvd.allreduce(torch.ones(2), name="together")
if r == 1:
    time.sleep(1.0)
    hvd.shutdown()  # finished execution, as a script's end does
    print("RANK 1 FINISHED", flush=True)
else:
    if r == 0:
        time.sleep(3.0)  # starts its collective after rank 1 left
    try:
        hvd.allreduce(torch.ones(2), name="after")  # rank 2: pending when rank 1 shuts down
    except Exception as e:
        print(f"RANK {r} ERROR {type(e).__name__}: {e}", flush=True)
    else:
        print(f"RANK {r} NO ERROR", flush=True)
    time.sleep(2.0)  # every rank's error is read before another rank ends
"""


def test_a_collective_after_a_rank_finished_says_horovods_explanation_and_names_the_rank():
    d = launch.scratch_dir("herring-shutdown-text-")
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    run = launch.horovodrun(3, [script], timeout=180)
    assert "RANK 1 FINISHED" in run.output, run.output[-4000:]
    for rank in (0, 2):
        lines = [l for l in run.output.splitlines() if f"RANK {rank} ERROR " in l]
        assert lines, run.output[-4000:]
        line = lines[0]
        assert "HorovodInternalError" in line, line  # Horovod's type: elastic mode catches it
        assert HOROVOD_TEXT in line, line
        assert (f"The shutdown came from rank 1 (it called hvd.shutdown() or its process ended) while this rank "
                f"(rank {rank}) still ran.") in line, line
