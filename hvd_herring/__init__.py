"""hvd_herring: a Horovod-compatible backend whose collectives run on a Herring-style
parameter-server reduction engine.

    HOROVOD_BACKEND=herring horovodrun -np 4 python train.py      # unchanged Horovod script
    import hvd_herring.torch as hvd                               # or use the API directly

Importing this package is cheap: the native engine loads on first use.
"""

__version__ = "0.1.0"


def counters():
    """Engine counters of this process (cycles, coordinator rounds, cache hits...)."""
    from hvd_herring.basics import basics
    return basics.counters()


def knobs():
    """Every knob: name, default, kind, description (the README's table comes from here)."""
    from hvd_herring import _native
    return list(_native.KNOBS)
