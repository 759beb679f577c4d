"""Leader election: the pure take/renew decision, the records written, the elector's loop."""

from __future__ import annotations

import datetime
import threading
from typing import Any, cast

import pytest

from computedomains.kube import client, leaderelection
from computedomains.kube.leaderelection import Action, LeaseRecord
from tests.support.fakeapi import FakeApi

ME = "ctl-a-1111"
OTHER = "ctl-b-2222"


def record(holder: str, duration: float = 15, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, duration, "t0", "t0", transitions)


@pytest.mark.parametrize(
    ("lease", "observed_at", "now", "expected"),
    [
        (None, 0, 0, Action.CREATE),
        (record(ME), 0, 100, Action.RENEW),  # ours, even if we were slow
        (record(OTHER), 100, 110, Action.WAIT),  # live: seen 10 s ago, lasts 15
        (record(OTHER), 100, 114.9, Action.WAIT),
        (record(OTHER), 100, 115, Action.TAKE),  # unchanged for a whole lease duration
        (record(OTHER, duration=1), 100, 101, Action.TAKE),
        (record(""), 100, 100, Action.TAKE),  # released
    ],
)
def test_decide(
    lease: LeaseRecord | None, observed_at: float, now: float, expected: Action
) -> None:
    assert leaderelection.decide(lease, me=ME, observed_at=observed_at, now=now) is expected


def test_next_record_counts_transitions_and_keeps_acquire_time_on_renewal() -> None:
    created = leaderelection.next_record(None, Action.CREATE, me=ME, duration=15, now="t1")
    assert created == LeaseRecord(ME, 15, "t1", "t1", 0)
    taken = leaderelection.next_record(
        record(OTHER, transitions=3), Action.TAKE, me=ME, duration=15, now="t2"
    )
    assert taken == LeaseRecord(ME, 15, "t2", "t2", 4)
    renewed = leaderelection.next_record(taken, Action.RENEW, me=ME, duration=15, now="t3")
    assert renewed == LeaseRecord(ME, 15, "t2", "t3", 4)


