"""What the fake IMEX parses: its config, nodes.cfg, hosts files, fault specs, handshakes."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from cdsim.fakeimex import config, ctl, install, links
from cdsim.fakeimex.links import PeerState

CONFIG = """\
# comment
LOG_LEVEL=4
LOG_FILE_NAME=
SERVER_PORT = 50000
IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=127.33.0.5
IMEX_CMD_PORT=50005
SOME_NEWER_KEY=whatever
"""


def test_config_parses_the_real_format() -> None:
    parsed = config.parse_config(CONFIG)
    assert parsed == config.ImexConfig(
        server_port=50000,
        node_config_file="/imexd/nodes.cfg",
        bind_ip="",
        cmd_enabled=True,
        cmd_bind_ip="127.33.0.5",
        cmd_port=50005,
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("NOT A PAIR\n", "line 1: expected KEY=VALUE"),
        ("SERVER_PORT=70000\nIMEX_NODE_CONFIG_FILE=/n\n", "SERVER_PORT='70000'"),
        ("IMEX_NODE_CONFIG_FILE=/n\nIMEX_CMD_ENABLED=yes\n", "IMEX_CMD_ENABLED='yes'"),
        ("IMEX_NODE_CONFIG_FILE=/n\nIMEX_CMD_BIND_INTERFACE_IP=pod\n", "not an IP address"),
        ("SERVER_PORT=50000\n", "IMEX_NODE_CONFIG_FILE is not set"),
    ],
)
def test_config_errors_name_the_key(text: str, error: str) -> None:
    with pytest.raises(config.ConfigError, match=error.replace("(", r"\(")):
        config.parse_config(text)


def test_nodes_and_hosts_resolve_like_imex() -> None:
    entries = config.parse_nodes("cd-1-0000\n# gap\n\ncd-1-0001  \n127.40.0.1\ncd-1-0003\n")
    assert entries == ("cd-1-0000", "cd-1-0001", "127.40.0.1", "cd-1-0003")
    hosts = config.parse_hosts(
        "127.0.0.1 localhost\n127.33.0.5\tcd-1-0000 alias # comment\n"
        "240.0.0.1\tcd-1-0001\n127.99.0.1\tcd-1-0000\n"
    )
    assert hosts["cd-1-0000"] == "127.33.0.5"  # the first line naming a host wins
    assert hosts["alias"] == "127.33.0.5"
    nodes = config.resolve(entries, hosts)
    assert [(n.number, n.name, n.address) for n in nodes] == [
        (0, "cd-1-0000", "127.33.0.5"),
        (1, "cd-1-0001", "240.0.0.1"),
        (2, "127.40.0.1", "127.40.0.1"),
        (3, "cd-1-0003", None),
    ]


@pytest.mark.parametrize(
    ("address", "dialable"),
    [("127.33.0.5", True), ("127.0.0.1", True), ("240.0.0.1", False), ("10.0.0.1", False),
     ("::1", False), ("not-an-ip", False), ("127.0.0.1\x00", False), (None, False)],
)  # fmt: skip
def test_only_ipv4_loopback_is_ever_dialed(address: str | None, dialable: bool) -> None:
    assert config.dialable(address) is dialable


@pytest.mark.parametrize(
    ("text", "faults"),
    [
        ("", config.Faults()),
        ("bind", config.Faults(bind=True)),
        ("crash-after=2.5", config.Faults(crash_after=2.5)),
        ("refuse=a, refuse=b\n", config.Faults(refuse=frozenset({"a", "b"}))),
        ("bind crash-after=3", config.Faults(bind=True, crash_after=3.0)),
        ("hang", config.Faults(hang=True)),
        ("refuse=a hang", config.Faults(refuse=frozenset({"a"}), hang=True)),
    ],
)  # fmt: skip
def test_faults(text: str, faults: config.Faults) -> None:
    assert config.parse_faults(text) == faults


@pytest.mark.parametrize(
    "text",
    [
        "bnd",
        "crash-after=soon",
        "refuse=",
        "crash",
        "crash-after=2.",
        "crash-after=.5",
        "bind=1",
        "hang=1",
    ],
)
def test_unknown_faults_are_errors(text: str) -> None:
    with pytest.raises(config.ConfigError, match="unknown fault"):
        config.parse_faults(text)


def test_faults_merge() -> None:
    env = config.Faults(refuse=frozenset({"a"}), crash_after=9.0)
    file = config.Faults(bind=True, refuse=frozenset({"b"}), crash_after=1.0)
    assert env.merged(file) == config.Faults(
        bind=True, crash_after=1.0, refuse=frozenset({"a", "b"})
    )


NODES = config.resolve(
    ("cd-1-0000", "cd-1-0001", "cd-1-0002", "cd-1-0003"),
    {"cd-1-0000": "127.33.0.5", "cd-1-0001": "127.33.1.5", "cd-1-0002": "240.0.0.1"},
)
VIEW = links.View(
    self_node=NODES[0],
    nodes=NODES,
    server_port=50000,
    tag=links.domain_tag(("cd-1-0000", "cd-1-0001", "cd-1-0002", "cd-1-0003")),
    refuse=frozenset(),
)


def test_initial_peer_states() -> None:
    assert [links.initial_state(VIEW, n) for n in NODES] == [
        PeerState.SELF,
        PeerState.CONNECTING,
        PeerState.UNAVAILABLE,
        PeerState.UNRESOLVED,
    ]


def peer_view() -> links.View:
    return links.View(
        self_node=NODES[1], nodes=NODES, server_port=50000, tag=VIEW.tag, refuse=frozenset()
    )


@pytest.mark.parametrize(
    ("change", "source", "error"),
    [
        pytest.param({}, "127.33.0.5", None, id="accepted"),
        pytest.param({"domain": "other"}, "127.33.0.5", "domain mismatch", id="other domain"),
        pytest.param({"to": "cd-1-0002"}, "127.33.0.5", "addressed to", id="wrong addressee"),
        pytest.param({"from": "cd-9-0000"}, "127.33.0.5", "not in our node list", id="stranger"),
        pytest.param({}, "127.33.7.7", "address mismatch", id="stale address"),
        pytest.param({"proto": "x"}, "127.33.0.5", "unknown protocol", id="protocol"),
    ],
)
def test_handshake_checks(change: dict[str, str], source: str, error: str | None) -> None:
    message = {**links.hello(VIEW, NODES[1]), **change}
    result = links.check_hello(peer_view(), message, source)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


def test_refused_names_are_refused() -> None:
    refusing = links.View(
        self_node=NODES[1], nodes=NODES, server_port=50000, tag=VIEW.tag,
        refuse=frozenset({"cd-1-0000"}),
    )  # fmt: skip
    result = links.check_hello(refusing, links.hello(VIEW, NODES[1]), "127.33.0.5")
    assert result is not None and "refused" in result


@pytest.mark.parametrize(
    ("states", "domain"),
    [
        ([PeerState.SELF, PeerState.UNAVAILABLE], "UP"),
        ([PeerState.SELF, PeerState.CONNECTED, PeerState.CONNECTED], "UP"),
        ([PeerState.SELF, PeerState.CONNECTED, PeerState.REFUSED], "DEGRADED"),
        ([PeerState.SELF, PeerState.CONNECTING, PeerState.UNRESOLVED], "DOWN"),
    ],
)
def test_domain_state(states: list[PeerState], domain: str) -> None:
    assert links.domain_state(states) == domain


def test_installed_programs_bring_their_package_into_the_node_tree(tmp_path: pathlib.Path) -> None:
    paths = install.install(tmp_path / "usr/bin", python=install.IMAGE_PYTHON)
    assert [p.name for p in paths] == ["nvidia-imex", "nvidia-imex-ctl"]
    for path, role in zip(paths, ("daemon", "ctl"), strict=True):
        assert path.stat().st_mode & 0o111
        text = path.read_text()
        assert text.startswith(f"#!{install.IMAGE_PYTHON} -S\n")  # no shell in the image
        assert f"from cdsim.fakeimex.{role} import main" in text
    library = tmp_path / "usr" / install.LIBRARY / "cdsim"
    assert (library / "fakeimex" / "daemon.py").is_file()
    assert (library / "__init__.py").is_file()


def test_the_installed_daemon_reports_a_bad_config_as_imex_does(tmp_path: pathlib.Path) -> None:
    (daemon,) = [p for p in install.install(tmp_path / "bin") if p.name == "nvidia-imex"]
    done = subprocess.run([str(daemon), "-c", str(tmp_path / "missing.cfg")],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "[ERROR]" in done.stderr and "Failed to load config" in done.stderr


HEAVY_IMPORTS = ("argparse", "pathlib", "dataclasses", "ipaddress", "hashlib", "threading")
"""Modules whose import costs more than a ctl run's own work (the agent starts one per check)."""


