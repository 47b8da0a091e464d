"""HOROVOD_TIMELINE: every rank writes a Chrome trace in Horovod's format (lanes named like
Horovod's tensors, NEGOTIATE_<OP> and <OP> begin/end pairs, Horovod's per-rank ready markers inside
rank 0's NEGOTIATE_<OP> spans, dtype/shape args on op ends, CYCLE_START markers with
HOROVOD_TIMELINE_MARK_CYCLES=1) plus herring's own phases, written as it happens: valid JSON while
the job runs and after kill -9; hvd.start_timeline / stop_timeline at run time."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

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


def _write(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _lanes(events):
    """{lane name: pid} from Horovod's process_name metadata (pid 0 is the file's own)."""
    return {e["args"]["name"]: e["pid"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] != 0}


def _balanced(events, pid):
    """Every B on a lane has its E, in order."""
    depth = 0
    for e in events:
        if e.get("pid") == pid and e.get("ph") in ("B", "E"):
            depth += 1 if e["ph"] == "B" else -1
            assert depth >= 0, pid
    return depth == 0


def _spans(events, pid):
    """[(begin event, end event, [complete events between them])] of a lane, read as Horovod's
    timeline tools read it: file order, begins and ends nested per lane."""
    stack, spans = [], []
    for e in events:
        if e.get("pid") != pid:
            continue
        if e["ph"] == "B":
            stack.append((e, []))
        elif e["ph"] == "E":
            begin, inside = stack.pop()
            spans.append((begin, e, inside))
        elif e["ph"] == "X" and stack:
            stack[-1][1].append(e)
    return spans


def test_timeline_of_a_two_rank_job():
    d = launch.scratch_dir("herring-timeline-")
    path = os.path.join(d, "timeline.json")
    run = launch.horovodrun(2, [_write(d, "job.py", SCRIPT)], timeout=180, HOROVOD_TIMELINE=path,
                            HOROVOD_TIMELINE_MARK_CYCLES=1)
    assert run.returncode == 0, run.output[-3000:]
    files = [path, os.path.join(d, "timeline.rank1.json")]
    for rank, p in enumerate(files):
        with open(p) as f:
            events = json.load(f)
        assert events[0]["pid"] == 0 and events[0]["args"]["name"] == f"rank {rank}"
        lanes = _lanes(events)
        for tensor in ("allreduce.grad.0", "allreduce.grad.3", "allreduce.big", "allgather.gathered"):
            assert tensor in lanes, (tensor, sorted(lanes))
            assert _balanced(events, lanes[tensor]), tensor
        on_grad = [e for e in events if e.get("pid") == lanes["allreduce.grad.0"]]
        begins = [e["name"] for e in on_grad if e["ph"] == "B"]
        assert begins == ["NEGOTIATE_ALLREDUCE", "ALLREDUCE"] * 3, begins
        # herring's QUEUE before each negotiation (and the buffer's phases, when grad.0 went alone)
        assert [e["name"] for e in on_grad if e["ph"] == "X"].count("QUEUE") == 3
        # Horovod's op ends carry the output's dtype and shape (the fused grads each their own).
        op_ends = [end for begin, end, _ in _spans(events, lanes["allreduce.grad.0"]) if begin["name"] == "ALLREDUCE"]
        assert len(op_ends) == 3 and all(e["args"]["dtype"] == "float32" and e["args"]["shape"] == "[1000]"
                                         for e in op_ends), op_ends
        gathered = [e["name"] for e in events if e.get("pid") == lanes["allgather.gathered"] and e["ph"] == "B"]
        assert gathered == ["NEGOTIATE_ALLGATHER", "ALLGATHER"], gathered
        spans = {e["name"] for e in events if e.get("ph") == "X"}
        # The fused 16 KB of grads takes the one-step path, the 400 KB tensor the staged pipeline.
        assert {"ONE_STEP_SHM_REDUCE", "GATHER_INTO_SHM", "SHM_REDUCE_SCATTER", "COPY_OUT"} <= spans, spans
        assert any(n.startswith("CYCLE (") for n in spans), spans
        assert any(e.get("name") == "CYCLE_START" and e["ph"] == "i" for e in events)
        assert any(l.startswith("fused: allreduce.grad.") for l in lanes), sorted(lanes)
        assert all(e["ts"] > 0 for e in events if "ts" in e)
        assert all(e["dur"] >= 0 for e in events if e.get("ph") == "X")
    merged = os.path.join(d, "merged.json")
    run = launch.python(["-m", "hvd_herring.timeline", "merge", merged] + files)
    assert run.returncode == 0, run.output
    with open(merged) as f:
        events = json.load(f)
    assert {e["pid"] for e in events if "pid" in e} == {0, 1}
    assert {"allreduce.grad.0", "rank 1"} <= {e["args"]["name"] for e in events if e.get("ph") == "M"
                                              and e["name"] in ("thread_name", "process_name")}


STRAGGLER_SCRIPT = """
import time, torch, horovod.torch as hvd
hvd.init()
for step in range(3):
    if hvd.rank() == hvd.size() - 1:
        time.sleep(0.4)  # the straggler
    hvd.allreduce(torch.ones(5, 2, dtype=torch.float64), name="straggled")
