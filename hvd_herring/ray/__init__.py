"""What herring adds to Ray: to Horovod's Ray integration (horovod.ray, under the switch), see
failed_ranks; to Ray Train's torch.distributed workers, the setup hook in worker_setup."""
