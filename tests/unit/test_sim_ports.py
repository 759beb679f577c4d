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
    # A cluster of the machine may hold block 3 meanwhile: only what is free counts.
    block = ports.BlockPorts(block=3)
    slice_ = range(
        ports.FIRST_BLOCK_PORT + 3 * ports.PORTS_PER_BLOCK,
        ports.FIRST_BLOCK_PORT + 4 * ports.PORTS_PER_BLOCK,
    )
    first = block.take()
    held = next(p for p in range(first + 1, slice_.stop) if ports.is_free(p))
    with socket.create_server(("127.0.0.1", held)):
        second = block.take()
    assert first in slice_ and second in slice_
    assert second > held, "the port in use is skipped, and none before it is handed out again"


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
