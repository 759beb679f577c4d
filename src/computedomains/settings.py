"""Command-line flags with environment twins: ``--fake-nvml-file`` is also ``FAKE_NVML_FILE``.

A flag on the command line wins over its variable, the variable over the built-in default.
The chart sets flags; an operator debugging a node can export variables instead.
"""

from __future__ import annotations

import argparse
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_name(flag: str) -> str:
    """The environment twin of ``flag``: upper case, dashes as underscores."""
    return flag.lstrip("-").replace("-", "_").upper()


def add(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    default: str | None,
    help: str,
    type: Callable[[str], Any] = str,
    choices: Sequence[str] | None = None,
    required: bool = False,
) -> None:
    """Add a valued flag whose default comes from its environment twin when that is set.

    A ``required`` flag may also be given by its variable alone.
    """
    env = env_name(flag)
    # A string default goes through ``type`` like a command-line value, so a bad variable is
    # reported by argparse as an invalid value of the flag.
    value = os.environ.get(env, default)
    parser.add_argument(
        flag,
        default=value,
        required=required and value is None,
        type=type,
        choices=choices,
        help=f"{help} (env {env}; default {default or 'none'})",
    )


def add_switch(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    default: bool,
    help: str,
    negatable: bool = False,
) -> None:
    """Add an on/off flag (``--x``, and ``--no-x`` when ``negatable``) with its twin."""
    env = env_name(flag)
    raw = os.environ.get(env)
    value = default
    if raw is not None:
        if raw.strip().lower() not in _TRUE | _FALSE:
            parser.error(f"{env}={raw!r}: expected true or false")
        value = raw.strip().lower() in _TRUE
    parser.add_argument(
        flag,
        action=argparse.BooleanOptionalAction if negatable else "store_true",
        default=value,
        help=f"{help} (env {env}; default {'on' if default else 'off'})",
    )


def path(value: str) -> pathlib.Path:
    """Flag type for paths."""
    return pathlib.Path(value)


def at_least_one(value: str) -> int:
    """Flag type for counts of 1 or more."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def not_negative(value: str) -> float:
    """Flag type for amounts of 0 or more."""
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {number:g}")
    return number
