"""Garbage collection, the end of a prepare that raced an abort, what the claims hold: tables."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from computedomains.kubeletplugin import checkpoint, collection, ledger
from computedomains.kubeletplugin.devices import DeviceType

STARTED = checkpoint.ClaimState.STARTED
COMPLETED = checkpoint.ClaimState.COMPLETED
ABORTED = checkpoint.ClaimState.ABORTED
TTL = collection.ABORTED_TTL


def _entry(
    uid: str,
    state: checkpoint.ClaimState = COMPLETED,
    *,
    domain: str = "cd-1",
    device_type: DeviceType = DeviceType.CHANNEL,
    aborted_at: float | None = None,
    allocation: str = "alloc",
) -> checkpoint.ClaimEntry:
    return checkpoint.ClaimEntry(
        uid, "ns", f"claim-{uid}", state, domain, device_type, allocation, aborted_at=aborted_at
    )


@pytest.mark.parametrize(
    ("entries", "present", "expired", "gone"),
    [
        pytest.param(
            [_entry("a"), _entry("b", STARTED)], {"a": True, "b": True}, [], [], id="all live"
        ),
        pytest.param(
            [_entry("a"), _entry("b", STARTED)],
            {"a": False, "b": False},
            [],
            ["a", "b"],
            id="completed and started entries whose claim is gone",
        ),
        pytest.param(
            [
                _entry("old", ABORTED, aborted_at=1000 - TTL - 1),
                _entry("new", ABORTED, aborted_at=1000 - 5),
            ],
            {},
            ["old"],
            [],
            id="aborted entries expire after the TTL, and are never looked up",
        ),
        pytest.param([_entry("a")], {}, [], [], id="not looked up (an API error): kept"),
        pytest.param(
            [_entry("agent", device_type=DeviceType.DAEMON, domain="")],
            {"agent": False},
            [],
            ["agent"],
            id="daemon claims too",
        ),
    ],
)
def test_collection_decisions(
    entries: list[checkpoint.ClaimEntry],
    present: dict[str, bool],
    expired: list[str],
    gone: list[str],
) -> None:
    assert {e.uid for e in collection.to_look_up(entries)} == {
        e.uid for e in entries if e.state is not ABORTED
    }
    decision = collection.decide(entries, now=1000, present=present)
    assert list(decision.expired) == expired
    assert [e.uid for e in decision.gone] == gone


@pytest.mark.parametrize(
    ("current", "present", "outcome"),
    [
        (_entry("a", STARTED), True, ledger.Commit.COMPLETE),
        (_entry("a", STARTED), False, ledger.Commit.CLAIM_GONE),
        (_entry("a", COMPLETED), True, ledger.Commit.ALREADY_COMPLETE),
        (_entry("a", COMPLETED), False, ledger.Commit.ALREADY_COMPLETE),
        (_entry("a", ABORTED, aborted_at=1.0), True, ledger.Commit.ABANDONED),
        (None, True, ledger.Commit.ABANDONED),
        (_entry("a", STARTED, allocation="newer"), True, ledger.Commit.ABANDONED),
    ],
    ids=[
        "still started: complete",
        "claim deleted during the wait",
        "a concurrent prepare finished first",
        "a finished prepare is the kubelet's, whatever the API says now",
        "unprepared during the wait",
        "collected during the wait",
        "re-allocated meanwhile: the newer prepare owns the entry",
    ],
)
def test_how_a_prepare_that_waited_ends(
    current: checkpoint.ClaimEntry | None, present: bool, outcome: ledger.Commit
) -> None:
    assert ledger.decide_commit(current, allocation="alloc", claim_present=present) is outcome


@pytest.mark.parametrize(
    ("entries", "held"),
    [
        ([], None),
        ([_entry("a"), _entry("b", STARTED)], "cd-1"),
        ([_entry("a", ABORTED, aborted_at=1.0)], None),
        ([_entry("agent", device_type=DeviceType.DAEMON, domain="")], None),
        ([_entry("b", STARTED, domain="cd-2"), _entry("a", domain="cd-1")], "cd-1"),
    ],
    ids=["nothing", "held", "aborted holds nothing", "daemon claims never", "two: a stable pick"],
)
def test_the_domain_the_prepared_claims_hold_the_node_for(
    entries: list[checkpoint.ClaimEntry], held: str | None
) -> None:
    assert ledger.held_by(entries) == held


def test_the_ledger_never_lets_a_prepare_finish_after_an_unprepare(tmp_path: pathlib.Path) -> None:
    root = tmp_path
    book = ledger.Ledger(
        checkpoint_file=root / "checkpoint.json", cdi_root=root / "cdi", clock=lambda: 5.0
    )
    book.load(checkpoint.Checkpoint("boot"), persist=True)
    started = _entry("a", STARTED)
    assert book.start(started, read_at=1.0) is None
    assert book.start(_entry("x", STARTED, domain="cd-2"), read_at=1.0) == "cd-1"  # one domain
    (root / "cdi").mkdir()
    spec = root / "cdi" / "k8s.compute-domain.nvidia.com-claim_a.yaml"
    assert book.release("a") == started  # unprepare while the prepare waits
    spec.write_text("{}")  # the prepare writes its spec after all
    outcome, entry = book.commit("a", allocation="alloc", devices=(), claim_present=True)
    assert outcome is ledger.Commit.ABANDONED and entry is not None and entry.state is ABORTED
    assert not spec.exists()
    assert checkpoint.load(root / "checkpoint.json", boot_id="boot").checkpoint.claims == {
        "a": dataclasses.replace(started, state=ABORTED, aborted_at=5.0)
    }
    assert book.held_domain() is None


@pytest.mark.parametrize("before", ["", "started", "completed"], ids=["not started", "started",
                                                                      "completed"])  # fmt: skip
def test_a_prepare_that_read_the_claim_before_an_unprepare_never_starts_it(
    tmp_path: pathlib.Path, before: str
) -> None:
    """The kubelet unprepares while a prepare of the same claim is on its way (it read the
    claim before): that prepare must not bring the claim back, whether the claim's entry was
    not recorded yet, started, or completed (by a prepare before it: review found that an
    unprepare of a completed claim left no mark); a prepare that reads the claim after the
    unprepare may."""
    now = [1.0]
    book = ledger.Ledger(
        checkpoint_file=tmp_path / "checkpoint.json", cdi_root=tmp_path / "cdi",
        clock=lambda: now[0],
    )  # fmt: skip
    book.load(checkpoint.Checkpoint("boot"), persist=True)
    read_at = book.now()  # the prepare reads the claim
    if before:
        assert book.start(_entry("a", STARTED), read_at=read_at) is None
    if before == "completed":
        done = book.commit("a", allocation="alloc", devices=(), claim_present=True)
        assert done[0] is ledger.Commit.COMPLETE
    now[0] = 2.0
    book.release("a", namespace="ns", name="claim-a")  # the unprepare
    now[0] = 3.0
    with pytest.raises(ledger.Unprepared):
        book.start(_entry("a", STARTED), read_at=read_at)
    assert book.held_domain() is None
    # A prepare that reads the claim after the unprepare (a new pod of the same claim) may.
    assert book.start(_entry("a", STARTED), read_at=book.now()) is None
    assert book.held_domain() == "cd-1"
