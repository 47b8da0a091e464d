"""HOROVOD_TIMELINE: a 2-rank job writes one Chrome trace per rank, valid JSON, with the queue,
negotiation and execution phases of every tensor, small and large."""

import json
import os

import launch

SCRIPT = """
import torch, horovod.torch as hvd
hvd.init()
for step in range(3):
    hs = [hvd.allreduce_async(torch.ones(1000) * i, name=f"grad.{i}") for i in range(4)]
    for h in hs:
        hvd.synchronize(h)
hvd.allreduce(torch.ones(100000), name="big")  # 400 KB: above HERRING_SMALL_MESSAGE_BYTES, staged
hvd.allgather(torch.ones(2), name="gathered")
hvd.shutdown()
"""


def test_timeline_of_a_two_rank_job():
    d = launch.scratch_dir("herring-timeline-")
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    path = os.path.join(d, "timeline.json")
    run = launch.horovodrun(2, [script], timeout=120, HOROVOD_TIMELINE=path)
    assert run.returncode == 0, run.output[-3000:]
    files = [path, os.path.join(d, "timeline.rank1.json")]
    for rank, p in enumerate(files):
        with open(p) as f:
            events = json.load(f)  # valid JSON: the engine closed the array at shutdown
        spans = [e for e in events if e.get("ph") == "X"]
        assert all(e["pid"] == rank for e in events), p
        lanes = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
        for tensor in ("grad.0", "grad.3", "gathered"):
            assert tensor in lanes, (tensor, sorted(lanes))
        phases = {e["name"] for e in spans if e["tid"] == lanes["grad.0"]}
        assert {"QUEUE", "NEGOTIATE", "ALLREDUCE"} <= phases, phases
        all_phases = {e["name"] for e in spans}
        # The fused 16 KB of grads takes the one-step path, the 400 KB tensor the staged pipeline.
        assert {"ONE_STEP_SHM_REDUCE", "GATHER_INTO_SHM", "SHM_REDUCE_SCATTER", "COPY_OUT", "allgather"} <= all_phases, all_phases
        assert any(n.startswith("CYCLE") for n in all_phases), all_phases
        assert all(e["dur"] >= 0 and e["ts"] > 0 for e in spans)
    merged = os.path.join(d, "merged.json")
    run = launch.python(["-m", "hvd_herring.timeline", "merge", merged] + files)
    assert run.returncode == 0, run.output
    with open(merged) as f:
        assert {e["pid"] for e in json.load(f)} == {0, 1}
