"""Strangers against a running job, and the wire decoders fuzzed.

- A 3-rank horovodrun job (two simulated hosts, so the parameter servers work over TCP) runs
  allreduces in a loop, each result checked against the reference from every rank's input, while
  a stranger process finds every rank's listening port (from /proc, as any local process can) and
  sends random bytes, headers with absurd lengths, hellos with a wrong token, with the real token
  and a wrong secret, and the whole handshake with the real token and secret read from
  horovodrun's rendezvous store; plus silent connections and a flood. Every connection must be
  closed by the rank without an answer, and the job must finish normally with correct results.
- The libFuzzer target over the frame header and negotiation decoders (fuzz/) runs for a fixed
  budget (HERRING_FUZZ_SECONDS, default 30) from a seed corpus of real encoded messages.
  Longer runs by hand: scripts/fuzz.sh SECONDS.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import launch

WORKERS = os.path.join(launch.ROOT, "tests", "native", "workers")
ACK_BYTES = 40 + 32 + 32  # a hello-ack: frame header (transport/frame.h), the acceptor's nonce, its proof
sys.path.insert(0, os.path.join(launch.ROOT, "fuzz"))


def listening_sockets(pid):
    """(ip, port) of every TCP socket in LISTEN state that process `pid` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A = TCP_LISTEN
                    continue
                ip_hex, port_hex = local.split(":")
                raw = bytes.fromhex(ip_hex)
                # /proc shows the address as host-order 32-bit words.
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((socket.inet_ntop(family, raw), int(port_hex, 16)))
    return found