hvd.allgather(torch.ones(hvd.rank() + 1, 3, dtype=torch.int32), name="gathered")
hvd.broadcast(torch.ones(7), root_rank=0, name="sent")
hvd.shutdown()
"""


@pytest.mark.parametrize("np_,per_host", [(2, None), (4, 2)], ids=["one-host", "2-hosts"])
def test_ready_markers_show_the_straggler_and_op_ends_carry_dtype_and_shape(np_, per_host):
    # Horovod's timeline (rank 0's file, the coordinator's) marks inside a NEGOTIATE_<OP> span the
    # moment each rank's request reached the coordinator: {"ph": "X", "name": "<rank>", "dur": 0};
    # the straggler's (the last rank's) marker comes last. Without the response cache every step
    # negotiates. Across (simulated) hosts the requests reach rank 0 through the host leaders.
    d = launch.scratch_dir("herring-timeline-ready-")
    path = os.path.join(d, "timeline.json")
    run = launch.horovodrun(np_, launch.on_simulated_hosts(per_host, _write(d, "job.py", STRAGGLER_SCRIPT)),
                            timeout=240, HOROVOD_TIMELINE=path, HOROVOD_CACHE_CAPACITY="0")
    assert run.returncode == 0, run.output[-3000:]
    with open(path) as f:
        events = json.load(f)
    lanes = _lanes(events)
    negotiations = [(b, e, inside) for b, e, inside in _spans(events, lanes["allreduce.straggled"])
                    if b["name"] == "NEGOTIATE_ALLREDUCE"]
    assert len(negotiations) == 3, negotiations
    for begin, end, inside in negotiations:
        ready = [x for x in inside if x["name"].isdigit()]
        assert sorted(x["name"] for x in ready) == [str(r) for r in range(np_)], inside
        assert ready[-1]["name"] == str(np_ - 1), inside  # the straggler's, last
        for x in ready:
            assert set(x) == {"ph", "name", "ts", "pid", "dur"} and x["dur"] == 0, x  # Horovod's event, exactly
            assert begin["ts"] <= x["ts"] <= end["ts"], (begin, x, end)
        assert ready[-1]["ts"] - ready[-2]["ts"] >= 200000, ready  # the last rank came 0.4 s late
    # Only the ready markers count: rank 0's own QUEUE span lands inside the negotiation too when
    # the other ranks' requests opened it in an earlier cycle than rank 0 took its own.
    gathered = [b["name"] for b, _, inside in _spans(events, lanes["allgather.gathered"])
                if b["name"] == "NEGOTIATE_ALLGATHER"
                and sorted(x["name"] for x in inside if x["name"].isdigit()) == [str(r) for r in range(np_)]]
    assert gathered == ["NEGOTIATE_ALLGATHER"], _spans(events, lanes["allgather.gathered"])
    # Horovod's op ends: the output's dtype and shape (an allgather's as gathered: 1 + 2 + ... rows).
    ends = {lane: [e["args"] for b, e, _ in _spans(events, lanes[lane]) if not b["name"].startswith("NEGOTIATE_")]
            for lane in ("allreduce.straggled", "allgather.gathered", "broadcast.sent")}
    assert [(a["dtype"], a["shape"]) for a in ends["allreduce.straggled"]] == [("float64", "[5, 2]")] * 3, ends
    rows = np_ * (np_ + 1) // 2
    assert [(a["dtype"], a["shape"]) for a in ends["allgather.gathered"]] == [("int32", f"[{rows}, 3]")], ends
    assert [(a["dtype"], a["shape"]) for a in ends["broadcast.sent"]] == [("float32", "[7]")], ends


RUNTIME_SCRIPT = """
import os, torch, horovod.torch as hvd
hvd.init()
d = os.environ["TEST_DIR"]
hvd.allreduce(torch.ones(4), name="before")
hvd.start_timeline(os.path.join(d, "dyn.json"), mark_cycles=True)
hvd.allreduce(torch.ones(4), name="during")
hvd.stop_timeline()
hvd.allreduce(torch.ones(4), name="after")
hvd.shutdown()
"""


def test_start_and_stop_timeline_at_run_time():
    d = launch.scratch_dir("herring-timeline-dyn-")
    run = launch.horovodrun(2, [_write(d, "job.py", RUNTIME_SCRIPT)], timeout=180, HOROVOD_TIMELINE="DYNAMIC",
                            TEST_DIR=d)
    assert run.returncode == 0, run.output[-3000:]
    for p in ("dyn.json", "dyn.rank1.json"):
        with open(os.path.join(d, p)) as f:
            events = json.load(f)
        assert set(_lanes(events)) == {"allreduce.during", "negotiation"}, _lanes(events)
        assert any(e.get("name") == "CYCLE_START" for e in events)
    assert not os.path.exists(os.path.join(d, "DYNAMIC"))


def test_start_timeline_needs_horovod_timeline_set_as_in_horovod():
    d = launch.scratch_dir("herring-timeline-unset-")
    script = _write(d, "job.py", """
