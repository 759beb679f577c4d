"""The fault grace and the plugin's side of it: an unreadable verdict file is no fabric news."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from computedomains import flags
from computedomains.api import fabricverdict

HEALTHY = fabricverdict.NodeFabric("healthy", "FabricHealthy", "4 GPUs", "abc.1", 2048)
OTHER = fabricverdict.NodeFabric("degraded", "FabricDegraded", "slow links", "abc.1", 2048)
BROKEN = fabricverdict.NodeFabric("broken", "FabricDiscoveryFailed", "NVML gone", "", 0)
UNREADABLE = dataclasses.replace(
    fabricverdict.NO_VERDICT, reason=fabricverdict.UNREADABLE_REASON, message="not valid JSON"
)
GRACE = fabricverdict.Grace(checks=3, seconds=60)
Hold = fabricverdict.FabricHold


@pytest.mark.parametrize(
    ("state", "read", "now", "acted_on", "after"),
    [
        # A readable verdict is taken as it is; a usable one is remembered.
        (Hold(), HEALTHY, 0, HEALTHY, Hold(kept=HEALTHY)),
        (Hold(kept=HEALTHY), OTHER, 5, OTHER, Hold(kept=OTHER)),
        # node-init wrote it unusable: it already rode out the fault it saw.
        (Hold(kept=HEALTHY), BROKEN, 5, BROKEN, Hold()),
        (Hold(kept=HEALTHY), fabricverdict.NO_VERDICT, 5, fabricverdict.NO_VERDICT, Hold()),
        # Unreadable: the last usable verdict stands for the grace...
        (Hold(kept=HEALTHY), UNREADABLE, 10, HEALTHY, Hold(HEALTHY, 10)),
        (Hold(HEALTHY, 10), UNREADABLE, 69, HEALTHY, Hold(HEALTHY, 10)),
        # ... and no longer (reads are no checks: only the seconds count).
        (Hold(HEALTHY, 10), UNREADABLE, 70, UNREADABLE, Hold(unreadable_since=10)),
        (Hold(unreadable_since=10), UNREADABLE, 71, UNREADABLE, Hold(unreadable_since=10)),
        # A readable file ends the spell; the next fault gets a fresh grace.
        (Hold(HEALTHY, 10), HEALTHY, 30, HEALTHY, Hold(kept=HEALTHY)),
        # Nothing usable was ever read: nothing to keep.
        (Hold(), UNREADABLE, 0, UNREADABLE, Hold(unreadable_since=0)),
    ],
)
def test_hold(
    state: fabricverdict.FabricHold,
    read: fabricverdict.NodeFabric,
    now: float,
    acted_on: fabricverdict.NodeFabric,
    after: fabricverdict.FabricHold,
) -> None:
    assert fabricverdict.hold(state, read, now=now, grace=GRACE) == (acted_on, after)


def _write(path: pathlib.Path, verdict: str = "healthy") -> None:
    fabricverdict.write(
        path,
        fabricverdict.FabricVerdict(
            node="n",
            verdict=fabricverdict.VerdictKind(verdict),
            reason="FabricHealthy" if verdict == "healthy" else "FabricRegistrationFailed",
            message="",
            clique="abc.1" if verdict == "healthy" else "",
            imex_channel_count=2048,
        ),
    )


def test_tracker_reads_the_file_through_the_hold(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "fabric-verdict.json"
    now = [0.0]
    tracker = fabricverdict.FabricTracker(path, grace=GRACE, clock=lambda: now[0])
    assert tracker.read() == fabricverdict.NO_VERDICT
    _write(path)
    healthy = tracker.read()
    assert healthy.usable and healthy.has_fabric and healthy.channel_count == 2048
    path.write_text("{torn")
    now[0] = 30
    assert tracker.read() == healthy, "an unreadable file keeps the last usable verdict"
    now[0] = 90
    gone = tracker.read()
    assert not gone.usable and gone.reason == fabricverdict.UNREADABLE_REASON
    assert "not valid JSON" in gone.message
    _write(path, "broken")
    assert not tracker.read().usable


@pytest.mark.parametrize(
    ("argv", "grace"),
    [
        ([], fabricverdict.Grace(checks=3, seconds=180)),
        (["--fault-grace-checks=5", "--fault-grace-seconds=30"], fabricverdict.Grace(5, 30)),
        (["--fault-grace-checks=1", "--fault-grace-seconds=0"], fabricverdict.Grace(1, 0)),
    ],
)
def test_grace_flags(argv: list[str], grace: fabricverdict.Grace) -> None:
    assert flags.parse(fabricverdict.Grace, argv) == grace


def test_grace_flags_have_env_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPUTE_DOMAINS_FAULT_GRACE_CHECKS", "7")
    assert flags.parse(fabricverdict.Grace, []).checks == 7


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        (["--fault-grace-checks=0"], {}, "--fault-grace-checks: must be at least 1, got 0"),
        (["--fault-grace-seconds=-1"], {}, "--fault-grace-seconds: must not be negative, got -1"),
        (
            [],
            {"COMPUTE_DOMAINS_FAULT_GRACE_CHECKS": "0"},
            "--fault-grace-checks: must be at least 1, got 0",
        ),
        (["--fault-grace-checks=two"], {}, "--fault-grace-checks: invalid"),
    ],
)
def test_grace_flags_are_bounded(
    argv: list[str],
    env: dict[str, str],
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit):
        flags.parse(fabricverdict.Grace, argv)
    assert error in capsys.readouterr().err


@pytest.mark.parametrize(
    ("failures", "elapsed", "sustained"),
    [(1, 0, False), (2, 179, False), (3, 0, True), (1, 180, True)],
)
def test_the_first_bound_reached_ends_the_grace(
    failures: int, elapsed: float, sustained: bool
) -> None:
    grace = fabricverdict.Grace(checks=3, seconds=180)
    assert grace.sustained(failures=failures, elapsed=elapsed) is sustained