def test_the_ctl_starts_without_heavy_imports() -> None:
    probe = "import sys; from cdsim.fakeimex import ctl; print(' '.join(sys.modules))"
    env = {"PYTHONPATH": str(install.PACKAGE_ROOT.parent)}
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                          env=env, timeout=30, check=True)  # fmt: skip
    loaded = set(done.stdout.split())
    assert "cdsim.fakeimex.ctl" in loaded
    assert sorted(loaded.intersection(HEAVY_IMPORTS)) == []


def test_the_installed_ctl_runs_without_site_packages(tmp_path: pathlib.Path) -> None:
    (ctl,) = [p for p in install.install(tmp_path / "bin") if p.name == "nvidia-imex-ctl"]
    done = subprocess.run([str(ctl), "-q", "-c", str(tmp_path / "missing.cfg")],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "UNAVAILABLE\n"), done.stderr
    assert "missing.cfg" in done.stderr


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["-q"], ctl.Options(config=config.DEFAULT_CONFIG, query=True, json=False)),
        (["-q", "-c", "/x.cfg"], ctl.Options(config="/x.cfg", query=True, json=False)),
        (["-N", "-j", "--config", "/x.cfg"], ctl.Options(config="/x.cfg", query=False, json=True)),
    ],
)
def test_ctl_command_line(argv: list[str], options: ctl.Options) -> None:
    assert ctl.parse_args(argv) == options


@pytest.mark.parametrize(
    ("argv", "error"),
    [([], "exactly one of -q and -N"), (["-q", "-N"], "exactly one"), (["-q", "-c"], "-c needs"),
     (["-q", "--verbose"], "unknown argument '--verbose'")],
)  # fmt: skip
def test_ctl_rejects_a_wrong_command_line(argv: list[str], error: str) -> None:
    with pytest.raises(config.UsageError, match=error):
        ctl.parse_args(argv)
    assert ctl.main(argv) == 2
