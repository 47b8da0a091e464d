"""Runs a function in a child forked from this rank and hands its answer back: what the checks of
a collective called after fork() need (the child must raise, not run the parent's engine)."""

import json
import os
import time


def answer_of_forked_child(fn, timeout_seconds):
    """fork(); the child runs fn() (a JSON-serialisable answer) and exits at once. Returns the
    child's answer; raises AssertionError if it hung past the timeout (it is killed) or exited
    otherwise than with status 0."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            answer = fn()
        except BaseException as e:  # noqa: BLE001  (reported to the parent, which checks it)
            answer = f"the child's function raised {type(e).__name__}: {e}"
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout_seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child's collective hung")
        time.sleep(0.01)
    with os.fdopen(read_end, "rb") as f:
        text = f.read().decode()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child ended with status {status}: {text}"
    return json.loads(text)


def message_of(call):
    """What `call()` raised, as "Type: message", or "no error"."""
    try:
        call()
    except Exception as e:  # noqa: BLE001  (what it raises is what is checked)
        return f"{type(e).__name__}: {e}"
    return "no error"