def test_record_round_trips_through_a_lease_spec() -> None:
    original = LeaseRecord(ME, 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:02.000000Z", 2)
    spec = original.to_spec()
    assert spec["holderIdentity"] == ME
    assert spec["leaseDurationSeconds"] == 15
    assert LeaseRecord.from_lease({"spec": spec}) == original


@pytest.mark.parametrize(
    ("lease", "renew", "retry"), [(15, 15, 2), (15, 10, 9), (15, 10, 0), (5, 10, 2)]
)
def test_timing_refuses_settings_that_could_give_two_leaders(
    lease: float, renew: float, retry: float
) -> None:
    with pytest.raises(ValueError, match="lease duration > renew deadline"):
        leaderelection.Timing(lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_identity_is_pod_name_and_random_suffix() -> None:
    first, second = leaderelection.identity("pod-x"), leaderelection.identity("pod-x")
    assert first.startswith("pod-x-")
    assert first != second


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _elector(api: FakeApi, clock: Clock, me: str, calls: list[str]) -> leaderelection.LeaderElector:
    return leaderelection.LeaderElector(
        cast(client.Client, api),
        namespace="ns",
        name="lease",
        me=me,
        timing=leaderelection.Timing(lease_duration=15, renew_deadline=10, retry_period=2),
        on_started_leading=lambda: calls.append(f"{me} started"),
        on_stopped_leading=lambda: calls.append(f"{me} stopped"),
        clock=clock,
        wall=lambda: EPOCH + datetime.timedelta(seconds=clock.now),
    )


PATH = leaderelection.lease_path("ns", "lease")


def spec(api: FakeApi) -> dict[str, Any]:
    return dict(api.objects[PATH]["spec"])


def test_a_standby_takes_over_only_after_the_lease_went_unrenewed_for_its_duration() -> None:
    api, clock, calls = FakeApi(), Clock(), list[str]()
    leader, standby = _elector(api, clock, ME, calls), _elector(api, clock, OTHER, calls)
    assert leader._try()  # creates the Lease
    assert spec(api)["holderIdentity"] == ME
    assert spec(api)["leaseTransitions"] == 0
    assert not standby._try()  # first sight of the record starts its clock
    clock.now += 9  # a slow leader, still within its renew deadline
    assert not standby._try()
    assert leader._try()  # a renewal changes the record: the standby's clock restarts
    assert not standby._try()
    clock.now += 14
    assert not standby._try()
    writes_before = len(api.writes())
    clock.now += 1
    assert standby._try()
    assert spec(api)["holderIdentity"] == OTHER
    assert spec(api)["leaseTransitions"] == 1
    assert len(api.writes()) == writes_before + 1
    assert not leader.holds_lease()  # long past its renew deadline: it writes nothing
    assert not leader._try()


def test_a_standby_only_reads() -> None:
    api, clock, calls = FakeApi(), Clock(), list[str]()
    leader, standby = _elector(api, clock, ME, calls), _elector(api, clock, OTHER, calls)
    leader._try()
    before = len(api.writes())
    for _ in range(5):
        clock.now += 2
        standby._try()
    assert len(api.writes()) == before


def test_two_replicas_taking_a_free_lease_at_once_one_wins_by_resource_version() -> None:
    api, clock, calls = FakeApi(), Clock(), list[str]()
    first, second = _elector(api, clock, ME, calls), _elector(api, clock, OTHER, calls)
    first._try()
    api.objects[PATH]["spec"]["holderIdentity"] = ""  # released
    api.conflicts_to_inject = 1  # the other replica's write lands first
    assert not second._try()
    assert second.leading is False


def test_run_leads_until_stopped_then_releases_after_the_workers_stopped() -> None:
    api, calls = FakeApi(), []
    elector = leaderelection.LeaderElector(
        cast(client.Client, api), namespace="ns", name="lease", me=ME,
        timing=leaderelection.Timing(lease_duration=1, renew_deadline=0.5, retry_period=0.1),
        on_started_leading=lambda: calls.append("started"),
        on_stopped_leading=lambda: calls.append(f"stopped, holder {spec(api)['holderIdentity']}"),
    )  # fmt: skip
    stop = threading.Event()
    runner = threading.Thread(target=lambda: calls.append(str(elector.run(stop))))
    runner.start()
    while "started" not in calls:
        stop.wait(0.01)
    assert elector.leading
    stop.set()
    runner.join(timeout=5)
    assert calls == ["started", f"stopped, holder {ME}", "True"]
    assert spec(api)["holderIdentity"] == ""  # released only after the workers stopped
    assert not elector.leading


class Unreachable(FakeApi):
    """Answers until ``broken`` is set, then fails every request like a lost network."""

    broken = False

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.broken:
            raise client.ApiError(503, "ServiceUnavailable", "down")
        return super().get(path, **kwargs)


def test_a_leader_that_cannot_renew_stops_leading_within_the_renew_deadline() -> None:
    api, calls = Unreachable(), list[str]()
    elector = leaderelection.LeaderElector(
        cast(client.Client, api), namespace="ns", name="lease", me=ME,
        timing=leaderelection.Timing(lease_duration=1, renew_deadline=0.5, retry_period=0.1),
        on_started_leading=lambda: calls.append("started"),
        on_stopped_leading=lambda: calls.append("stopped"),
    )  # fmt: skip
    result: list[bool] = []
    runner = threading.Thread(target=lambda: result.append(elector.run(threading.Event())))
    runner.start()
    while "started" not in calls:
        threading.Event().wait(0.01)
    api.broken = True
    runner.join(timeout=5)
    assert result == [False]  # lost, not stopped: the process exits and restarts as standby
    assert calls == ["started", "stopped"]
    assert spec(api)["holderIdentity"] == ME  # not released: it could not reach the server


# -- fencing and giving up: pure decisions, then the loop in virtual time --------------------

TIMING = leaderelection.Timing(lease_duration=15, renew_deadline=10, retry_period=2)


@pytest.mark.parametrize(
    ("renewed_at", "now", "expected"),
    [
        pytest.param(None, 100, False, id="not leading"),
        pytest.param(100, 100, True, id="just renewed"),
        pytest.param(100, 109.9, True, id="within the renew deadline"),
        pytest.param(100, 110, False, id="at the renew deadline: 5 s before the lease expires"),
        pytest.param(100, 130, False, id="paused past the lease"),
    ],
)
def test_holds(renewed_at: float | None, now: float, expected: bool) -> None:
    assert leaderelection.holds(renewed_at, now=now, timing=TIMING) is expected


@pytest.mark.parametrize(
    ("renewed_at", "now", "timeout", "pause"),
    [
        pytest.param(None, 100, 10 / 3, 2, id="standby: a third of the renew deadline"),
        pytest.param(100, 100, 10 / 3, 2, id="leader, fresh"),
        pytest.param(100, 108, 2, 2, id="leader: never past the deadline"),
        pytest.param(100, 109, 1, 1, id="leader: the next attempt comes at the deadline"),
        pytest.param(100, 110, 0, 0, id="at the deadline: no request, give up now"),
        pytest.param(100, 130, 0, 0, id="long past it"),
    ],
)
def test_request_timeout_and_pause_never_reach_past_the_renew_deadline(
    renewed_at: float | None, now: float, timeout: float, pause: float
) -> None:
    assert leaderelection.request_timeout(renewed_at, now=now, timing=TIMING) == timeout
    assert leaderelection.pause(renewed_at, now=now, timing=TIMING) == pause


class VirtualStop(threading.Event):
    """A stop event that is never set and whose waits pass in virtual time."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.now += timeout or 0
        return False


class Hanging(FakeApi):
    """Once ``hang`` is set, every request takes its whole timeout and then fails."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.hang = False
        self.timeouts: list[tuple[float, float]] = []
        """(when sent, timeout) of every request made while hanging."""

    def _maybe_hang(self, kwargs: dict[str, Any]) -> None:
        if self.hang:
            self.timeouts.append((self.clock.now, kwargs["timeout"]))
            self.clock.now += kwargs["timeout"]
            raise TimeoutError("read timed out")

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._maybe_hang(kwargs)
        return super().get(path, **kwargs)

    def replace(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        self._maybe_hang(kwargs)
        return super().replace(path, body, **kwargs)


def test_a_leader_facing_a_hanging_api_server_gives_up_before_its_lease_can_expire() -> None:
    clock = Clock()
    api = Hanging(clock)
    seen: dict[str, Any] = {}

    def started() -> None:
        seen["renewed_at"] = clock.now  # the take was sent now (no time passes in the fake)
        api.hang = True

    def stopped() -> None:
        seen["stopped_at"], seen["fenced"] = clock.now, not elector.holds_lease()

    elector = leaderelection.LeaderElector(
        cast(client.Client, api), namespace="ns", name="lease", me=ME, timing=TIMING,
        on_started_leading=started, on_stopped_leading=stopped, clock=clock,
    )  # fmt: skip
    assert elector.run(VirtualStop(clock)) is False
    deadline = seen["renewed_at"] + TIMING.renew_deadline
    assert seen["stopped_at"] <= deadline < seen["renewed_at"] + TIMING.lease_duration
    assert seen["fenced"]  # the writers' fence closed no later than the workers were stopped
    assert api.timeouts, "the leader kept trying"
    for sent, timeout in api.timeouts:
        assert 0 < timeout <= TIMING.request_timeout
        assert sent + timeout <= deadline  # no request outlives the deadline
    assert spec(api)["holderIdentity"] == ME  # not released: it could not reach the server


def test_a_leader_that_sees_another_holder_stops_writing_at_once() -> None:
    api, clock = FakeApi(), Clock()
    elector = _elector(api, clock, ME, [])
    assert elector._try()
    api.objects[PATH]["spec"]["holderIdentity"] = OTHER  # taken over behind our back
    clock.now += 2
    assert not elector._try()
    assert not elector.holds_lease()  # long before the renew deadline
    assert elector._renew_until(VirtualStop(clock)) is False


def test_a_leader_paused_past_its_deadline_is_fenced_on_resume_without_asking_the_server() -> None:
    api, clock = FakeApi(), Clock()
    elector = _elector(api, clock, ME, [])
    assert elector._try()
    assert elector.holds_lease()
    clock.now += 20  # SIGSTOP, SIGCONT: the monotonic clock went on
    assert not elector.holds_lease()
    calls = len(api.calls)
    assert elector._renew_until(VirtualStop(clock)) is False
    assert len(api.calls) == calls  # gave up on its own clock
    assert not elector.leading
