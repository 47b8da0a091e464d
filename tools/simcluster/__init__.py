"""Testing aids that need no engine: the simulated cluster (network namespaces joined by shaped
links, one sshd per host, jobs launched with the real horovodrun over ssh).

    from tools.simcluster.cluster import SimulatedCluster
    with SimulatedCluster(hosts=4, rate="1gbit") as c:
        run = c.horovodrun(["python", "train.py"], env={"HOROVOD_BACKEND": "herring"})

See docs/cluster.md. Nothing here imports torch or the native module.
"""
