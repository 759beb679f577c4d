"""The IMEX files the agent renders: config keys, node names, the hosts block."""

from __future__ import annotations

import pathlib

import pytest

from cdsim.fakeimex import config as fake_config
from computedomains.imexagent import render

UID = "6F1C2A3B-0d4e-4f5a-9b8c-7d6e5f4a3b2c"


def test_slot_names_carry_a_per_domain_prefix() -> None:
    assert render.slot_name(UID, 0) == "cd-6f1c2a3b-0000"
    assert render.slot_name(UID, 17) == "cd-6f1c2a3b-0017"
    assert render.slot_name("11111111-2222", 3) != render.slot_name("22222222-1111", 3)


def test_imexd_cfg_has_the_incumbent_keys_and_parses_as_imex_reads_it() -> None:
    text = render.imexd_cfg(pod_ip="127.33.0.5", imex_dir=pathlib.Path("/run/imex"))
    values = fake_config.parse_key_values(text)
    assert values["SERVER_PORT"] == "50000"
    assert values["IMEX_CMD_PORT"] == "50005"
    assert values["IMEX_CMD_ENABLED"] == "1"
    assert values["IMEX_CMD_BIND_INTERFACE_IP"] == "127.33.0.5"
    assert values["IMEX_NODE_CONFIG_FILE"] == "/run/imex/nodes.cfg"
    assert values["IMEX_WAIT_FOR_QUORUM"] == "RECOVERY"
    assert values["DAEMONIZE"] == "0"
    assert values["LOG_LEVEL"] == "4"
    assert values["LOG_FILE_NAME"] == ""
    parsed = fake_config.parse_config(text)
    assert (parsed.cmd_bind_ip, parsed.cmd_port, parsed.server_port) == ("127.33.0.5", 50005, 50000)


def test_nodes_cfg_lists_every_slot_in_order() -> None:
    text = render.nodes_cfg(UID, 3)
    assert fake_config.parse_nodes(text) == (
        "cd-6f1c2a3b-0000",
        "cd-6f1c2a3b-0001",
        "cd-6f1c2a3b-0002",
    )


def test_unused_slots_resolve_to_the_sentinel() -> None:
    entries = render.host_entries(UID, {0: "127.33.0.5", 2: "127.33.1.5"}, 4)
    assert [(e.address, e.name) for e in entries] == [
        ("127.33.0.5", "cd-6f1c2a3b-0000"),
        (render.SENTINEL_ADDRESS, "cd-6f1c2a3b-0001"),
        ("127.33.1.5", "cd-6f1c2a3b-0002"),
        (render.SENTINEL_ADDRESS, "cd-6f1c2a3b-0003"),
    ]


KUBELET_HOSTS = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.2.3\tagent-xyz\n"
ENTRIES = (render.HostEntry("127.33.0.5", "cd-6f1c2a3b-0000"),)
BLOCK = f"{render.BLOCK_BEGIN}\n127.33.0.5\tcd-6f1c2a3b-0000\n{render.BLOCK_END}\n"


@pytest.mark.parametrize(
    ("existing", "entries", "expected"),
    [
        pytest.param("", ENTRIES, BLOCK, id="empty file"),
        pytest.param(KUBELET_HOSTS, ENTRIES, KUBELET_HOSTS + "\n" + BLOCK, id="appended"),
        pytest.param(
            KUBELET_HOSTS + "\n" + f"{render.BLOCK_BEGIN}\n1.1.1.1\told\n{render.BLOCK_END}\n",
            ENTRIES,
            KUBELET_HOSTS + "\n" + BLOCK,
            id="block replaced",
        ),
        pytest.param(KUBELET_HOSTS + "\n" + BLOCK, (), KUBELET_HOSTS, id="block removed"),
        pytest.param(
            f"{render.BLOCK_BEGIN}\n1.1.1.1\told\n{render.BLOCK_END}\n10.0.0.9\tlater\n",
            ENTRIES,
            "10.0.0.9\tlater\n\n" + BLOCK,
            id="lines after the block kept",
        ),
        pytest.param(KUBELET_HOSTS, (), KUBELET_HOSTS, id="nothing to remove"),
    ],
)
def test_merge_hosts_keeps_every_other_line(
    existing: str, entries: tuple[render.HostEntry, ...], expected: str
) -> None:
    merged = render.merge_hosts(existing, entries)
    assert merged == expected
    assert render.merge_hosts(merged, entries) == merged  # idempotent


def test_hosts_block_resolves_as_imex_reads_it() -> None:
    entries = render.host_entries(UID, {1: "127.33.0.5"}, 2)
    table = fake_config.parse_hosts(render.merge_hosts(KUBELET_HOSTS, entries))
    assert table["cd-6f1c2a3b-0001"] == "127.33.0.5"
    assert table["cd-6f1c2a3b-0000"] == render.SENTINEL_ADDRESS
    assert table["localhost"] == "127.0.0.1"
