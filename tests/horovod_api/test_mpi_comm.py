"""Horovod's MPI entry points on the herring engine (hvd_herring/mpi_comm.py): real ranks under
mpirun run tests/horovod_api/workers/mpi_comm_worker.py (hvd.init(comm=...) with a sub-communicator, the list of
every rank, process sets from communicators, the mpi_* answers), and `horovodrun --mpi` launches
(before, it refused: "MPI support has not been built")."""

import os

import pytest

import checks
import launch

WORKER = os.path.join("tests", "horovod_api", "workers", "mpi_comm_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
# Open MPI refuses to run as root without these (the CI machine runs as root).
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def horovodrun_mpi(np, script_args, timeout, **env):
    cmd = [os.path.join(launch.BIN, "horovodrun"), "--mpi", "-np", str(np), "-H", f"localhost:{np}",
           "--mpi-args=--oversubscribe --bind-to none", launch.sys.executable] + list(script_args)
    return launch._run(cmd, launch.herring_env(**ROOT_OK, **env), timeout)


@pytest.fixture(scope="module", params=["mpirun-np4", "horovodrun-mpi-np4"])
def launched(request):
    launcher = launch.mpirun if request.param.startswith("mpirun") else horovodrun_mpi
    run, per_rank = launch.run_with_results(launcher, 4, [WORKER], prefix="herring-mpi-comm-", timeout=600,
                                            HOROVOD_DYNAMIC_PROCESS_SETS=1)
    return request.param, 4, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)
