"""The benchmarks' slow-start batches match the Job controller's: 1, 2, 4, ... pods."""

from __future__ import annotations

from tests.benchmarks import workload


def test_slow_start_doubles_and_ends_on_the_remainder() -> None:
    assert [len(b) for b in workload.slow_start(18)] == [1, 2, 4, 8, 3]
    assert [list(b) for b in workload.slow_start(4)] == [[0], [1, 2], [3]]


def test_slow_start_covers_every_index_once_and_caps_a_batch() -> None:
    batches = list(workload.slow_start(2000))
    assert [i for b in batches for i in b] == list(range(2000))
    assert max(len(b) for b in batches) == workload.MAX_BATCH


def test_slow_start_of_nothing_is_no_batch() -> None:
    assert list(workload.slow_start(0)) == []
