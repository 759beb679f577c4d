"""The control plane's listener ports: below the kernel's ephemeral range, one slice per block."""

from __future__ import annotations

import pathlib
import socket

from cdsim import ports, topology


def _ephemeral_first() -> int:
    text = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    return int(text.split()[0])


def test_every_port_handed_out_lies_below_the_ephemeral_range() -> None:
    last_block = ports.BlockPorts(block=7)
    taken = [ports.free_port() for _ in range(20)] + [last_block.take() for _ in range(20)]
    assert max(taken) < _ephemeral_first(), "an outgoing connection could take these"


def test_a_block_takes_its_own_slice_in_order_and_skips_a_port_in_use() -> None:
    block = ports.BlockPorts(block=3)
    first = ports.FIRST_BLOCK_PORT + 3 * ports.PORTS_PER_BLOCK
    with socket.create_server(("127.0.0.1", first + 1)):
        taken = [block.take() for _ in range(3)]
    assert taken == [first, first + 2, first + 3]
    assert ports.is_free(first + 1)


def test_blocks_slices_and_the_shared_slice_do_not_overlap() -> None:
    slices = [
        range(
            ports.FIRST_BLOCK_PORT + b * ports.PORTS_PER_BLOCK,
            ports.FIRST_BLOCK_PORT + (b + 1) * ports.PORTS_PER_BLOCK,
        )
        for b in range(topology.ADDRESS_BLOCKS)
    ]
    seen: set[int] = set()
    for each in [*slices, ports.SHARED_PORTS]:
        assert not seen & set(each)
        seen |= set(each)
