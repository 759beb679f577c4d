"""The agent's decisions, without I/O: what IMEX should run with, what to do, what to report.

Three steps, each a pure function over frozen values:

- :func:`target`: from the node's labels, its clique object and the fabric verdict, whether
  IMEX should run here and with which slot and peers;
- :func:`step`: from the target and what the supervisor last gave IMEX, the action
  (start, SIGUSR1 reload, restart, stop) and the earliest time it may happen;
- :func:`report`: from the target and IMEX's observed health, the node-local status and the
  pod condition.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import math

from computedomains.api import imex
from computedomains.imexagent import render


class Mode(enum.StrEnum):
    """Where the node stands."""

    IDLE = "idle"
    """No NVLink clique (no fabric, or a fabric node-init does not trust): no IMEX here."""
    OUT = "out"
    """In a clique, but in no ComputeDomain."""
    WAITING = "waiting"
    """In a ComputeDomain, without a slot yet (the controller has not listed it)."""
    MEMBER = "member"
    """In a ComputeDomain with a slot: IMEX runs."""


@dataclasses.dataclass(frozen=True)
class Daemon:
    """One ``daemons[]`` entry of the clique object."""

    node_name: str
    address: str
    index: int | None


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything the agent decides on, read at one moment."""

    node_name: str
    pod_ip: str
    max_nodes: int
    clique_id: str
    """From the fabric verdict; empty: the node has no usable clique."""
    fabric_note: str
    """The verdict in words, for the Idle report."""
    domain_uid: str
    """The domain the membership record names for this node (``placement.recorded_holder``;
    beside clique objects of a controller from before the record, its label); empty when none
    does."""
    daemons: tuple[Daemon, ...] | None
    """The clique object ``<domain>.<clique>``'s daemons; None while there is no object."""


@dataclasses.dataclass(frozen=True)
class Membership:
    """What IMEX runs with: the domain, this node's slot and every slot's address."""

    domain_uid: str
    slot: int
    hosts: tuple[render.HostEntry, ...]


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the node stands and, for a member, what IMEX should run with."""

    mode: Mode
    domain_uid: str
    membership: Membership | None
    note: str
    """Why, in words (reports quote it)."""


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def target(snapshot: Snapshot) -> Target:
    """Decide the node's mode and membership from ``snapshot``."""
    s = snapshot
    if not s.clique_id:
        return Target(Mode.IDLE, "", None, s.fabric_note)
    if not s.domain_uid:
        return Target(Mode.OUT, "", None, "the node is in no ComputeDomain")
    waiting = f"waiting for a slot in clique {s.clique_id}"
    if s.daemons is None:
        return Target(Mode.WAITING, s.domain_uid, None, f"{waiting} (no clique object yet)")
    mine = next((d for d in s.daemons if d.node_name == s.node_name), None)
    if mine is None or mine.index is None or not 0 <= mine.index < s.max_nodes:
        return Target(Mode.WAITING, s.domain_uid, None, waiting)
    # Peers without a valid slot or address are left out: their slots resolve to the
    # sentinel until the controller lists them. This node's own address is always known.
    # An address that is no IP (a clique object written by hand) never reaches the hosts
    # file: it could add lines of its own there.
    addresses = {
        d.index: d.address
        for d in s.daemons
        if d.index is not None and 0 <= d.index < s.max_nodes and _is_ip(d.address)
    }
    addresses[mine.index] = s.pod_ip
    hosts = render.host_entries(s.domain_uid, addresses, s.max_nodes)
    membership = Membership(s.domain_uid, mine.index, hosts)
    peers = sum(1 for slot in addresses if slot != mine.index)
    note = f"slot {mine.index} of clique {s.clique_id}, {peers} peer(s)"
    return Target(Mode.MEMBER, s.domain_uid, membership, note)


class Action(enum.StrEnum):
    """What the supervisor does to IMEX."""

    NONE = "none"
    START = "start"
    RELOAD = "reload"
    """Rewrite the hosts entries and send SIGUSR1: only the peers changed."""
    RESTART = "restart"
    """Stop and start: the domain changed."""
    STOP = "stop"


