"""How the test files of one run share the machine when pytest-xdist runs them in several workers
(scripts/test.sh: two, by file): most files run beside another one, and a file marked `exclusive`
(it compares machine-wide state before and after, such as /dev/shm or the sshd processes, which a
neighbour's job would change) runs alone.

A readers-writer lock over two lock files of the run (PYTEST_XDIST_TESTRUNUID names them): every
file holds the room shared, an exclusive one holds it alone. The turnstile gives the exclusive
file its turn: flock(2) lets new shared holders in while an exclusive one waits, so a worker that
goes from file to file could keep it out for the whole run; whoever waits for the room holds the
turnstile meanwhile, and everyone passes it on the way in."""

import fcntl
import os
import tempfile


class MachineShare:
    def __init__(self, run_id):
        base = os.path.join(tempfile.gettempdir(), f"herring-tests-{run_id}")
        self._paths = (base + ".turnstile", base + ".room")
        self._turnstile, self._room = (open(p, "a+") for p in self._paths)
        self._held = False

    def enter(self, exclusive):
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._held = True

    def leave(self):
        if self._held:
            fcntl.flock(self._room, fcntl.LOCK_UN)
            self._held = False

    def remove(self):
        """At the end of this worker's run: the files go (a worker that still runs keeps its open
        descriptors, and so its locks; it opened them at its first test, before any worker ended)."""
        self.leave()
        for path in self._paths:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


def for_this_worker():
    """The share of this xdist worker; None outside xdist (one process runs everything in turn)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return MachineShare(run_id) if run_id and os.environ.get("PYTEST_XDIST_WORKER") else None