import horovod.torch as hvd
hvd.init()
try:
    hvd.start_timeline("/tmp/never.json")
except ValueError as e:
    print("REFUSED", e)
""")
    run = launch.python([script], timeout=120, HOROVOD_TIMELINE=None)
    assert run.returncode == 0 and "REFUSED Set HOROVOD_TIMELINE=DYNAMIC" in run.output, run.output[-3000:]


KILLED_SCRIPT = """
import os, time, torch, horovod.torch as hvd
hvd.init()
d = os.environ["TEST_DIR"]
with open(os.path.join(d, f"pid.{hvd.rank()}"), "w") as f:
    f.write(str(os.getpid()))
for step in range(1000):
    if step == 5 and hvd.rank() == 1:
        open(os.path.join(d, "stuck"), "w").close()
        time.sleep(600)   # mid-step: rank 0 waits in this step's negotiation until it is killed
    hvd.allreduce(torch.tensor([1.0, 2.0, 3.0]), name="test_allreduce")
"""


def _kill_ranks_then_launcher(proc, d):
    """SIGKILLs both ranks (nobody closes the file), then lets horovodrun end by itself: killed with
    them, it left its multiprocessing semaphores (10, from Horovod's safe_shell_exec) in /dev/shm."""
    for rank in (0, 1):
        try:
            with open(os.path.join(d, f"pid.{rank}")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            pass  # it never started, or is gone already
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_a_job_killed_mid_step_leaves_a_timeline_horovods_test_accepts():
    d = launch.scratch_dir("herring-timeline-killed-")
    path = os.path.join(d, "timeline.json")
    env = launch.herring_env(HOROVOD_TIMELINE=path, HOROVOD_TIMELINE_MARK_CYCLES="1", TEST_DIR=d,
                             HERRING_DEADLOCK_TIME_SECONDS="0", HOROVOD_STALL_CHECK_DISABLE="1")
    cmd = [os.path.join(launch.BIN, "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2", sys.executable,
           _write(d, "job.py", KILLED_SCRIPT)]
    proc = subprocess.Popen(cmd, env=env, cwd=launch.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(d, "stuck")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(os.path.join(d, "stuck")), proc.communicate(timeout=30)[0]
        time.sleep(1.0)  # rank 0 has submitted step 5's allreduce and waits for rank 1
    finally:
        _kill_ranks_then_launcher(proc, d)
    with open(path) as f:
        timeline_text = f.read()
    # Horovod's test_timeline.py's assertions, on the file the killed rank 0 left:
    assert 'allreduce.test_allreduce' in timeline_text, timeline_text
    assert 'NEGOTIATE_ALLREDUCE' in timeline_text, timeline_text
    assert 'ALLREDUCE' in timeline_text, timeline_text
    assert 'CYCLE_START' in timeline_text, timeline_text
    events = json.loads(timeline_text)  # valid JSON as it is
    pid = _lanes(events)["allreduce.test_allreduce"]
    begins = [e["name"] for e in events if e.get("pid") == pid and e["ph"] == "B"]
    ends = [e for e in events if e.get("pid") == pid and e["ph"] == "E"]
    # Five whole steps, and the sixth's negotiation begun, never ended: where the job was stuck.
    assert begins == ["NEGOTIATE_ALLREDUCE", "ALLREDUCE"] * 5 + ["NEGOTIATE_ALLREDUCE"], begins
    assert len(ends) == 10
