"""What the switch adds to Horovod's Ray integration (horovod.ray): see failed_ranks."""
