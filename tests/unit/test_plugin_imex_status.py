"""The plugin's reading of the IMEX status: a channel claim passes only on a fresh READY."""

from __future__ import annotations

import datetime
import pathlib

import pytest

from computedomains import flags
from computedomains.api import imex
from computedomains.kubeletplugin import config, nodestate

T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
RUN = imex.AgentStart("pod-1", "0123456789abcdef", T0)


def _status(
    state: imex.State = imex.State.READY, *, domain: str = "d1", age: float = 0, message: str = ""
) -> imex.ImexStatus:
    return imex.ImexStatus(
        node="n1",
        domain_uid=domain,
        state=state,
        message=message,
        updated_at=T0,
        heartbeat_at=T0 - datetime.timedelta(seconds=age),
        agent=RUN,
    )


@pytest.mark.parametrize(
    ("status", "why"),
    [
        pytest.param(_status(), "", id="fresh READY for the claim's domain"),
        pytest.param(_status(age=29), "", id="READY, heartbeat within the bound"),
        pytest.param(_status(age=31), "the IMEX status is stale: its last heartbeat was 31s ago",
                     id="READY of a dead agent"),
        pytest.param(_status(domain="d2"), "IMEX is READY for another ComputeDomain",
                     id="another domain, not named"),
        pytest.param(_status(imex.State.NOT_READY), "IMEX is NOT_READY for domain d1",
                     id="starting"),
        pytest.param(_status(imex.State.FAILED, message="bind failed"),
                     "IMEX is FAILED for domain d1: bind failed", id="failed, with IMEX's words"),
        pytest.param(_status(imex.State.STOPPED, domain=""), "IMEX is STOPPED for domain -",
                     id="idle"),
        pytest.param(None, "no IMEX status yet", id="no file"),
    ],
)  # fmt: skip
def test_a_channel_claim_passes_only_on_a_fresh_ready_for_its_domain(
    status: imex.ImexStatus | None, why: str
) -> None:
    found = nodestate.imex_not_ready(status, "d1", now=T0, max_age=30)
    assert found.startswith(why) and (found == "") == (why == "")


def test_an_unreadable_status_reads_as_none(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "status.json"
    imex.write_status(path, _status())
    assert nodestate.read_imex(path) == _status()
    path.write_text("{ torn")
    assert nodestate.read_imex(path) is None


def _parse(*argv: str) -> config.PluginConfig:
    return flags.parse(config.PluginConfig, ["--node-name=n1", *argv])


def test_the_staleness_bound_is_a_setting_with_the_contracts_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _parse().imex_status_max_age == imex.MAX_AGE
    assert _parse("--imex-status-max-age=7.5").imex_status_max_age == 7.5
    with pytest.raises(SystemExit):
        _parse("--imex-status-max-age=0")
    assert "--imex-status-max-age: must be positive, got 0" in capsys.readouterr().err
