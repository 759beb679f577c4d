"""The fake IMEX as processes: peers connect on loopback, reload, break, and fail on demand."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import signal
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from cdsim.fakeimex import config, ctl, install, wire
from computedomains import waiting

NAMES = ("cd-0badcafe-0000", "cd-0badcafe-0001", "cd-0badcafe-0002")


@dataclasses.dataclass
class Fake:
    """One fake daemon with its own config dir; all share nodes.cfg and the hosts file."""

    directory: pathlib.Path
    address: str
    hosts: pathlib.Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def config_file(self) -> pathlib.Path:
        return self.directory / "imexd.cfg"

    @property
    def log(self) -> pathlib.Path:
        return self.directory / "stderr.log"

    def program(self, name: str) -> str:
        """``nvidia-imex`` or ``nvidia-imex-ctl``, installed as on a simulated node."""
        bin_dir = self.directory.parent / "usr/bin"
        if not (bin_dir / name).exists():
            install.install(bin_dir)
        return str(bin_dir / name)

    def write_config(self, nodes: pathlib.Path) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            f"SERVER_PORT=50000\nIMEX_NODE_CONFIG_FILE={nodes}\nIMEX_CMD_ENABLED=1\n"
            f"IMEX_CMD_BIND_INTERFACE_IP={self.address}\nIMEX_CMD_PORT=50005\n"
        )

    def start(self, **env: str) -> None:
        environ = {**os.environ, config.HOSTS_ENV: str(self.hosts), **env}
        with self.log.open("wb") as err:
            self.popen = subprocess.Popen(
                [self.program("nvidia-imex"), "-c", str(self.config_file)],
                stdout=err, stderr=subprocess.STDOUT, env=environ,
            )  # fmt: skip

    def nodes(self) -> dict[str, Any]:
        return ctl.ask(config.parse_config(self.config_file.read_text()), "nodes")

    def states(self) -> dict[str, str]:
        return {row["name"]: row["state"] for row in self.nodes()["nodes"]}

    def wait_states(self, want: dict[str, str]) -> None:
        def matches() -> bool:
            return all(self.states().get(k) == v for k, v in want.items())

        waiting.until(
            f"{self.address} to see {want}",
            matches,
            timeout=20,
            abort=self.check_running,
            retry_on=(OSError, ValueError),
        )

    def check_running(self) -> None:
        assert self.popen is not None
        if self.popen.poll() is not None:
            raise AssertionError(f"exited {self.popen.returncode}: {self.log.read_text()}")

    def wait_exit(self) -> int:
        assert self.popen is not None
        return self.popen.wait(timeout=20)


@pytest.fixture
def domain(tmp_path: pathlib.Path) -> Iterator[list[Fake]]:
    """Two fakes on random loopback addresses (outside every simulated cluster's block) and
    an unused third slot on the sentinel."""
    base = f"127.{random.randint(200, 250)}.{random.randint(0, 255)}"
    hosts = tmp_path / "hosts"
    nodes = tmp_path / "nodes.cfg"
    nodes.write_text("".join(f"{n}\n" for n in NAMES))
    fakes = [Fake(tmp_path / f"n{i}", f"{base}.{i + 1}", hosts) for i in range(2)]
    write_hosts(hosts, {NAMES[0]: fakes[0].address, NAMES[1]: fakes[1].address})
    for fake in fakes:
        fake.write_config(nodes)
    yield fakes
    for fake in fakes:
        if fake.popen is not None and fake.popen.poll() is None:
            fake.popen.kill()
            fake.popen.wait(timeout=10)


def write_hosts(path: pathlib.Path, table: dict[str, str]) -> None:
    lines = ["127.0.0.1\tlocalhost"] + [f"{table.get(n, '240.0.0.1')}\t{n}" for n in NAMES]
    path.write_text("\n".join(lines) + "\n")


def ctl_command(fake: Fake, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [fake.program("nvidia-imex-ctl"), "-c", str(fake.config_file)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30, check=False)


def test_peers_connect_and_ctl_reports_ready(domain: list[Fake]) -> None:
    a, b = domain
    a.start()
    b.start()
    a.wait_states({NAMES[0]: "SELF", NAMES[1]: "CONNECTED", NAMES[2]: "UNAVAILABLE"})
    b.wait_states({NAMES[0]: "CONNECTED", NAMES[1]: "SELF"})
    assert a.nodes()["domain"] == "UP"
    query = ctl_command(a, "-q")
    assert (query.returncode, query.stdout) == (0, "READY\n")
    table = ctl_command(b, "-N")
    assert "Domain State: UP" in table.stdout
    assert f"{NAMES[0]:<20} - {a.address:<15} - CONNECTED" in table.stdout


def test_sigusr1_reloads_at_most_once_per_interval(domain: list[Fake]) -> None:
    a, b = domain
    a.start()
    b.start()
    a.wait_states({NAMES[1]: "CONNECTED"})
    write_hosts(a.hosts, {NAMES[0]: a.address})  # b's slot is unused now
    assert a.popen is not None
    a.popen.send_signal(signal.SIGUSR1)
    a.wait_states({NAMES[1]: "UNAVAILABLE"})
    assert a.nodes()["reloads"] == 1
    pid = a.nodes()["pid"]
    a.popen.send_signal(signal.SIGUSR1)
    waiting.until("the second SIGUSR1 to be ignored", lambda: "ignored" in a.log.read_text(),
                  timeout=10)  # fmt: skip
    assert a.nodes()["reloads"] == 1
    assert a.nodes()["pid"] == pid


def test_a_dead_peer_shows_as_reconnecting(domain: list[Fake]) -> None:
    a, b = domain
    a.start()
    b.start()
    a.wait_states({NAMES[1]: "CONNECTED"})
    assert b.popen is not None
    b.popen.send_signal(signal.SIGTERM)
    assert b.wait_exit() == 0
    a.wait_states({NAMES[1]: "CONNECTING"})
    assert a.nodes()["domain"] == "DOWN"


def test_refuse_fault_refuses_that_peer(domain: list[Fake]) -> None:
    a, b = domain
    (b.directory / "fail").write_text(f"refuse={NAMES[0]}\n")
    a.start()
    b.start()
    a.wait_states({NAMES[1]: "REFUSED"})
    b.wait_states({NAMES[0]: "REFUSED"})
    assert "refused (fault injection)" in a.nodes()["nodes"][1]["detail"]


def test_bind_fault_fails_like_imex(domain: list[Fake]) -> None:
    a, _ = domain
    a.start(**{config.FAIL_ENV: "bind"})
    assert a.wait_exit() == 1
    assert "[ERROR]" in a.log.read_text()
    assert f"Failed to bind to {a.address}:50000: Address already in use" in a.log.read_text()


def test_crash_after_fault(domain: list[Fake]) -> None:
    a, _ = domain
    (a.directory / "fail").write_text("crash-after=0.5")
    a.start()
    assert a.wait_exit() == 1
    assert "Fatal error: crashing 0.5s after start" in a.log.read_text()


def test_hang_fault_silences_a_running_daemon_until_it_is_lifted(domain: list[Fake]) -> None:
    a, b = domain
    a.start()
    b.start()
    a.wait_states({NAMES[1]: "CONNECTED"})
    fail = a.directory / "fail"
    fail.write_text("hang\n")
    waiting.until(
        "the daemon to hang (the ctl gets no answer)",
        lambda: ctl_command(a, "-q").returncode != 0,
        timeout=30,
        interval=0.5,
    )
    assert "Hanging" in a.log.read_text()
    a.check_running()  # hung, not dead
    fail.unlink()
    waiting.until(
        "the daemon to answer READY again",
        lambda: ctl_command(a, "-q").stdout == "READY\n",
        timeout=30,
        interval=0.5,
    )
    assert "Answering again" in a.log.read_text()


def test_a_daemon_started_with_hang_answers_nothing(domain: list[Fake]) -> None:
    a, _ = domain
    a.start(**{config.FAIL_ENV: "hang"})
    waiting.until("it to say it hangs", lambda: "Hanging" in a.log.read_text(), timeout=20)
    assert ctl_command(a, "-q").returncode != 0
    a.check_running()


def test_unknown_fault_is_an_error(domain: list[Fake]) -> None:
    a, _ = domain
    a.start(**{config.FAIL_ENV: "explode"})
    assert a.wait_exit() == 1
    assert "unknown fault 'explode'" in a.log.read_text()


def test_own_address_must_be_in_nodes_cfg(domain: list[Fake]) -> None:
    a, _ = domain
    write_hosts(a.hosts, {})
    a.start()
    assert a.wait_exit() == 1
    assert "no matching network interface" in a.log.read_text()


def test_ctl_without_a_daemon_is_unavailable(domain: list[Fake]) -> None:
    a, _ = domain
    query = ctl_command(a, "-q")
    assert (query.returncode, query.stdout) == (1, "UNAVAILABLE\n")
    assert "cannot reach the IMEX daemon" in query.stderr


def test_the_wire_carries_one_message_each_way_and_refuses_garbage() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(5)
        message = {"cmd": "nodes", "nodes": [{"index": 0, "address": None, "up": True}]}
        wire.send_message(left, message)
        assert wire.read_message(right) == message
        for garbage in (b"\x00\x00\x00\x03abc", b"\x00\x00\x00\x02N\x00", (1 << 20).to_bytes(4)):
            left.sendall(garbage)
            with pytest.raises(ValueError):
                wire.read_message(right)
        left.sendall(b"\x00\x00")
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionError):
            wire.read_message(right)
