"""Command-line flags with environment twins: ``--driver-root`` is also ``..._DRIVER_ROOT``.

Every twin has the prefix :data:`ENV_PREFIX` (``COMPUTE_DOMAINS_DRIVER_ROOT``).

A flag on the command line wins over its variable, the variable over the built-in default.
The chart sets flags; an operator debugging a node can export variables instead.

A component's flags are declared once, on the fields of its config dataclass
(:func:`option`, :func:`switch`, :func:`group`): name, type with its bound, default and help.
:func:`add_to` registers them with argparse and :func:`build` makes the config from what was
parsed, so a flag cannot be registered without its field or read under another name.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_FLAG = "computedomains.flag"
_GROUP = "computedomains.flag-group"

T = TypeVar("T")


ENV_PREFIX = "COMPUTE_DOMAINS_"
"""Every twin's prefix: a variable some other tool set (``FORCE``, ``NAMESPACE``) in the shell
of an operator running a hook by hand must not change what the hook does."""


def env_name(flag: str) -> str:
    """The environment twin of ``flag``: the prefix, then upper case with underscores."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag: everything argparse and the config field need to know about it."""

    name: str
    """``--like-this``."""
    help: str
    default: str | bool | None
    """As it would be typed (a switch: on or off); None: no default."""
    type: Callable[[str], Any] = str
    """Parses and bounds a value: argparse reports what it raises as the flag's error."""
    choices: tuple[str, ...] | None = None
    required: bool = False
    """No default: the flag or its variable must be given."""
    switch: bool = False
    negatable: bool = False
    """A switch that also has ``--no-<name>``."""
    env: str = ""
    """Its variable where that is not :func:`env_name` (``--kubeconfig`` reads ``KUBECONFIG``,
    as kubectl does)."""

    @property
    def dest(self) -> str:
        """The attribute argparse stores it under."""
        return self.name.lstrip("-").replace("-", "_")

    def value(self, raw: str | bool | None) -> Any:
        """``raw`` (a default as typed) parsed as a command-line value would be."""
        return raw if raw is None or isinstance(raw, bool) else self.type(raw)


def option(
    name: str,
    *,
    help: str,
    default: str | None = None,
    type: Callable[[str], Any] = str,
    choices: Sequence[str] | None = None,
    required: bool = False,
) -> Any:
    """A config field that is the valued flag ``name``; ``default`` as it would be typed."""
    spec = Flag(name, help, default, type, tuple(choices) if choices else None, required)
    return field(spec)


def seconds(name: str, *, help: str, default: str) -> Any:
    """A config field that is the flag ``name``: a positive number of seconds, as typed."""
    return option(name, help=help, default=default, type=positive)


def switch(name: str, *, help: str, default: bool = False, negatable: bool = False) -> Any:
    """A config field that is the on/off flag ``name`` (and ``--no-<name>`` if ``negatable``)."""
    return field(Flag(name, help, default, switch=True, negatable=negatable))


def group(cls: type[T], **defaults: str) -> Any:
    """A config field whose dataclass ``cls`` holds more flags, shared by several components.

    ``defaults`` replace its flags' defaults here (by field name, as typed).
    """
    instance = cls(**{f.name: _spec(f).value(defaults.get(f.name, _spec(f).default))
                      for f in _flag_fields(cls)})  # fmt: skip
    return dataclasses.field(default=instance, metadata={_GROUP: dict(defaults)})


def field(spec: Flag, *, default: str | None = None, required: bool = False) -> Any:
    """A config field that is the flag ``spec`` (one :mod:`flaggroups` declares for many).

    ``default``: this program's default, as typed, where it differs from the declaration's;
    ``required``: this program has none (the flag or its variable must be given).
    """
    if default is not None or required:
        spec = dataclasses.replace(spec, default=default, required=required)
    metadata = {_FLAG: spec}
    if spec.required:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=spec.value(spec.default), metadata=metadata)


def _spec(item: dataclasses.Field[Any]) -> Flag:
    spec: Flag = item.metadata[_FLAG]
    return spec


