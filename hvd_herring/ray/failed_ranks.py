"""RayExecutor's static run/execute, naming the Horovod rank that failed.

Horovod's StaticAdapter waits with one ray.get over every rank's result: when an actor dies the
user sees Ray's "The actor died unexpectedly" with an actor id and a pid, not which rank it was,
and the ranks that outlived it (whose engine reports the lost peer) are never heard. Under the
switch (hvd_herring.switch._AFTER_IMPORT) horovod.ray.runner gets these methods instead: they
wait for the results one at a time, and at the first failure give the others a few seconds to
finish failing, then raise one error naming every failed rank, dead actors first."""

import ray
import ray.exceptions

# How long the surviving ranks get to report the lost peer once one rank failed (their engine
# notices at once when the connection closes; HERRING_TIMEOUT_SECONDS bounds a silent peer).
GRACE_SECONDS = 10.0


class HorovodRankFailed(RuntimeError):
    """One or more Horovod ranks of a RayExecutor job failed; `ranks` lists them."""

    def __init__(self, message, ranks):
        super().__init__(message)
        self.ranks = ranks


def get_naming_ranks(refs):
    """ray.get(refs), where refs[r] is rank r's result; on failure, HorovodRankFailed."""
    rank_of = {ref: rank for rank, ref in enumerate(refs)}
    pending, failures = list(refs), {}
    while pending and not failures:
        ready, pending = ray.wait(pending, num_returns=1)
        _collect(ready, rank_of, failures)
    if failures:
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=GRACE_SECONDS) if pending else ([], [])
        _collect(ready, rank_of, failures)
        dead = sorted(r for r, (died, _) in failures.items() if died)
        others = sorted(r for r, (died, _) in failures.items() if not died)
        lines = [f"Horovod rank {r}'s Ray actor died: {failures[r][1]}" for r in dead]
        lines += [f"Horovod rank {r} failed: {failures[r][1]}" for r in others]
        raise HorovodRankFailed("\n".join(lines), dead + others) from None
    return ray.get(list(refs))


def _collect(ready, rank_of, failures):
    for ref in ready:
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as e:
            failures[rank_of[ref]] = (True, _first_line(e))
        except ray.exceptions.RayError as e:
            failures[rank_of[ref]] = (False, _last_line(e))


def _first_line(error):
    return str(error).strip().splitlines()[0]


def _last_line(error):
    """A task error's message ends with the exception the rank raised."""
    lines = [l for l in str(error).strip().splitlines() if l.strip()]
    return lines[-1] if lines else type(error).__name__


def name_failed_ranks(runner_module):
    """Applied to horovod.ray.runner right after it is imported under the switch."""
    adapter = runner_module.StaticAdapter

    def execute(self, fn, callbacks=None):
        return get_naming_ranks(self._run_remote(fn))

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        args, kwargs = args or [], kwargs or {}
        return get_naming_ranks(self._run_remote(fn=lambda w: fn(*args, **kwargs)))

    execute.__doc__ = adapter.execute.__doc__
    run.__doc__ = adapter.run.__doc__
    adapter.execute, adapter.run = execute, run
