"""Locks on a simulated cluster's name and address block (``sim/cluster.py``)."""

from __future__ import annotations

import pathlib

from cdsim import cluster


def test_a_held_lock_is_refused_to_a_second_holder_and_free_once_released(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "blocks" / "0.lock"
    with cluster._exclusive(path) as first:
        assert first is not None
        with cluster._exclusive(path) as second:
            assert second is None
    with cluster._exclusive(path) as again:
        assert again is not None
    assert path.exists()  # a block's lock file stays: there are only a few


def test_a_name_lock_removes_its_file_when_freed_and_the_name_can_be_taken_again(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "pytest-123.lock"
    with cluster._exclusive(path, remove=True) as held:
        assert held is not None
        stale = path.open("a")  # another process opened it just before the holder let go
    assert not path.exists()
    with cluster._exclusive(path, remove=True) as taken:
        assert taken is not None and path.exists()
        with cluster._exclusive(path, remove=True) as refused:
            assert refused is None
    stale.close()
    assert not path.exists()
