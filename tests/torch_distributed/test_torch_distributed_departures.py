"""torch.distributed on herring, beyond the collectives: receives from any source (torch's recv
and irecv without src, gloo's recvAnysource) and ranks that leave the job while the others go on
(gloo's ranks are independent: one that is done calls destroy_process_group or just exits). Real
ranks launched by torchrun (tests/torch_distributed/workers/torch_departure_worker.py), one scenario per launch;
each check is its own test. About 20-40 s per launch on the shared 2-core machine."""

import shutil

import pytest

from checks import assert_checks_per_rank
import launch

WORKER = "tests/torch_distributed/workers/torch_departure_worker.py"


def launch_scenario(scenario, np, launcher="torchrun"):
    """torchrun, or "spawn": the worker starts its ranks itself (file:// init, explicit rank) and
    waits for each, so that a killed rank does not make the launcher stop the survivors."""
    results_dir = launch.scratch_dir("herring-departures-")
    env = dict(HERRING_DEPARTURE_SCENARIO=scenario, HERRING_TEST_RESULTS=results_dir)
    if launcher == "torchrun":
        run = launch.torchrun(np, [WORKER], timeout=300, **env)
    else:
        run = launch.python([WORKER, "--spawn", str(np)], timeout=300, RANK=None, WORLD_SIZE=None, **env)
    per_rank = launch.rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


ANY_SOURCE_CHECKS = [
    "any_source_takes_buffered_messages_in_each_senders_order",
    "any_source_receives_posted_first_take_the_first_arrivals",
    "named_receive_posted_after_an_any_source_one_is_matched_after_it",
    "any_source_receives_only_its_tag",
    "any_source_in_a_subgroup_takes_members_only",
]


def test_receives_from_any_source_name_the_sender_and_keep_each_senders_order():
    run, per_rank = launch_scenario("any_source", 3)
    assert_checks_per_rank(run, per_rank, {r: ANY_SOURCE_CHECKS for r in range(3)})
    assert run.returncode == 0, run.output[-5000:]


def test_ranks_that_leave_in_order_do_not_fail_the_groups_without_them():
    run, per_rank = launch_scenario("departures", 4)
    survivors = ["subgroup_goes_on_after_rank_3_left", "world_collective_fails_naming_rank_3",
                 "world_barrier_fails_naming_rank_3", "subgroup_allgather_after_rank_3_left"]
    pair = ["pair_goes_on_after_rank_2_left", "subgroup_collective_fails_naming_rank_2", "pair_still_goes_on"]
    assert_checks_per_rank(run, per_rank, {
        0: survivors + pair + ["message_sent_before_leaving_is_received", "receive_from_rank_3_fails_naming_it"],
        1: survivors + pair,
        2: survivors + ["rank_2_leaves_by_exiting"],
        3: ["rank_3_left"],
    })
    assert run.returncode == 0, f"exit status {run.returncode}\n{run.output[-5000:]}"
    assert "connection closed" not in run.output, run.output[-5000:]


def test_a_killed_rank_still_fails_the_groups_without_it():
    run, per_rank = launch_scenario("kill", 4, launcher="spawn")
    assert_checks_per_rank(run, per_rank, {r: ["subgroup_collective_fails_naming_killed_rank_3"] for r in range(3)})


def test_abort_fails_every_work_in_flight_at_once_naming_it():
    run, per_rank = launch_scenario("abort", 2, launcher="spawn")
    checks = ["work_in_flight_fails_naming_the_abort", "engine_is_gone_after_the_abort"]
    assert_checks_per_rank(run, per_rank, {0: checks, 1: checks})