def process_env(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def wait_for(predicate, seconds, what, proc):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (status {proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run_strangers(np=3, connections="mesh"):
    """Runs the job and the stranger; returns (job returncode, job output, stranger report,
    per-rank outcomes of the job)."""
    results = launch.scratch_dir("herring-strangers-")
    cmd = [os.path.join(launch.BIN, "horovodrun"), "--gloo", "-np", str(np), "-H", f"localhost:{np}",
           sys.executable, os.path.join(launch.ROOT, launch.AS_SIMULATED_HOST), "2",
           os.path.join(WORKERS, "stranger_job_worker.py")]
    env = launch.herring_env(HERRING_TEST_RESULTS=results, HERRING_TEST_MAX_SECONDS=150,
                             HOROVOD_LOG_LEVEL="INFO", HERRING_SECRET=None, HERRING_CONNECTIONS=connections)
    # The job's output goes to a file, not a pipe: nobody reads a pipe while the strangers run, and
    # a full pipe would block the ranks' logging (the INFO lines below) and with it their I/O.
    log_path = os.path.join(results, "job.log")
    log = open(log_path, "w")
    job = subprocess.Popen(cmd, env=env, cwd=launch.ROOT, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        ready = [os.path.join(results, f"{r}.ready") for r in range(np)]
        wait_for(lambda: all(os.path.exists(p) for p in ready), 120, "every rank's first step", job)
        pids = []
        for p in ready:
            with open(p) as f:
                pids.append(json.load(f)["pid"])

        # Each rank listens on one port, on the chosen interface only (loopback here), never on
        # every interface.
        targets, bound = [], []
        for rank, pid in enumerate(pids):
            listeners = listening_sockets(pid)
            assert len(listeners) == 1, f"rank {rank} (pid {pid}) listens on {listeners}"
            ip, port = listeners[0]
            assert ip == "127.0.0.1", f"rank {rank} listens on {ip}, not only on the loopback interface"
            targets += ["--target", f"{ip}:{port}"]
            bound.append(f"{ip}:{port}")
        rank_env = process_env(pids[0])
        rendezvous = f"{rank_env['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{rank_env['HOROVOD_GLOO_RENDEZVOUS_PORT']}"

        report_path = os.path.join(results, "stranger.json")
        stranger = subprocess.run([sys.executable, os.path.join(WORKERS, "stranger_client.py"), *targets,
                                   "--rendezvous", rendezvous, "--size", str(np), "--seconds", "3",
                                   "--json", report_path],
                                  capture_output=True, text=True, timeout=240)
        assert stranger.returncode == 0, stranger.stdout[-3000:] + stranger.stderr[-3000:]
        time.sleep(1.0)  # the job keeps stepping after the strangers left
        with open(os.path.join(results, "stop"), "w"):
            pass
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        log.close()
    with open(log_path) as f:
        output = f.read()

    with open(report_path) as f:
        report = json.load(f)
    report["listeners"] = bound
    outcomes = {}
    for r in range(np):
        with open(os.path.join(results, f"{r}.json")) as f:
            outcomes[r] = json.load(f)
    return job.returncode, output, report, outcomes


# mesh: the listener drops everyone once the mesh is complete. lazy (HERRING_CONNECTIONS): it
# stays open for pairs that connect later, so strangers meet the handshake: a hello with the job's
# token gets the acceptor's ack (its nonce and an HMAC proof, which prove nothing to anyone without
# the secret) before the missing proof closes it; a silent one is closed after 1 s.
@pytest.mark.parametrize("connections", ["mesh", "lazy"])
def test_strangers_do_not_disturb_a_running_job(connections):
    np = 3
    returncode, output, report, outcomes = run_strangers(np, connections)
    for target, cases in report["targets"].items():
        print(f"\n{target}: " + ", ".join(f"{n} x{o['connections']} {'/'.join(o['how'])} within {o['ms']} ms"
                                         for n, o in cases.items()))
    # The stranger reads the job token from the rendezvous store, so the handshake cases use the
    # job's own token. The secret is not there: under HOROVOD_BACKEND=herring horovodrun draws it
    # and hands it to the workers in their environment (hvd_herring.switch).
    assert report["learned_token"], report
    assert not report["learned_secret"], "the job's secret is readable from the rendezvous store"
    expected_cases = {"random_bytes", "absurd_control_length", "absurd_data_length", "wrong_token_hello",
                      "right_token_wrong_secret", "silent", "flood"}
    for r, o in outcomes.items():
        assert o["error"] is None and not o["wrong"], o
    assert returncode == 0, f"exit status {returncode}\n{output[-6000:]}"
    for target, cases in report["targets"].items():
        assert set(cases) == expected_cases, cases
        for name, outcome in cases.items():
            assert outcome["closed_by_rank"], f"{target} {name}: {outcome}"
            if connections == "lazy" and name == "right_token_wrong_secret":
                assert outcome["bytes_received"] <= ACK_BYTES, f"{target} {name}: more than the ack: {outcome}"
            else:
                assert outcome["bytes_received"] == 0, f"{target} {name}: the rank answered a stranger: {outcome}"
            assert outcome["ms"] < 2000, f"{target} {name}: {outcome}"
        assert cases["flood"]["connections"] == 200, cases["flood"]
    # Lazy: a silent stranger is held for the 1 s hello deadline, so fewer rounds fit in the time.
    assert report["rounds"] >= (2 if connections == "mesh" else 1), report["rounds"]

    for r, o in outcomes.items():
        # The job was stepping before the strangers came and after they left.
        assert o["first_step_at"] < report["started_at"] and o["last_step_at"] > report["finished_at"], (o, report)
    # Every stranger connection reached a rank's listener and was dropped there. The INFO line is
    # rate-limited (a flood must not become a flood of stderr writes from the I/O thread) and
    # carries a running count: the last count per rank, plus the connections that came after it
    # within the last second, must account for every connection.
    counts = {}
    line = (r"\[herring INFO rank (\d+)\] rank \d+: dropped a connection from \S+ after the mesh was complete "
            r"\((\d+) dropped so far\)" if connections == "mesh" else
            r"\[herring INFO rank (\d+)\] rank \d+: dropped a connection from \S+ that is no peer's \([^;\n]*; "
            r"(\d+) dropped so far\)")
    for rank, n in re.findall(line, output):
        counts[int(rank)] = max(counts.get(int(rank), 0), int(n))
    assert len(counts) == np, f"drops logged for ranks {sorted(counts)}\n{output[-3000:]}"
    connections_mode = connections
    connections = sum(o["connections"] for cases in report["targets"].values() for o in cases.values())
    lines = len(re.findall(r"dropped a connection from", output))
    assert lines < connections / 10, (counts, lines, connections)
    # Lazy: the connector logs its running count only when a drop comes a second after the last
    # line, so a burst's final count is often never printed (open: issue 27's lazy connections).
    if connections_mode == "mesh":
        assert sum(counts.values()) >= connections * 0.5, (counts, lines, connections)


def test_wire_decoders_survive_fuzzing():
    import run_fuzzer
    seconds = int(os.environ.get("HERRING_FUZZ_SECONDS", "30"))
    build_seconds = run_fuzzer.build()
    stats = run_fuzzer.run(seconds)  # raises FuzzFailure with the crashing input
    print(f"\nwire decoders fuzzed: build {build_seconds:.0f} s, {stats}")
    # At the rate of this target (thousands per second even on a busy 2-core machine), fewer than
    # this means the fuzzer did not really run.
    assert stats["number_of_executed_units"] > 20 * seconds, stats
    assert stats["corpus_files"] > 0 and stats["seeds"] >= 30, stats
