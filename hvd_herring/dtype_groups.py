"""One rule, shared by the torch and TensorFlow adapters, for a grouped collective whose tensors
differ in dtype: it runs as one grouped collective per dtype (as Horovod fuses one dtype per
buffer), in the order of the dtypes' names, each part named "<group name>.<dtype>" (the group's
own name when it has one dtype). Every rank sees the same tensors in the same order, so every rank
forms the same parts."""


def split_by_dtype(dtype_names, name):
    """[(part name, positions in the group)] for a group whose tensors have these dtype names."""
    positions = {}
    for i, dtype in enumerate(dtype_names):
        positions.setdefault(dtype, []).append(i)
    if len(positions) == 1:
        return [(name, list(range(len(dtype_names))))]
    return [(None if name is None else f"{name}.{dtype}", members) for dtype, members in sorted(positions.items())]
