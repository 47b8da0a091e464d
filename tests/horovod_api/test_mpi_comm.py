"""Horovod's MPI entry points on the herring engine (hvd_herring/mpi_comm.py): real ranks under
mpirun run tests/horovod_api/workers/mpi_comm_worker.py (hvd.init(comm=...) with a sub-communicator, the list of
every rank, process sets from communicators, the mpi_* answers), and `horovodrun --mpi` launches
(before, it refused: "MPI support has not been built")."""

import os

import pytest

import launch

WORKER = os.path.join("tests", "horovod_api", "workers", "mpi_comm_worker.py")
CHECK_NAMES = [
    "mpi_answers_are_consistent",
    "init_with_a_sub_communicator_runs_a_job_of_its_own",
    "init_with_the_list_of_every_rank_is_the_whole_job",
    "process_sets_from_communicators",
]
# Open MPI refuses to run as root without these (the CI machine runs as root).
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def horovodrun_mpi(np, script_args, timeout, **env):
    cmd = [os.path.join(launch.BIN, "horovodrun"), "--mpi", "-np", str(np), "-H", f"localhost:{np}",
           "--mpi-args=--oversubscribe --bind-to none", launch.sys.executable] + list(script_args)
    return launch._run(cmd, launch.herring_env(**ROOT_OK, **env), timeout)


@pytest.fixture(scope="module", params=["mpirun-np4", "horovodrun-mpi-np4"])
def launched(request):
    results = launch.scratch_dir("herring-mpi-comm-")
    if request.param.startswith("mpirun"):
        run = launch.mpirun(4, [WORKER], timeout=600, HERRING_TEST_RESULTS=results, HOROVOD_DYNAMIC_PROCESS_SETS=1)
    else:
        run = horovodrun_mpi(4, [WORKER], timeout=600, HERRING_TEST_RESULTS=results, HOROVOD_DYNAMIC_PROCESS_SETS=1)
    return request.param, run, launch.rank_results(results, 4)


def test_every_rank_reported(launched):
    name, run, per_rank = launched
    assert sorted(per_rank) == [0, 1, 2, 3], f"{name}: ranks reported {sorted(per_rank)}\n{run.output[-5000:]}"
    assert run.returncode == 0, f"{name}: exit {run.returncode}\n{run.output[-5000:]}"


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(launched, check):
    name, run, per_rank = launched
    assert per_rank, f"{name}: no rank reported\n{run.output[-5000:]}"
    for r, data in sorted(per_rank.items()):
        assert data["results"].get(check) == "ok", f"{name}: rank {r}: {data['results'].get(check, 'not run')}"
