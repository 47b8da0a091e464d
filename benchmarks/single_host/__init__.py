"""The single-host suite: herring against torch-gloo, DDP, Horovod-gloo and MPI on this machine."""
