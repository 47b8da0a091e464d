"""Benchmarks of herring, one package per suite:

    single_host/  herring against the stacks Horovod users have, on this machine (benchmarks/run.sh,
                  `python -m benchmarks.single_host.run`): docs/benchmarks.md, which also gathers
                  the other suites' results
    cluster/      the simulated cluster: the issue's multi-host goals, R2SP, batch tuning, PSLD
                  (`python -m benchmarks.cluster.run`, needs root): docs/benchmarks_cluster.md
    eflops/       ring, halving-doubling and topology-aware halving-doubling in a two-group cluster
                  (`python -m benchmarks.eflops.run`, needs root): docs/eflops.md
    elastic/      how fast elastic horovodrun reacts to a new host and to a dead worker
                  (`python -m benchmarks.elastic.run`)

and what they share:

    common/       paths, number formatting, the machine's description, the peer environment,
                  the workers' record files
    workers/      the scripts that run inside the ranks (launched by path): bench_worker.py
                  (single_host, eflops), cluster_worker.py (cluster), membw_worker.py and
                  ddp_interleaved.py (single_host), and the comms, workloads and gradient sets
                  both workers use
    peers/        builds the peer environment (stock Horovod with PyTorch) single_host and
                  elastic compare against
    results/      the raw results behind the published pages, one JSON per suite, and
                  reliability/'s figures behind docs/reliability.md"""
