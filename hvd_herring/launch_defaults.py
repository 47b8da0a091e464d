"""Which launch mode Horovod's launchers pick under the switch when the user names none.

Horovod's horovodrun (and horovod.spark.run, horovod.ray, which share its run_controller) use MPI
whenever mpi_built() says so, else gloo. Under HOROVOD_BACKEND=herring mpi_built() is true as
soon as mpi4py is installed (the engine's MPI launch path), but the gloo mode stays the default
it was: the engine's own rendezvous through the launcher's store, no mpirun needed on the hosts,
and failures that name the Horovod rank. `--mpi` / `use_mpi=True` still choose MPI."""


def prefer_gloo(launch):
    """Applied to horovod.runner.launch right after it is imported (hvd_herring.switch)."""
    run_controller = launch.run_controller

    def run_controller_preferring_gloo(use_gloo, gloo_run, use_mpi, mpi_run, use_jsrun, js_run, verbosity):
        if not (use_gloo or use_mpi or use_jsrun):
            use_gloo = True
        return run_controller(use_gloo, gloo_run, use_mpi, mpi_run, use_jsrun, js_run, verbosity)

    def is_gloo_used(use_gloo=None, use_mpi=None, use_jsrun=None):
        # Horovod keeps this in step with run_controller's choice: so does this.
        return bool(use_gloo or (not use_mpi and not use_jsrun))

    launch.run_controller = run_controller_preferring_gloo
    launch.is_gloo_used = is_gloo_used
