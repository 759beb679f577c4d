"""TCP ports for the control plane's listeners, chosen where nothing else takes them.

A port found free by binding port 0 lies in the kernel's ephemeral range: between the check
and the component's own bind, any outgoing connection on the machine may take it as its
source port, and the component then fails with "address already in use". So listeners get
ports below that range. A cluster holding loopback address block ``B`` takes them in order
from the block's own slice (no other cluster holds the block, so none competes for it);
anything without a block takes a random one from the slice above the blocks'.
"""

from __future__ import annotations

import dataclasses
import random
import socket

from cdsim import topology

FIRST_BLOCK_PORT = 20000
PORTS_PER_BLOCK = 1000
SHARED_PORTS = range(
    FIRST_BLOCK_PORT + PORTS_PER_BLOCK * topology.ADDRESS_BLOCKS, 32768
)  # 32768: where Linux's default ephemeral range starts


def is_free(port: int) -> bool:
    """Whether nothing listens on (or holds) 127.0.0.1:``port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclasses.dataclass
class BlockPorts:
    """Hands out the ports of one address block's slice, in order, skipping any in use."""

    block: int
    _taken: int = 0

    def take(self) -> int:
        """The next port of the block's slice that is free now."""
        first = FIRST_BLOCK_PORT + PORTS_PER_BLOCK * self.block
        while self._taken < PORTS_PER_BLOCK:
            port = first + self._taken
            self._taken += 1
            if is_free(port):
                return port
        raise RuntimeError(f"address block {self.block}: all {PORTS_PER_BLOCK} ports in use")


def free_port() -> int:
    """A free port of the shared slice, for a listener outside any cluster's block."""
    for port in random.sample(SHARED_PORTS, 200):
        if is_free(port):
            return port
    raise RuntimeError(f"no free port among 200 tried in {SHARED_PORTS}")
