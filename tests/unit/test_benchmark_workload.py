"""The benchmarks' slow-start batches match the Job controller's: 1, 2, 4, ... pods."""

from __future__ import annotations

from tests.benchmarks import workload


def test_slow_start_doubles_and_ends_on_the_remainder() -> None:
    assert [len(b) for b in workload.slow_start(18)] == [1, 2, 4, 8, 3]
    assert [list(b) for b in workload.slow_start(4)] == [[0], [1, 2], [3]]


def test_slow_start_covers_every_index_once_and_starts_over_each_sync() -> None:
    batches = list(workload.slow_start(1200))
    assert [i for b in batches for i in b] == list(range(1200))
    # Syncs of 500, 500 and 200 pods, each from a batch of one: 1+2+...+256 = 511 > 500.
    sizes = [len(b) for b in batches]
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 245] * 2 + [1, 2, 4, 8, 16, 32, 64, 73]


def test_slow_start_of_nothing_is_no_batch() -> None:
    assert list(workload.slow_start(0)) == []
