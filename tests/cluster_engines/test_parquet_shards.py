"""hvd_herring/spark/parquet_shards.py: the estimators' data reader that stands in for Petastorm.
Every rank reads a disjoint share of the row groups and together they read every row once per
epoch; shuffling is repeatable from the seed; list columns come back as 2-d arrays; a dataset with
fewer row groups than ranks is refused naming the rank."""

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="scripts/setup.sh installs requirements/cluster_engines.txt")
pq = pytest.importorskip("pyarrow.parquet")

from hvd_herring.spark.parquet_shards import ParquetShard, refuse_petastorm_transform  # noqa: E402


@pytest.fixture
def dataset(tmp_path):
    """What Spark writes: part files with several row groups each, beside _SUCCESS and .crc files."""
    root = tmp_path / "train"
    root.mkdir()
    row = 0
    for part in range(3):
        ids = np.arange(row, row + 40)
        row += 40
        table = pa.table({"id": ids, "x": pa.array([[float(i), float(-i)] for i in ids], pa.list_(pa.float32()))})
        pq.write_table(table, root / f"part-{part:05d}.parquet", row_group_size=10)
        (root / f".part-{part:05d}.parquet.crc").write_bytes(b"not parquet")
    (root / "_SUCCESS").write_bytes(b"")
    return str(root)


def test_shards_are_disjoint_and_cover_every_row(dataset):
    seen = []
    for rank in range(3):
        shard = ParquetShard(dataset, rank, 3, batch_size=7, num_epochs=1)
        batches = list(shard)
        assert all(len(b["id"]) == 7 for b in batches[:-1])
        seen.append(np.concatenate([b["id"] for b in batches]))
    everything = np.concatenate(seen)
    assert sorted(everything.tolist()) == list(range(120))


def test_list_columns_are_2d_and_rows_stay_together(dataset):
    batch = next(iter(ParquetShard(dataset, 1, 2, batch_size=5, shuffle=True, seed=3)))
    assert batch["x"].shape == (5, 2) and batch["x"].dtype == np.float32
    np.testing.assert_array_equal(batch["x"][:, 0], batch["id"].astype(np.float32))
    np.testing.assert_array_equal(batch["x"][:, 1], -batch["id"].astype(np.float32))


def test_shuffle_is_repeatable_per_seed_and_differs_per_epoch(dataset):
    def two_epochs(seed):
        shard = ParquetShard(dataset, 0, 2, columns=["id"], batch_size=60, shuffle=True, seed=seed, num_epochs=2)
        return [b["id"].tolist() for b in shard]

    first, again, other = two_epochs(5), two_epochs(5), two_epochs(6)
    assert first == again and first != other
    assert len(first) == 2 and sorted(first[0]) == sorted(first[1]) and first[0] != first[1]
    assert list(two_epochs(5)[0]) != sorted(first[0])  # shuffled, not in file order


def test_endless_when_no_epoch_count_is_given(dataset):
    shard = ParquetShard(dataset, 0, 4, batch_size=16)
    batches = [b for _, b in zip(range(20), shard)]   # 3 groups x 10 rows: 320 rows is 10+ epochs
    assert len(batches) == 20 and all(len(b["id"]) == 16 for b in batches)


def test_fewer_row_groups_than_ranks_names_the_rank(dataset):
    with pytest.raises(ValueError, match=r"rank 12: the dataset .* has 12 row groups, fewer than the 13 ranks"):
        ParquetShard(dataset, 12, 13)


def test_a_petastorm_transform_is_refused_not_ignored():
    refuse_petastorm_transform(None)
    with pytest.raises(ValueError, match="transformation_fn needs Petastorm's TransformSpec"):
        refuse_petastorm_transform(lambda rows: rows)