@dataclasses.dataclass(frozen=True)
class Running:
    """What the supervisor last gave the IMEX process that runs now."""

    domain_uid: str
    hosts: tuple[render.HostEntry, ...]


@dataclasses.dataclass(frozen=True)
class Gates:
    """Earliest times for actions that must wait."""

    start_not_before: float
    """After a crash: the capped backoff."""
    reload_not_before: float
    """IMEX ignores a SIGUSR1 that comes too soon after the previous one (or its start)."""


@dataclasses.dataclass(frozen=True)
class Step:
    """The action to take and the earliest time to take it (``math.inf`` with NONE)."""

    action: Action
    at: float


def step(target: Target, running: Running | None, gates: Gates, *, now: float) -> Step:
    """The supervisor action that brings IMEX to ``target``."""
    member = target.membership
    if member is None:
        # A missing slot while the record still names the domain (clique object being
        # rewritten, say) is no reason to tear the domain down under running workloads;
        # leaving it is.
        keep = running is None or (
            target.mode == Mode.WAITING and running.domain_uid == target.domain_uid
        )
        return Step(Action.NONE, math.inf) if keep else Step(Action.STOP, now)
    if running is None:
        return Step(Action.START, max(now, gates.start_not_before))
    if running.domain_uid != member.domain_uid:
        return Step(Action.RESTART, now)
    if running.hosts != member.hosts:
        return Step(Action.RELOAD, max(now, gates.reload_not_before))
    return Step(Action.NONE, math.inf)


class Health(enum.StrEnum):
    """IMEX as the supervisor sees it."""

    NOT_RUNNING = "not-running"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class Observed:
    """The supervisor's view: health, the domain of the (last) process, IMEX's own words."""

    health: Health
    domain_uid: str
    text: str


@dataclasses.dataclass(frozen=True)
class Report:
    """What the node file and the pod condition say."""

    state: imex.State
    domain_uid: str
    reason: imex.Reason
    text: str

    @property
    def ready(self) -> bool:
        """The condition's status: True only when IMEX answers READY for the domain."""
        return self.state == imex.State.READY

    @property
    def message(self) -> str:
        """The condition message, for people: ``domain <uid>: `` then the text.

        Readers take the domain from the pod's annotation (:mod:`computedomains.api.imex`).
        """
        return f"domain {self.domain_uid}: {self.text}"


_BY_HEALTH = {
    Health.READY: (imex.State.READY, imex.Reason.READY),
    Health.FAILED: (imex.State.FAILED, imex.Reason.FAILED),
    Health.STARTING: (imex.State.NOT_READY, imex.Reason.STARTING),
    Health.NOT_RUNNING: (imex.State.NOT_READY, imex.Reason.STARTING),
}


def report(target: Target, observed: Observed) -> Report:
    """The report for ``target`` given what IMEX is doing."""
    uid = target.domain_uid
    if target.mode == Mode.IDLE:
        return Report(imex.State.STOPPED, "", imex.Reason.IDLE, f"idle: {target.note}")
    if target.mode == Mode.OUT:
        if observed.domain_uid:
            text = "IMEX stopped: the node left the domain"
            return Report(imex.State.STOPPED, observed.domain_uid, imex.Reason.STOPPED, text)
        return Report(imex.State.STOPPED, "", imex.Reason.STOPPED, target.note)
    running_here = observed.domain_uid == uid and observed.health != Health.NOT_RUNNING
    if target.mode == Mode.WAITING and not running_here:
        return Report(imex.State.NOT_READY, uid, imex.Reason.STARTING, target.note)
    if observed.domain_uid != uid:
        return Report(imex.State.NOT_READY, uid, imex.Reason.STARTING, "starting IMEX")
    state, reason = _BY_HEALTH[observed.health]
    return Report(state, uid, reason, observed.text or "starting IMEX")
