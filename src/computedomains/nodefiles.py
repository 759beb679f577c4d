"""Node-local state files: versioned JSON, written atomically, read strictly.

Every file our components keep on a node (fabric verdict, IMEX status, plugin checkpoint)
goes through here: a temp file in the same directory, fsync, rename, fsync of the directory,
so a crash leaves either the old or the new content, never half of one. Each document carries
``apiVersion`` and ``kind``; a reader that finds anything else gets :class:`CorruptNodeFile`
and decides (quarantine and rebuild, usually) instead of crashing.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import threading
import time
from collections.abc import Mapping
from typing import Any

API_VERSION = "node.compute-domains/v1"


class CorruptNodeFile(Exception):
    """A node file exists but cannot be used; ``reason`` says why."""

    def __init__(self, path: pathlib.Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def write_json(
    path: pathlib.Path,
    document: Mapping[str, Any],
    *,
    mode: int = 0o644,
    compact: bool = False,
    boot_scoped: bool = False,
) -> None:
    """Atomically replace ``path`` with ``document`` as JSON (``compact`` for hot paths).

    The rename alone makes the replacement atomic for every reader and across a crash of the
    writing process. ``fsync`` adds survival of a power loss or kernel crash, which
    ``boot_scoped`` files do without: their owner discards them after a reboot anyway.
    """
    if compact:
        data = json.dumps(document, separators=(",", ":")).encode()
    else:
        data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    write_bytes(path, data, mode=mode, boot_scoped=boot_scoped)


def write_bytes(
    path: pathlib.Path, data: bytes, *, mode: int = 0o644, boot_scoped: bool = False
) -> None:
    """Atomically replace ``path`` with ``data``; durability as for :func:`write_json`.

    For node files that are not JSON documents, such as configuration rendered for another
    program.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        if not boot_scoped:
            os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    if boot_scoped:
        return
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_json(
    path: pathlib.Path, *, kind: str, api_version: str = API_VERSION
) -> dict[str, Any] | None:
    """The document at ``path``, None when absent; :class:`CorruptNodeFile` when unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptNodeFile(path, f"not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptNodeFile(path, "not a JSON object")
    found = (document.get("apiVersion"), document.get("kind"))
    if found != (api_version, kind):
        raise CorruptNodeFile(path, f"expected {api_version} {kind}, found {found[0]} {found[1]}")
    return document


def quarantine(path: pathlib.Path) -> pathlib.Path:
    """Move an unusable file aside (kept for inspection) and return its new path."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    with contextlib.suppress(FileNotFoundError):
        path.replace(target)
    return target


def document(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with this project's ``apiVersion`` and the given ``kind`` in front."""
    return {"apiVersion": API_VERSION, "kind": kind, **body}
