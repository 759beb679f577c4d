"""What the fake IMEX reads, parsed without I/O: config, ``nodes.cfg``, hosts, faults.

The config format is the real one: ``KEY=VALUE`` lines, ``#`` comments, blank lines; keys
the fake has no use for are accepted and ignored, as IMEX accepts keys of other versions.

``nvidia-imex-ctl`` imports this module on every run, so it imports only what the ctl
needs anyway (``socket`` for addresses): a ctl run is a Python start, a forming domain runs
one or more per node, and ``typing``, ``re`` or ``json`` would cost more than the run's own
work (the real ctl is a native program that starts in a millisecond). The records are
therefore plain classes (:class:`Record`), and annotation-only names are imported for the
type checker alone.
"""

from __future__ import annotations

import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
HOSTS_ENV = "COMPUTE_DOMAINS_FAKE_IMEX_HOSTS"
"""Hosts file the fake resolves ``nodes.cfg`` names through (real IMEX uses /etc/hosts)."""
DEFAULT_HOSTS = "/etc/hosts"
FAIL_ENV = "COMPUTE_DOMAINS_FAKE_IMEX_FAIL"
START_DELAY_ENV = "COMPUTE_DOMAINS_FAKE_IMEX_START_DELAY"
"""Seconds the daemon takes to start before it listens (real IMEX needs a moment too)."""
FAIL_FILE = "fail"
"""Name of the fault file, looked up next to the config file."""
_LOOPBACK_FIRST_OCTET = 127


class ConfigError(ValueError):
    """A file IMEX reads is malformed; the message says where."""


class UsageError(ValueError):
    """A command line is wrong; the message says how."""


class Record:
    """A small record compared and shown by its fields (``__slots__``), as a NamedTuple is."""

    __slots__: tuple[str, ...] = ()

    def fields(self) -> tuple[object, ...]:
        """The field values, in ``__slots__`` order."""
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, Record)
            and (other.fields() == self.fields())
        )

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self.__slots__, self.fields(), strict=True))
        return f"{type(self).__name__}({shown})"


class CommandLine(Record):
    """What both programs are given: ``-c CONFIG`` and on/off switches."""

    __slots__ = ("config", "switches")

    def __init__(self, config: str, switches: frozenset[str]) -> None:
        self.config = config
        self.switches = switches


def parse_command_line(argv: Sequence[str], switches: set[str]) -> CommandLine:
    """``[-c|--config FILE]`` plus any of ``switches``; anything else is a :class:`UsageError`.

    Hand-rolled rather than argparse, whose import costs more than a ctl run's own work.
    """
    path, given = DEFAULT_CONFIG, set()
    args = iter(argv)
    for arg in args:
        if arg in ("-c", "--config"):
            path = next(args, "")
            if not path:
                raise UsageError(f"{arg} needs a file name")
        elif arg in switches:
            given.add(arg)
        else:
            raise UsageError(f"unknown argument {arg!r}")
    return CommandLine(config=path, switches=frozenset(given))


def read(path: str) -> str:
    """A whole text file (raises OSError)."""
    with open(path, encoding="utf-8") as file:
        return file.read()


class ImexConfig(Record):
    """The keys of ``imexd.cfg`` the fake acts on.

    ``bind_ip`` is ``BIND_INTERFACE_IP``; empty means "the address of this node in
    nodes.cfg".
    """

    __slots__ = (
        "bind_ip",
        "cmd_bind_ip",
        "cmd_enabled",
        "cmd_port",
        "node_config_file",
        "server_port",
    )

    def __init__(
        self, *, server_port: int, node_config_file: str, bind_ip: str, cmd_enabled: bool,
        cmd_bind_ip: str, cmd_port: int,
    ) -> None:  # fmt: skip
        self.server_port = server_port
        self.node_config_file = node_config_file
        self.bind_ip = bind_ip
        self.cmd_enabled = cmd_enabled
        self.cmd_bind_ip = cmd_bind_ip
        self.cmd_port = cmd_port


class Node(Record):
    """One line of ``nodes.cfg`` and the address it resolves to (None: unresolved).

    ``number`` is the line's position in ``nodes.cfg`` from 0: IMEX's node index.
    """

    __slots__ = ("address", "name", "number")

    def __init__(self, *, number: int, name: str, address: str | None) -> None:
        self.number = number
        self.name = name
        self.address = address


