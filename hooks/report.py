"""Progress output of the hook programs: one line per step on stdout, prefixed by the hook.

Helm keeps a failed hook's pod log and Argo CD shows it in the sync result, so every line must
read on its own: ``preflight: Kubernetes 1.36.0: supported``. A check's outcome is a
:class:`Finding`; the hook prints it through :meth:`Report.finding`, and a failure carries the
fix as a second line.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable, Sequence
from typing import TextIO


class Severity(enum.StrEnum):
    """How a finding counts: ``fail`` makes the hook exit non-zero, the others only print."""

    OK = "ok"
    """A check passed; printed without a marker."""
    INFO = "info"
    """Worth knowing; changes nothing."""
    WARN = "warning"
    """Printed as a warning; the hook still succeeds."""
    FAIL = "failed"
    """The hook exits non-zero, after printing every finding."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """The outcome of one check, decided by a pure function from the facts the hook gathered."""

    severity: Severity
    message: str
    """What was found, naming the objects involved."""
    fix: str = ""
    """What to do about it (required in spirit for ``fail``: the reader must know the next step)."""


@dataclasses.dataclass(frozen=True)
class Stop:
    """How a hook ends when one of ``errors`` stops it: a failure line, its fix, ``exit_code``.

    The run wrapper (:mod:`computedomains.hooks.commands`) prints ``<what>: <error>`` as a
    failed finding with ``fix``; 1 tells Helm the hook failed, 2 that it could not even judge.
    """

    errors: tuple[type[Exception], ...]
    what: str
    fix: str
    exit_code: int = 1


NEVER = Stop((), "", "")
"""The :class:`Stop` of a hook that reports every error itself (as a finding, or per object)."""


def listed(names: Sequence[str], limit: int = 5) -> str:
    """The first ``limit`` of ``names``, comma-separated, then "and N more" for the rest."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any of ``findings`` fails the hook."""
    return any(f.severity is Severity.FAIL for f in findings)


LOGGER = "computedomains.hooks.progress"
"""The logger of every hook's progress lines (stdout, :func:`computedomains.logs.configure`)."""
_LEVELS = {Severity.OK: logging.INFO, Severity.INFO: logging.INFO,
           Severity.WARN: logging.WARNING, Severity.FAIL: logging.ERROR}  # fmt: skip


class Report:
    """Writes a hook's progress lines.

    To ``out`` when given (tests), else through the logger :data:`LOGGER`, which the hook
    command sends to stdout as text or JSON (``--log-format``, :mod:`computedomains.logs`).
    """

    def __init__(self, hook: str, out: TextIO | None = None) -> None:
        self._hook = hook
        self._out = out
        self._log = logging.getLogger(LOGGER)

    def step(self, message: str, *, level: int = logging.INFO) -> None:
        """One progress line."""
        line = f"{self._hook}: {message}"
        if self._out is not None:
            print(line, file=self._out, flush=True)
        else:
            self._log.log(level, line)

    def finding(self, finding: Finding) -> None:
        """A finding: its message behind its severity (``ok`` unmarked), then its fix if any."""
        marker = "" if finding.severity is Severity.OK else f"{finding.severity.upper()}: "
        level = _LEVELS[finding.severity]
        self.step(f"{marker}{finding.message}", level=level)
        if finding.fix:
            self.step(f"  fix: {finding.fix}", level=level)

    def findings(self, findings: Iterable[Finding]) -> bool:
        """Print every finding; whether any failed."""
        items = list(findings)
        for finding in items:
            self.finding(finding)
        return failed(items)
