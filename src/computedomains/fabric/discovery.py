"""Observe a node: discovery, host checks and classification in one step.

The observer remembers since when a registration has been in progress, so the grace period
spans repeated observations (node-init's wait, and its recheck loop).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import pathlib
import time
from collections.abc import Callable
from typing import Protocol

from computedomains import flags
from computedomains.api import flaggroups
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric import checks, classify, fake
from computedomains.fabric.model import FabricDiscoveryError, NodeReport, Reason, Verdict


class BackendKind(enum.StrEnum):
    """Where fabric information comes from."""

    NVML = "nvml"
    """The node's ``libnvidia-ml.so.1``."""
    FAKE = "fake"
    """The simulated node's fake-NVML topology file."""


class Backend(Protocol):
    """A source of node reports."""

    def discover(self) -> NodeReport:
        """Query the node now; :class:`FabricDiscoveryError` when that is impossible."""


@dataclasses.dataclass(frozen=True)
class DiscoverySettings:
    """Where fabric information comes from.

    A flag group of ``node-init``, ``fabric show`` and the kubelet plugin's re-check (which
    shares the plugin's own ``--proc-root``).
    """

    backend: BackendKind = flags.option(
        "--fabric-backend",
        default=BackendKind.NVML.value,
        type=BackendKind,
        choices=[b.value for b in BackendKind],
        help="where fabric information comes from: NVML, or the simulated node's file",
    )
    driver_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--driver-root"])
    fake_nvml_file: pathlib.Path = flags.option(
        "--fake-nvml-file",
        default=str(fake.DEFAULT_FAKE_NVML_FILE),
        type=flags.path,
        help="fake-NVML topology file read by the fake backend",
    )
    proc_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--proc-root"])

    def make_backend(self) -> Backend:
        """The backend these settings select."""
        if self.backend is BackendKind.FAKE:
            return fake.FakeBackend(self.fake_nvml_file)
        # Imported here: the NVML bindings cost memory that simulated nodes never use.
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
