"""The files IMEX reads, rendered without I/O: ``imexd.cfg``, ``nodes.cfg`` and hosts entries.

``nodes.cfg`` lists one host name per slot, ``cd-<first 8 hex digits of the domain UID>-NNNN``,
and the hosts file maps each name to the member's agent pod IP. A per-domain prefix means an
address left over from another domain can never resolve to a name of this one. Unused slots
map to :data:`SENTINEL_ADDRESS` (reserved, unroutable) rather than to nothing, so IMEX never
falls back to cluster DNS for them.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

SENTINEL_ADDRESS = "240.0.0.1"
SERVER_PORT = 50000
CMD_PORT = 50005
CONFIG_FILE = "imexd.cfg"
NODES_FILE = "nodes.cfg"
BLOCK_BEGIN = "# BEGIN compute-domains IMEX peers (written by the IMEX agent; do not edit)"
BLOCK_END = "# END compute-domains IMEX peers"


@dataclasses.dataclass(frozen=True)
class HostEntry:
    """One hosts line of our block."""

    address: str
    name: str


def slot_name(domain_uid: str, slot: int) -> str:
    """The ``nodes.cfg`` name of ``slot`` in domain ``domain_uid``."""
    return f"cd-{domain_uid.replace('-', '').lower()[:8]}-{slot:04d}"


def imexd_cfg(*, pod_ip: str, imex_dir: pathlib.Path) -> str:
    """The IMEX config: the incumbent's keys, the command port on the pod IP."""
    keys = [
        ("LOG_LEVEL", "4"),
        ("LOG_FILE_NAME", ""),  # stderr: the agent reads it and quotes IMEX's errors
        ("LOG_APPEND_TO_LOG", "0"),
        ("LOG_FILE_MAX_SIZE", "1024"),
        ("LOG_MAX_ROTATE_COUNT", "10"),
        ("LOG_USE_SYSLOG", "0"),
        # In the IMEX folder rather than /var/log: the agent's root filesystem is read-only.
        ("STATS_FILE_NAME", str(imex_dir / "nvidia-imex-stats.log")),
        ("DAEMONIZE", "0"),
        ("BIND_INTERFACE_IP", ""),
        ("SERVER_PORT", str(SERVER_PORT)),
        ("IMEX_NODE_CONFIG_FILE", str(imex_dir / NODES_FILE)),
        ("NETWORK_INTERFACE", ""),
        ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
        ("IMEX_ENABLE_AUTH_ENCRYPTION", "0"),
        ("IMEX_AUTH_ENCRYPTION_MODE", "SSL_TLS"),
        ("IMEX_CMD_ENABLED", "1"),
        ("IMEX_CMD_BIND_INTERFACE_IP", pod_ip),
        ("IMEX_CMD_PORT", str(CMD_PORT)),
        ("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"),
    ]
    lines = ["# Written by the compute-domains IMEX agent; rewritten before every start."]
    lines += [f"{key}={value}" for key, value in keys]
    return "\n".join(lines) + "\n"


def nodes_cfg(domain_uid: str, max_nodes: int) -> str:
    """One name per slot ``0..max_nodes-1``; the same for every member of the domain."""
    return "".join(f"{slot_name(domain_uid, slot)}\n" for slot in range(max_nodes))


def host_entries(
    domain_uid: str, addresses: Mapping[int, str], max_nodes: int
) -> tuple[HostEntry, ...]:
    """Every slot's line: the member's address, or the sentinel for an unused slot."""
    return tuple(
        HostEntry(addresses.get(slot) or SENTINEL_ADDRESS, slot_name(domain_uid, slot))
        for slot in range(max_nodes)
    )


def merge_hosts(existing: str, entries: tuple[HostEntry, ...]) -> str:
    """``existing`` with our block replaced by ``entries`` (removed when there are none).

    Every line outside our markers is kept as it was: the kubelet writes the pod's own
    entries into the same file.
    """
    kept: list[str] = []
    inside = False
    for line in existing.splitlines():
        if line == BLOCK_BEGIN:
            inside = True
        elif line == BLOCK_END:
            inside = False
        elif not inside:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    if entries:
        block = [BLOCK_BEGIN, *(f"{e.address}\t{e.name}" for e in entries), BLOCK_END]
        kept += ([""] if kept else []) + block
    return "\n".join(kept) + "\n" if kept else ""
