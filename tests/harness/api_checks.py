"""Check bodies that read the same on every framework's Horovod API (horovod.torch,
horovod.tensorflow): the workers of each framework register them under their own names, so the
frameworks are held to one definition of the behaviour."""


def broadcast_object_and_allgather_object(hvd, rank, size):
    obj = hvd.broadcast_object({"rank": rank, "payload": list(range(rank + 3))}, root_rank=1 % size)
    assert obj == {"rank": 1 % size, "payload": list(range(1 % size + 3))}, obj
    objs = hvd.allgather_object(("hello", rank))
    assert objs == [("hello", r) for r in range(size)], objs


def outsider_is_refused(hvd, tensor, process_set, name, error_type):
    """A collective on a process set this rank is not in raises `error_type` saying so."""
    try:
        hvd.allreduce(tensor, process_set=process_set, name=name)
    except error_type as e:
        assert "not a member" in str(e), e
    else:
        raise AssertionError("a collective on a process set this rank is not in must raise")


def train_with_counter_snapshots(steps, fence, run_step):
    """Runs run_step(step) for each step and returns the engine's counters after the first two steps
    (which filled the response cache) and after the last. fence() is a collective of a fixed name:
    each snapshot is taken between two fences, so it sees the same steps on every rank."""
    import hvd_herring
    counters = {}
    for step in range(steps):
        if step == 2:
            fence()
            fence()
            counters["after_step_2"] = hvd_herring.counters()
            fence()
        run_step(step)
    fence()
    counters["after_last_step"] = hvd_herring.counters()
    fence()
    return counters


def alltoall_splits(rank, size):
    """The rows `rank` sends to each rank in the alltoall checks (uneven, some empty)."""
    return [(rank + j) % 3 for j in range(size)]


def alltoall_received(rank, size, input_of):
    """What `rank` must receive from an alltoall with alltoall_splits: (the pieces, in source rank
    order, and their row counts). input_of(r, rows) is rank r's input of `rows` rows."""
    pieces, counts = [], []
    for r in range(size):
        splits = alltoall_splits(r, size)
        start = sum(splits[:rank])
        pieces.append(input_of(r, sum(splits))[start:start + splits[rank]])
        counts.append(splits[rank])
    return pieces, counts


def expect_error(fn, error_type, *parts):
    """fn() raises `error_type` within 10 s, its message naming every one of `parts`."""
    import time
    start = time.monotonic()
    try:
        fn()
    except error_type as e:
        message = str(e)
    else:
        raise AssertionError(f"expected {error_type.__name__} mentioning {parts}")
    took = time.monotonic() - start
    for p in parts:
        assert p in message, f"{p!r} not in {message!r}"
    assert took < 10, f"the error took {took:.1f} s"
