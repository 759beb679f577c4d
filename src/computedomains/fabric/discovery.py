"""Observe a node: discovery, host checks and classification in one step.

The observer remembers since when a registration has been in progress, so the grace period
spans repeated observations (node-init's wait, and its recheck loop).
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import time
from collections.abc import Callable
from typing import Protocol

from computedomains import flaggroups, flags
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify
from computedomains.fabric.model import FabricDiscoveryError, NodeReport, Reason, Verdict


class Backend(Protocol):
    """A source of node reports."""

    def discover(self) -> NodeReport:
        """Query the node now; :class:`FabricDiscoveryError` when that is impossible."""


@dataclasses.dataclass(frozen=True)
class DiscoverySettings:
    """Where fabric information comes from: the driver's NVML under the driver root, and /proc.

    A flag group of ``node-init``, ``fabric show`` and the kubelet plugin's re-check (which
    shares the plugin's own ``--proc-root``).
    """

    driver_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--driver-root"])
    proc_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--proc-root"])

    def make_backend(self) -> Backend:
        """NVML of the driver root."""
        # Imported here: the NVML bindings cost memory that a plugin without the re-check
        # never uses.
        from computedomains.fabric import nvml  # noqa: PLC0415

        return nvml.NvmlBackend(driver_root=self.driver_root, proc_root=self.proc_root)


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at the node: what discovery reported (None if it failed) and the verdict."""

    report: NodeReport | None
    verdict: Verdict
    observed_at: datetime.datetime


class Observer:
    """Observes a node repeatedly; a registration's grace counts from when it was first seen."""

    def __init__(
        self,
        backend: Backend,
        proc_root: pathlib.Path,
        *,
        grace: float = classify.DEFAULT_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._proc_root = proc_root
        self._grace = grace
        self._clock = clock
        self._pending_since: float | None = None

    def observe(self) -> Observation:
        """Discover, check and classify now."""
        observed_at = datetime.datetime.now(datetime.UTC)
        try:
            report = self._backend.discover()
            host = checks.gather(self._proc_root)
        except (FabricDiscoveryError, OSError) as exc:
            self._pending_since = None
            failed = Verdict(VerdictKind.BROKEN, Reason.DISCOVERY_FAILED, str(exc))
            return Observation(report=None, verdict=failed, observed_at=observed_at)
        now = self._clock()
        waited = 0.0 if self._pending_since is None else now - self._pending_since
        verdict = classify.classify(report, host, waited=waited, grace=self._grace)
        if verdict.kind is VerdictKind.TRANSITIONAL:
            self._pending_since = now if self._pending_since is None else self._pending_since
        elif verdict.reason is not Reason.TIMED_OUT:
            self._pending_since = None  # settled: a later registration gets a fresh grace
        return Observation(report=report, verdict=verdict, observed_at=observed_at)
