"""Command-line flags with environment twins, for every component.

Each flag ``--some-thing`` can also be set as ``SOME_THING`` in the environment (the chart
sets flags; operators debugging a node can export variables); the flag wins over the env.
"""

from __future__ import annotations

import argparse
import os
import pathlib
from collections.abc import Callable
from typing import Any


def env_name(flag: str) -> str:
    """``--kubelet-plugins-dir`` → ``KUBELET_PLUGINS_DIR``."""
    return flag.lstrip("-").upper().replace("-", "_")


def add(
    parser: argparse.ArgumentParser | Any,
    flag: str,
    *,
    type: Callable[[str], Any] = str,
    default: Any = None,
    required: bool = False,
    help: str,
) -> None:
    """Add ``flag`` whose default comes from its environment twin when that is set."""
    env = env_name(flag)
    raw = os.environ.get(env)
    value = type(raw) if raw not in (None, "") else default
    parser.add_argument(
        flag,
        type=type,
        default=value,
        required=required and value is None,
        help=f"{help} [env {env}; default: {default}]",
    )


def add_bool(parser: argparse.ArgumentParser | Any, flag: str, *, default: bool, help: str) -> None:
    """Add ``--flag``/``--no-flag`` whose default comes from its environment twin."""
    raw = os.environ.get(env_name(flag))
    value = default if raw in (None, "") else raw.lower() in ("1", "true", "yes", "on")
    parser.add_argument(
        flag,
        action=argparse.BooleanOptionalAction,
        default=value,
        help=f"{help} [env {env_name(flag)}; default: {default}]",
    )


def path(value: str) -> pathlib.Path:
    """Flag type for paths."""
    return pathlib.Path(value)
