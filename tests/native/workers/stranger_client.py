"""A stranger: a process that is not part of the job and connects to the ranks' listening ports.

    python stranger_client.py --target 127.0.0.1:PORT [--target ...] [--rendezvous ADDR:PORT]
                              [--size N] [--seconds S] [--json OUT]

For every target it opens fresh connections and sends, one case per connection:
  random_bytes          64 KiB of random bytes
  absurd_control_length a valid header of a control frame announcing 4 GiB - 1 of payload
  absurd_data_length    a valid header of a data chunk of a 2**62-byte message
  wrong_token_hello     a well-formed hello with a job token that is not this job's
  right_token_wrong_secret  a hello with the job's real token (read from the rendezvous store,
                        like any process that can reach it), then a proof made with a wrong secret
  stolen_secret_handshake   the whole handshake with the job's real token AND secret when the
                        rendezvous store hands them out (HERRING_SECRET unset), then an abort
                        message as if from a rank
  silent                connects and sends nothing
  flood                 200 connections at once, all held open
and records how each connection ended: closed by the rank (EOF or reset) and after how long,
bytes received (a rank must never answer a stranger), or still open at the deadline. With
--seconds it goes round again (without the flood) until that much time has passed, so that its
connections land while the job is in every phase of its steps.

The wire constants come from native/transport/frame.h, so the stranger speaks the current format.
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HEADER = struct.Struct("<IHBBIIQQQ")  # magic, version, kind, flags, payload, reserved, tag, offset, total
CLOSE_DEADLINE = 5.0


def wire_constants():
    with open(os.path.join(ROOT, "native", "transport", "frame.h")) as f:
        text = f.read()

    def grab(pattern):
        m = re.search(pattern, text)
        if not m:
            raise RuntimeError(f"frame.h no longer matches {pattern!r}: update the stranger")
        return int(m.group(1), 0)

    return {
        "magic": grab(r"kFrameMagic\s*=\s*(0x[0-9A-Fa-f]+)"),
        "version": grab(r"kWireVersion\s*=\s*(\d+)"),
        "hello": grab(r"kHello\s*=\s*(\d+)"),
        "hello_proof": grab(r"kHelloProof\s*=\s*(\d+)"),
        "data": grab(r"kData\s*=\s*(\d+)"),
        "control": grab(r"kControl\s*=\s*(\d+)"),
        "nonce": grab(r"kNonceBytes\s*=\s*(\d+)"),
        "proof": grab(r"kProofBytes\s*=\s*(\d+)"),
    }


W = wire_constants()
assert HEADER.size == 40


def header(kind, payload=0, tag=0, offset=0, total=0):
    return HEADER.pack(W["magic"], W["version"], kind, 0, payload, 0, tag, offset, total)


def identity(rank, stream):
    return (rank << 16) | stream


def proof(secret, label, first_nonce, second_nonce, dialer, acceptor, token):
    """HandshakeProof of native/transport/tcp_mesh.cc."""
    message = label + first_nonce + second_nonce + struct.pack("<QQQ", dialer, acceptor, token)
    return hmac.new(secret, message, hashlib.sha256).digest()


def connect(host, port):
    s = socket.create_connection((host, port), timeout=CLOSE_DEADLINE)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def send_quietly(s, data):
    """Sends what the rank lets us send; a rank that already closed resets the connection."""
    try:
        s.sendall(data)
        return True
    except OSError:
        return False


def await_close(s, started, received=b""):
    """Reads until the rank closes the connection or CLOSE_DEADLINE passes."""
    s.settimeout(0.2)
    how = "open"
    while time.monotonic() - started < CLOSE_DEADLINE:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            how = "reset"
            break
        if not chunk:
            how = "eof"
            break
        received += chunk
    s.close()
    return {"closed_by_rank": how != "open", "how": how, "ms": round((time.monotonic() - started) * 1000, 2),
            "bytes_received": len(received)}


def case_random_bytes(host, port, job):
    s, t = connect(host, port), time.monotonic()
    send_quietly(s, os.urandom(64 * 1024))
    return await_close(s, t)


def case_absurd_control_length(host, port, job):
    s, t = connect(host, port), time.monotonic()
    send_quietly(s, header(W["control"], payload=0xFFFFFFFF, tag=6) + os.urandom(1024))
    return await_close(s, t)


def case_absurd_data_length(host, port, job):
    s, t = connect(host, port), time.monotonic()
    send_quietly(s, header(W["data"], payload=1 << 28, tag=7, offset=0, total=1 << 62) + os.urandom(1024))
    return await_close(s, t)


def case_wrong_token_hello(host, port, job):
    s, t = connect(host, port), time.monotonic()
    token = int.from_bytes(os.urandom(8), "little")
    send_quietly(s, header(W["hello"], W["nonce"], tag=token, offset=identity(job["size"] - 1, 0)) +
                 os.urandom(W["nonce"]))
    return await_close(s, t)


def _handshake(host, port, job, secret):
    """Dials like rank size-1 would; returns the await_close outcome (an ack, if any, counts as
    received bytes, and the proof is sent only if one came)."""
    s, t = connect(host, port), time.monotonic()
    nonce = os.urandom(W["nonce"])
    me = identity(job["size"] - 1, 0)
    send_quietly(s, header(W["hello"], W["nonce"], tag=job["token"], offset=me) + nonce)
    s.settimeout(CLOSE_DEADLINE)
    ack = b""
    try:
        while len(ack) < 40 + W["nonce"] + W["proof"]:
            chunk = s.recv(4096)
            if not chunk:
                break
            ack += chunk
    except OSError:
        pass
    if len(ack) >= 40 + W["nonce"]:
        their_nonce = ack[40:40 + W["nonce"]]
        acceptor = HEADER.unpack(ack[:40])[7]
        p = proof(secret, b"herring-proof|", their_nonce, nonce, me, acceptor, job["token"])
        send_quietly(s, header(W["hello_proof"], W["proof"], tag=job["token"], offset=me) + p)
        reason = b"a stranger says the job failed"
        send_quietly(s, header(W["control"], len(reason), tag=6) + reason)
    return await_close(s, t, ack)


def case_right_token_wrong_secret(host, port, job):
    return _handshake(host, port, job, os.urandom(32))


def case_stolen_secret_handshake(host, port, job):
    return _handshake(host, port, job, job["secret"])


def case_silent(host, port, job):
    s, t = connect(host, port), time.monotonic()
    return await_close(s, t)


def case_flood(host, port, job, count=200):
    t = time.monotonic()
    socks = []
    for _ in range(count):
        try:
            socks.append(connect(host, port))
        except OSError:
            break
    outcomes = [await_close(s, t) for s in socks]
    return {"connections": len(socks), "closed_by_rank": all(o["closed_by_rank"] for o in outcomes) and bool(socks),
            "how": sorted({o["how"] for o in outcomes}), "ms": max((o["ms"] for o in outcomes), default=None),
            "bytes_received": sum(o["bytes_received"] for o in outcomes)}


CASES = {
    "random_bytes": case_random_bytes,
    "absurd_control_length": case_absurd_control_length,
    "absurd_data_length": case_absurd_data_length,
    "wrong_token_hello": case_wrong_token_hello,
    "right_token_wrong_secret": case_right_token_wrong_secret,
    "stolen_secret_handshake": case_stolen_secret_handshake,
    "silent": case_silent,
    "flood": case_flood,
}


def learn_from_rendezvous(rendezvous, size):
    """What horovodrun's HTTP rendezvous store tells anyone who asks: rank 0's record carries the
    job token (line 5, hex) and, when HERRING_SECRET is unset, the secret (line 6, hex)."""
    job = {"size": size, "token": None, "secret": None}
    if not rendezvous:
        return job
    try:
        with urllib.request.urlopen(f"http://{rendezvous}/herring/e0.0", timeout=5) as r:
            lines = r.read().decode().split("\n")
    except urllib.error.HTTPError:
        # HERRING_RENDEZVOUS=host: the world record, "<rank> <bytes>\n<record>"... by rank
        with urllib.request.urlopen(f"http://{rendezvous}/herring/e0.all", timeout=5) as r:
            text = r.read().decode()
        head, rest = text.split("\n", 1)
        lines = rest[:int(head.split(" ")[1])].split("\n")
    if len(lines) >= 5 and lines[4]:
        job["token"] = int(lines[4], 16)
    if len(lines) >= 6 and lines[5]:
        job["secret"] = bytes.fromhex(lines[5])
    return job


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", required=True, help="HOST:PORT of a rank's listener")
    parser.add_argument("--rendezvous", help="ADDR:PORT of horovodrun's rendezvous store")
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0,
                        help="repeat every case (the flood once) until this long has passed")
    parser.add_argument("--json")
    args = parser.parse_args()
    job = learn_from_rendezvous(args.rendezvous, args.size)
    report = {"learned_token": job["token"] is not None, "learned_secret": job["secret"] is not None,
              "started_at": time.monotonic(), "targets": {}}
    outcomes = {t: {} for t in args.target}
    rounds = 0
    while rounds == 0 or time.monotonic() - report["started_at"] < args.seconds:
        rounds += 1
        for target in args.target:
            host, port = target.rsplit(":", 1)
            for name, fn in CASES.items():
                if name == "right_token_wrong_secret" and job["token"] is None:
                    continue
                if name == "stolen_secret_handshake" and (job["token"] is None or job["secret"] is None):
                    continue
                if name == "flood" and rounds > 1:
                    continue
                try:
                    o = fn(host, int(port), job)
                except OSError as e:
                    o = {"closed_by_rank": False, "how": f"could not connect: {e}", "ms": None, "bytes_received": 0}
                outcomes[target].setdefault(name, []).append(o)
    report["finished_at"] = time.monotonic()
    report["rounds"] = rounds
    # Per target and case: every connection of every round.
    for target, per_case in outcomes.items():
        report["targets"][target] = {name: {
            "connections": sum(o.get("connections", 1) for o in outs),
            "closed_by_rank": all(o["closed_by_rank"] for o in outs),
            "how": sorted({h for o in outs for h in (o["how"] if isinstance(o["how"], list) else [o["how"]])}),
            "ms": max((o["ms"] for o in outs if o["ms"] is not None), default=None),
            "bytes_received": sum(o["bytes_received"] for o in outs)} for name, outs in per_case.items()}
    text = json.dumps(report, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
