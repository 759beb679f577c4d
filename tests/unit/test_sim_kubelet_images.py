"""The image tag → Python mapping the simulated kubelet reads from the cluster directory."""

from __future__ import annotations

import pathlib

import pytest

from cdsim.kubelet import images
from computedomains import nodefiles


def test_register_and_unregister_keep_the_other_tags(tmp_path: pathlib.Path) -> None:
    assert images.read(tmp_path) == {}
    images.register(tmp_path, "0.1.0", pathlib.Path("/a/bin/python"))
    images.register(tmp_path, "0.0.9", pathlib.Path("/b/bin/python"))
    assert images.read(tmp_path) == {"0.1.0": "/a/bin/python", "0.0.9": "/b/bin/python"}
    images.unregister(tmp_path, "0.1.0")
    images.unregister(tmp_path, "never-registered")
    assert images.read(tmp_path) == {"0.0.9": "/b/bin/python"}


def test_an_untagged_image_cannot_be_mapped(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="image tag"):
        images.register(tmp_path, "", pathlib.Path("/a/bin/python"))


def test_a_foreign_file_is_refused(tmp_path: pathlib.Path) -> None:
    images.path(tmp_path).write_text('{"pythons": {}}')
    with pytest.raises(nodefiles.CorruptNodeFile):
        images.read(tmp_path)
