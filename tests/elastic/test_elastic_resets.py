"""Fifty elastic resets in one job (tests/elastic/workers/elastic_common.py, scenario many_resets):
training stays exact, and every round starts with the same descriptors and threads and with no
shared memory left by the rounds before, and the job leaves none. The job has a /dev/shm of its
own (launch.PRIVATE_SHM_SCRIPT), so what its ranks see there is theirs alone."""

import pytest

from test_elastic_workers import outcome


@pytest.mark.parametrize("framework", ["torch"])
def test_fifty_resets_leak_nothing(framework):
    o = outcome(framework, "many_resets")
    assert o.run.returncode == 0, o.output[-5000:]
    o.check_weights()
    for rank in (0, 1):
        rounds = [e for e in o.events if e["event"] == "round" and e["rank"] == rank]
        assert len(rounds) == 51, len(rounds)
        # From the second round on (the first init loads libraries and opens their files),
        # every round starts with the same descriptors and threads: the old round's sockets,
        # shared memory and threads were released.
        assert {(e["fds"], e["threads"]) for e in rounds[1:]} == {(rounds[1]["fds"], rounds[1]["threads"])}, \
            [(e["fds"], e["threads"]) for e in rounds]
        assert all(set(e["shm"]) <= o.shm_before for e in rounds), \
            [sorted(set(e["shm"]) - o.shm_before) for e in rounds]
    assert not [n for n in o.run.shm_left if "herring" in n], o.run.shm_left