def _flag_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if _FLAG in f.metadata]


def _flags(cls: type, defaults: Mapping[str, str]) -> list[Flag]:
    """Every flag of ``cls``, its groups' included, with their defaults as given here."""
    out = []
    for item in dataclasses.fields(cls):
        if _FLAG in item.metadata:
            spec = _spec(item)
            if item.name in defaults:
                spec = dataclasses.replace(spec, default=defaults[item.name])
            out.append(spec)
        elif _GROUP in item.metadata:
            out += _flags(item.default.__class__, item.metadata[_GROUP])
    return out


def add_to(parser: argparse.ArgumentParser, cls: type) -> None:
    """Register the flags of the config dataclass ``cls`` (its groups' included) with ``parser``.

    A flag two groups share (the plugin's ``--proc-root``, say) is registered once, so they
    read one value; declared twice differently, it is a programming error.
    """
    seen: dict[str, Flag] = {}
    for spec in _flags(cls, {}):
        if spec.name in seen:
            if seen[spec.name] != spec:
                raise TypeError(f"{cls.__name__}: {spec.name} is declared twice, differently")
            continue
        seen[spec.name] = spec
        register(parser, spec)


def register(parser: argparse.ArgumentParser, spec: Flag) -> None:
    """Add the flag ``spec`` to ``parser``, its default taken from its environment twin if set."""
    env = spec.env or env_name(spec.name)
    raw = os.environ.get(env)
    if spec.switch:
        value = spec.default
        if raw is not None:
            if raw.strip().lower() not in _TRUE | _FALSE:
                parser.error(f"{env}={raw!r}: expected true or false")
            value = raw.strip().lower() in _TRUE
        action: Any = argparse.BooleanOptionalAction if spec.negatable else "store_true"
        parser.add_argument(spec.name, action=action, default=value,
                            help=f"{spec.help} (env {env}; default {_shown(spec)})")  # fmt: skip
        return
    if not raw:
        raw = None  # an empty variable gives no value (KUBECONFIG= would be the folder ".")
    # A string default goes through ``type`` like a command-line value, so a bad variable is
    # reported by argparse as an invalid value of the flag.
    default: str | bool | None = raw if raw is not None else spec.default
    parser.add_argument(
        spec.name,
        default=default,
        required=spec.required and default is None,
        type=spec.type,
        choices=spec.choices,
        help=f"{spec.help} (env {env}; default {_shown(spec)})",
    )


def _shown(spec: Flag) -> str:
    """The default as ``--help`` states it."""
    if spec.switch:
        return "on" if spec.default else "off"
    if spec.required:
        return "required"
    return str(spec.default or "none")


def build(cls: type[T], args: argparse.Namespace) -> T:
    """The config ``cls`` made from what :func:`add_to`'s flags parsed to.

    A combination the config refuses (its ``__post_init__`` raises ``ValueError``) ends the
    program with that message, as a bad flag value does.
    """
    try:
        return _build(cls, args)
    except ValueError as exc:
        raise SystemExit(f"computedomains: {exc}") from exc


def parse(cls: type[T], argv: Sequence[str]) -> T:
    """The config ``cls`` from the command line ``argv`` (and the flags' variables)."""
    parser = argparse.ArgumentParser(prog=cls.__name__)
    add_to(parser, cls)
    return build(cls, parser.parse_args(argv))


def _build(cls: type[T], args: argparse.Namespace) -> T:
    values = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        if _FLAG in item.metadata:
            values[item.name] = getattr(args, _spec(item).dest)
        elif _GROUP in item.metadata:
            values[item.name] = _build(item.default.__class__, args)
    return cls(**values)


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


def positive(value: str) -> float:
    """Flag type for amounts above 0 (intervals, timeouts)."""
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {number:g}")
    return number


def names(value: str) -> tuple[str, ...]:
    """Flag type for a comma-separated list (blanks dropped)."""
    return tuple(n.strip() for n in value.split(",") if n.strip())


def ip_address(value: str) -> str:
    """Flag type for an IP address, written canonically."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address, got {value!r}") from None