class Faults(Record):
    """Failures to inject, from ``COMPUTE_DOMAINS_FAKE_IMEX_FAIL`` or the ``fail`` file.

    ``bind``: fail to bind the server port, as when another IMEX holds it. ``crash_after``:
    seconds after start at which the daemon dies with an error. ``refuse``: ``nodes.cfg``
    names whose connections are refused, both ways. ``hang``: the daemon stays up but answers
    neither its command port nor its peers, as a wedged IMEX; unlike the others it is looked
    at again every second, so a running daemon hangs while the word is in the file and
    answers again once it is gone.
    """

    __slots__ = ("bind", "crash_after", "hang", "refuse")

    def __init__(
        self, *, bind: bool = False, crash_after: float | None = None,
        refuse: frozenset[str] = frozenset(), hang: bool = False,
    ) -> None:  # fmt: skip
        self.bind = bind
        self.crash_after = crash_after
        self.refuse = refuse
        self.hang = hang

    def merged(self, other: Faults) -> Faults:
        """Both sets of faults at once (``other``'s crash time wins when both set one)."""
        return Faults(
            bind=self.bind or other.bind,
            crash_after=other.crash_after if other.crash_after is not None else self.crash_after,
            refuse=self.refuse | other.refuse,
            hang=self.hang or other.hang,
        )


def parse_key_values(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines into a dict; later keys win, as in IMEX."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"line {number}: expected KEY=VALUE, got {raw.strip()!r}")
        values[key.strip()] = value.strip()
    return values


def _port(values: dict[str, str], key: str, default: int) -> int:
    raw = values.get(key) or str(default)
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"{key}={raw!r}: expected a TCP port 1..65535")
    return int(raw)


def _address(values: dict[str, str], key: str) -> str:
    raw = values.get(key, "")
    if raw and ip_literal(raw) is None:
        raise ConfigError(f"{key}={raw!r}: not an IP address")
    return raw


def parse_config(text: str) -> ImexConfig:
    """The config file; raises :class:`ConfigError` naming the bad key."""
    values = parse_key_values(text)
    enabled = values.get("IMEX_CMD_ENABLED", "0")
    if enabled not in ("0", "1"):
        raise ConfigError(f"IMEX_CMD_ENABLED={enabled!r}: expected 0 or 1")
    node_file = values.get("IMEX_NODE_CONFIG_FILE", "")
    if not node_file:
        raise ConfigError("IMEX_NODE_CONFIG_FILE is not set")
    return ImexConfig(
        server_port=_port(values, "SERVER_PORT", 50000),
        node_config_file=node_file,
        bind_ip=_address(values, "BIND_INTERFACE_IP"),
        cmd_enabled=enabled == "1",
        cmd_bind_ip=_address(values, "IMEX_CMD_BIND_INTERFACE_IP"),
        cmd_port=_port(values, "IMEX_CMD_PORT", 50005),
    )


def parse_nodes(text: str) -> tuple[str, ...]:
    """The entries of ``nodes.cfg`` (host names or addresses), one per line, in order."""
    entries = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    return tuple(entries)


def parse_hosts(text: str) -> dict[str, str]:
    """Name → address from a hosts file; the first line naming a host wins, as in glibc."""
    table: dict[str, str] = {}
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for name in fields[1:]:
            table.setdefault(name, fields[0])
    return table


def resolve(entries: tuple[str, ...], hosts: dict[str, str]) -> tuple[Node, ...]:
    """Each entry with its address: an address literal stands for itself."""
    nodes = []
    for index, entry in enumerate(entries):
        address = ip_literal(entry)
        if address is None:
            address = hosts.get(entry)
        nodes.append(Node(number=index, name=entry, address=address))
    return tuple(nodes)


def ip_literal(text: str) -> str | None:
    """``text`` as a normalised IPv4 or IPv6 address literal, or None when it is not one."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, text))
        except (OSError, ValueError):  # ValueError: an embedded NUL
            continue
    return None


def dialable(address: str | None) -> bool:
    """True only for IPv4 loopback addresses: the fake never connects anywhere else."""
    if address is None:
        return False
    try:
        packed = socket.inet_pton(socket.AF_INET, address)
    except (OSError, ValueError):
        return False
    return packed[0] == _LOOPBACK_FIRST_OCTET


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _fault(item: str) -> Faults:
    """One fault word; raises :class:`ConfigError` for anything else."""
    kind, _, value = item.partition("=")
    if item == "bind":
        return Faults(bind=True)
    if item == "hang":
        return Faults(hang=True)
    whole, dot, fraction = value.partition(".")
    if kind == "crash-after" and _digits(whole) and (not dot or _digits(fraction)):
        return Faults(crash_after=float(value))
    if kind == "refuse" and value:
        return Faults(refuse=frozenset({value}))
    raise ConfigError(
        f"unknown fault {item!r}: expected bind, hang, crash-after=<seconds> or refuse=<name>"
    )


def parse_faults(text: str) -> Faults:
    """Faults: ``bind``, ``hang``, ``crash-after=<s>``, ``refuse=<name>``, comma or space separated.

    Anything else raises :class:`ConfigError`: a typo must not pass silently.
    """
    faults = Faults()
    for item in text.replace(",", " ").split():
        faults = faults.merged(_fault(item))
    return faults
