"""torch.distributed.shrink_group and abort on herring (issue 62 items 1-2): plain processes
(env:// init, no launcher that stops the survivors) in which a rank dies or is shrunk out, and the
others go on in the same processes on a new engine among themselves. Ranks run
tests/torch_distributed/workers/torch_shrink_worker.py, one scenario per launch; each check is
asserted from what every rank wrote. About 10-30 s per launch on the shared 2-core machine."""

import shutil

import pytest

from checks import assert_checks_per_rank
import launch

WORKER = "tests/torch_distributed/workers/torch_shrink_worker.py"

SURVIVOR_CHECKS = ["error_exposes_the_lost_rank_as_data", "shrink_and_first_collective_within_2_s",
                   "twenty_more_allreduces_with_right_sums"]


def launch_scenario(scenario, np):
    results_dir = launch.scratch_dir("herring-shrink-")
    run = launch.python([WORKER, "--spawn", str(np)], timeout=300, RANK=None, WORLD_SIZE=None,
                        HERRING_SHRINK_SCENARIO=scenario, HERRING_TEST_RESULTS=results_dir)
    per_rank = launch.rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


def figures(per_rank):
    return {r: {k: v for k, v in data["figures"].items() if k != "error_text"} for r, data in per_rank.items()}


@pytest.mark.parametrize("how", ["kill", "exception"])
def test_survivors_of_a_crash_shrink_the_world_and_go_on(how):
    """Rank 2 of 3 dies (SIGKILL, or an uncaught exception); ranks 0 and 1 read err.lost_ranks ==
    [2], call dist.shrink_group([2]), reduce 20 more times with the right sums (the shrink and the
    first collective within 2 s), then make a group with new_group on the shrunk world."""
    run, per_rank = launch_scenario(f"crash_{how}", 3)
    checks = SURVIVOR_CHECKS + ["new_group_works_on_the_shrunk_world"]
    assert_checks_per_rank(run, per_rank, {0: checks, 1: checks})
    print(f"\nshrink figures ({how}): {figures(per_rank)}")


def test_survivors_of_a_crash_shrink_a_subgroup():
    """4 ranks: rank 3 left in order (not a loss), rank 2 is killed; ranks 0 and 1 shrink
    new_group([0, 1, 2]) and go on in it; the groups of the replaced engine refuse, naming it."""
    run, per_rank = launch_scenario("subgroup", 4)
    checks = SURVIVOR_CHECKS + ["groups_of_the_replaced_engine_refuse_naming_the_shrink"]
    assert_checks_per_rank(run, per_rank, {0: checks, 1: checks, 3: []})
    print(f"\nshrink figures (subgroup): {figures(per_rank)}")


def test_shrink_abort_fails_work_in_flight_and_the_excluded_rank_gets_torchs_error():
    run, per_rank = launch_scenario("voluntary", 3)
    survivors = ["in_flight_work_fails_at_once_naming_the_shrink", "survivors_reduce_after_a_shrink_without_a_death"]
    assert_checks_per_rank(run, per_rank, {0: survivors, 1: survivors, 2: ["excluded_rank_gets_torchs_error"]})
    assert "exit codes by rank: [0, 0, 0]" in run.output, run.output[-3000:]
