"""Elastic dedicated servers: python -m hvd_herring.server join

Joins a running job (launched by horovodrun with HERRING_DEDICATED_SERVERS > 0 and
HERRING_ELASTIC_SLOTS > 0) as one more dedicated server shard. It needs the job's rendezvous
(HOROVOD_GLOO_RENDEZVOUS_ADDR and _PORT, as horovodrun gives its workers), the job's
HERRING_SECRET, and the same must-match knobs. Rank 0 admits it between two steps and moves part of
every buffer's byte ranges to it. Stop it with SIGTERM (or hvd_herring.remove_server(rank) from a
worker): it leaves between two steps, its ranges go back to the others, and it exits 0.
"""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["join"])
    parser.parse_args(argv)
    from hvd_herring import _native
    from hvd_herring.engine_front import serve
    engine = _native.Engine([], 0, None, join=True)
    print(f"hvd_herring: joined as dedicated server rank {engine.rank}", file=sys.stderr, flush=True)
    failure = serve(engine)
    engine.shutdown()
    if failure:
        print(f"hvd_herring dedicated server (process {engine.rank}): {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
