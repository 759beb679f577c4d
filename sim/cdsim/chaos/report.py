"""What a chaos run tells: counts, recovery times, violations with their context (pure).

The run fills a :class:`Report` as it goes; :meth:`Report.render` is the text it prints at the
end and :meth:`Report.to_json` what ``--report FILE`` holds.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from cdsim.chaos.invariants import Violation

CONTEXT_BEFORE = 120.0
"""Seconds of the timeline shown before a violation."""
CONTEXT_AFTER = 10.0
CONTEXT_LINES = 10
"""At least this many lines before a violation, however long ago (a quiet end of the run)."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One line of the run's timeline: what was done (or seen) when."""

    at: float
    text: str

    def line(self) -> str:
        """``[  63.2s] fault #4 kill-plugin on gb200-r0-n03``."""
        return f"[{self.at:7.1f}s] {self.text}"


@dataclasses.dataclass(frozen=True)
class Finding:
    """A violation that counted, with what a reader needs to replay and debug it."""

    at: float
    violation: Violation
    seed: int
    timeline: tuple[str, ...]
    """The timeline around it."""
    events: tuple[str, ...]
    """The last Kubernetes Events when it counted (its namespace, the release's, Nodes')."""

    def to_json(self) -> dict[str, Any]:
        """As the report file holds it."""
        return {
            "at": round(self.at, 1),
            "seed": self.seed,
            "invariant": self.violation.invariant,
            "subject": self.violation.subject,
            "message": self.violation.message,
            "timeline": list(self.timeline),
            "events": list(self.events),
        }


def around(records: Sequence[Record], at: float) -> tuple[str, ...]:
    """The timeline from :data:`CONTEXT_BEFORE` before ``at`` to a moment after.

    At least the :data:`CONTEXT_LINES` lines before ``at``, however old.
    """
    before = [r for r in records if r.at <= at]
    near = [r for r in records if at - CONTEXT_BEFORE <= r.at <= at + CONTEXT_AFTER]
    shown = {id(r) for r in [*before[-CONTEXT_LINES:], *near]}
    return tuple(r.line() for r in records if id(r) in shown)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` (0..100) percentile by nearest rank; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclasses.dataclass
class Report:
    """A run's counts and findings, filled in as it plays."""

    seed: int
    duration: float
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Faults injected, by kind."""
    skipped: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Faults not injected, by kind: no target then (a kill of a process that was down)."""
    recoveries: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Seconds from a fault's end (an instant one's injection) to everything healthy, by kind."""
    unrecovered: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    domains_created: int = 0
    domains_formed: set[str] = dataclasses.field(default_factory=set)
    """Domains seen Ready at least once."""
    pods_run: set[str] = dataclasses.field(default_factory=set)
    """Workload pods (by UID) seen Running at least once."""
    actions_failed: int = 0
    """Workload requests the API refused or did not answer (tried again later)."""
    observations: int = 0
    """Snapshots taken (none while the API server or etcd is down on purpose)."""
    observation_failures: int = 0
    findings: list[Finding] = dataclasses.field(default_factory=list)
    repeats: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """How often each counted violation was seen again after it counted."""
    timeline: list[Record] = dataclasses.field(default_factory=list)
    interrupted: str = ""
    """Why the run stopped early ("" when it did not)."""

    @property
    def ok(self) -> bool:
        """No violation, and the run went to its end."""
        return not self.findings and not self.interrupted

    def recovery_summary(self) -> dict[str, dict[str, float | int | None]]:
        """p50 and p99 of the recovery times by fault kind, with counts."""
        kinds = sorted(set(self.recoveries) | set(self.unrecovered))
        return {
            kind: {
                "recovered": len(self.recoveries.get(kind, [])),
                "unrecovered": self.unrecovered.get(kind, 0),
                "p50": _round(percentile(self.recoveries.get(kind, []), 50)),
                "p99": _round(percentile(self.recoveries.get(kind, []), 99)),
            }
            for kind in kinds
        }

    def to_json(self) -> dict[str, Any]:
        """The report file's content."""
        return {
            "seed": self.seed,
            "durationSeconds": self.duration,
            "ok": self.ok,
            "interrupted": self.interrupted,
            "faults": dict(sorted(self.faults.items())),
            "faultsSkipped": dict(sorted(self.skipped.items())),
            "domainsCreated": self.domains_created,
            "domainsFormed": len(self.domains_formed),
            "podsRun": len(self.pods_run),
            "actionsFailed": self.actions_failed,
            "observations": self.observations,
            "observationFailures": self.observation_failures,
            "recovery": self.recovery_summary(),
            "violations": [f.to_json() for f in self.findings],
            "violationRepeats": dict(sorted(self.repeats.items())),
            "timeline": [r.line() for r in self.timeline],
        }

    def render(self) -> str:
        """The summary printed at the end of a run."""
        lines = [
            f"Chaos run, seed {self.seed}, {self.duration:g}s"
            + (f": stopped early ({self.interrupted})" if self.interrupted else ""),
            f"  faults injected   {sum(self.faults.values())}: "
            + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())),
        ]
        if self.skipped:
            lines.append(
                "  faults skipped    "
                + ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items()))
            )
        lines += [
            f"  domains           {self.domains_created} created, "
            f"{len(self.domains_formed)} formed",
            f"  pods run          {len(self.pods_run)}",
            f"  observations      {self.observations} "
            f"({self.observation_failures} failed: the cluster could not be read)",
            f"  violations        {len(self.findings)} (target 0)",
            "  recovery (s)      kind: p50 / p99 (recovered, unrecovered)",
        ]
        for kind, row in self.recovery_summary().items():
            lines.append(
                f"    {kind:<24} {_show(row['p50'])} / {_show(row['p99'])} "
                f"({row['recovered']}, {row['unrecovered']})"
            )
        for finding in self.findings:
            v = finding.violation
            lines += [
                "",
                f"VIOLATION {v.invariant} at {finding.at:.1f}s (seed {finding.seed}): {v.message}",
                "  timeline around it:",
                *(f"    {line}" for line in finding.timeline),
                "  last events:",
                *(f"    {line}" for line in finding.events or ("(none)",)),
            ]
        if self.findings:
            lines += ["", f"Replay: make chaos SEED={self.seed} DURATION={self.duration:g}s"]
        return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _show(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.1f}"
