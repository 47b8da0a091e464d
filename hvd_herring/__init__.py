"""hvd_herring: a Horovod-compatible backend whose collectives run on a Herring-style
parameter-server reduction engine.

    HOROVOD_BACKEND=herring horovodrun -np 4 python train.py      # unchanged Horovod script
    import hvd_herring.torch as hvd                               # or use the API directly

Importing this package is cheap: the native engine loads on first use.
"""

__version__ = "0.1.0"


def counters():
    """Engine counters of this process (cycles, coordinator rounds, cache hits...)."""
    from hvd_herring.engine_front import front
    return front.counters()


def server_layout(process_set=0):
    """The server shards of a process set: their ranks, current shares and partition-map version
    (PSLD moves the shares, HERRING_BALANCER=psld)."""
    from hvd_herring.engine_front import front
    layout = front.engine().server_layout(process_set)
    total = sum(layout["weights"])
    layout["shares"] = [w / total for w in layout["weights"]]
    return layout


def remove_server(rank):
    """Retires dedicated server `rank` between two steps (HERRING_ELASTIC_SLOTS jobs, or any job
    with several dedicated servers): its byte ranges move to the other servers, then it exits."""
    from hvd_herring.engine_front import front
    front.engine().request_leave(int(rank))


def knobs():
    """Every knob: name, default, kind, description (the README's table comes from here)."""
    from hvd_herring import _native
    return list(_native.KNOBS)
