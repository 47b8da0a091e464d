"""What each rank derives from its own environment and must agree on with the others is compared
in init's rendezvous, before any rank connects: a difference fails hvd.init() on every rank, naming
what differs and the ranks, instead of a hang or a missing-rank timeout later. Real ranks launched
by horovodrun; each rank's environment or working directory set as a host's own would be."""

import json
import os
import shutil

import launch

WORKER = os.path.join("tests", "reliability", "workers", "init_agreement_worker.py")


def init_errors(np, setup, **env):
    results = launch.scratch_dir("herring-init-agreement-")
    try:
        # The start deadline far beyond the launch's timeout: a rank waiting for connections that
        # never come fails the launch, not the assertion below.
        run = launch.horovodrun(np, [WORKER], timeout=120, HERRING_TEST_RESULTS=results,
                                HERRING_TEST_RANK_SETUP=json.dumps(setup), HERRING_START_TIMEOUT_SECONDS=600,
                                **env)
        return run, {r: d["error"] for r, d in launch.rank_results(results, np).items()}
    finally:
        shutil.rmtree(results, ignore_errors=True)


def test_autotune_with_tcp_streams_set_on_some_ranks_only_fails_init_naming_it():
    # Under HOROVOD_AUTOTUNE an unset HERRING_TCP_STREAMS means "connect the most autotune tries"
    # (4): a rank whose profile sets it to the default connects 2.
    run, errors = init_errors(2, {"1": {"env": {"HERRING_TCP_STREAMS": "2"}}}, HOROVOD_AUTOTUNE=1)
    assert sorted(errors) == [0, 1], run.output[-4000:]
    for r, error in errors.items():
        assert error and "TCP data streams a pair of ranks connects" in error, (r, error, run.output[-3000:])
        assert "rank 0 has '4', rank 1 has '2'" in error, (r, error)


def test_the_same_topology_path_with_different_contents_fails_init_naming_it(tmp_path):
    hosts = {"simhost0": 0, "simhost1": 1}
    for rank, other_group in ((0, 0), (1, 1)):  # rank 1's copy puts simhost1 in another group
        d = tmp_path / f"rank{rank}"
        d.mkdir()
        groups = {"a": ["simhost0", "simhost1"]} if other_group == 0 else {"a": ["simhost0"], "b": ["simhost1"]}
        (d / "topology.json").write_text(json.dumps({"groups": groups}))
    setup = {str(r): {"cwd": str(tmp_path / f"rank{r}"), "env": {"HERRING_HOSTNAME": h}} for h, r in hosts.items()}
    run, errors = init_errors(2, setup, HERRING_ALLREDUCE="hd-topo", HERRING_TOPOLOGY="topology.json")
    assert sorted(errors) == [0, 1], run.output[-4000:]
    for r, error in errors.items():
        assert error and "the contents of the HERRING_TOPOLOGY file differs between ranks" in error, (r, error)


def test_the_same_topology_in_other_words_is_agreed(tmp_path):
    # Whitespace and key order are not a difference: the file is compared as the JSON it holds.
    setup = {}
    for rank, text in ((0, '{"groups": {"a": ["simhost0"], "b": ["simhost1"]}}'),
                       (1, '{\n  "groups": {\n "b": ["simhost1"],\n "a": ["simhost0"]}}\n')):
        d = tmp_path / f"rank{rank}"
        d.mkdir()
        (d / "topology.json").write_text(text)
        setup[str(rank)] = {"cwd": str(d), "env": {"HERRING_HOSTNAME": f"simhost{rank}"}}
    run, errors = init_errors(2, setup, HERRING_ALLREDUCE="hd-topo", HERRING_TOPOLOGY="topology.json")
    assert errors == {0: None, 1: None} and run.returncode == 0, (errors, run.output[-4000:])
