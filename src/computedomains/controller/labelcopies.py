"""Writing a domain's node label copies (:mod:`nodelabels` plans them), last in a round.

The ``resource.nvidia.com/computeDomain`` label is only a copy of the membership record (the
ComputeDomainClique objects) for the incumbent's tools, so a copy that cannot be written (an
admission webhook refusing Node patches, say) must not hold up what others wait for: the
status, Events and a deletion's release. The writes go out side by side, each fenced on its
own: the domain's next round waits for the slowest, not for their sum. A refusal is reported
once per node and answer, and the write is tried again on its own.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping

from computedomains import trace
from computedomains.api import constants
from computedomains.api.domainview import Domain
from computedomains.controller import nodelabels
from computedomains.controller.eventplan import EventSpec, Reason
from computedomains.kube import client, nodes, workqueue

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""A label write that found the label changed since the snapshot is planned again after this."""

REFUSED_RETRY_SECONDS = workqueue.DEFAULT_MAX_DELAY
"""A label write the API refused (403, 422: an admission policy) is tried again after this: as
often as a failing round at the queue's cap, for the refusal does not pass by itself."""

WRITERS = 6
"""Label copies written at once: a round's 18 Node patches take about three patches' time."""


@dataclasses.dataclass(frozen=True)
class LabelOutcome:
    """What became of a round's label copies."""

    failed: Exception | None = None
    """The first failure that may pass (the API busy or unreachable): the round fails."""
    refused: Mapping[str, tuple[nodelabels.LabelWrite, Exception]] = dataclasses.field(
        default_factory=dict
    )
    """By node: the writes the API refused (it will again), and its answer."""
    lost: bool = False
    """A write found the label changed since the snapshot."""


class LabelCopies:
    """Writes label copies and reports each refusal once (per domain, node and answer)."""

    def __init__(
        self,
        api: client.Client,
        *,
        fence: Callable[[], None],
        emit: Callable[[Domain, EventSpec], None],
    ) -> None:
        self._api = api
        self._fence = fence
        self._emit = emit
        self._lock = threading.Lock()
        self._refusals: dict[str, dict[str, str]] = {}
        """Per domain, the API's answer to each node's refused label write (reported once)."""
        self._trace = trace.Tracer("controller")

    def domains(self) -> set[str]:
        """The domains with a refusal remembered."""
        with self._lock:
            return set(self._refusals)

    def forget(self, uid: str) -> None:
        """Forget the refusals reported for domain ``uid``."""
        with self._lock:
            self._refusals.pop(uid, None)

    def write(self, labels: tuple[nodelabels.LabelWrite, ...]) -> LabelOutcome:
        """Write the label copies; what failed, was refused, or lost.

        A write that found the label changed since the snapshot (another domain's round took
        it away first) is planned again shortly (:data:`RETRY_SECONDS`).
        """
        if not labels:
            return LabelOutcome()
        workers = min(len(labels), WRITERS)
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="label") as pool:
            outcomes = list(pool.map(self._write_one, labels))
        refused: dict[str, tuple[nodelabels.LabelWrite, Exception]] = {
            w.node: (w, o)
            for w, o in zip(labels, outcomes, strict=True)
            if isinstance(o, client.ApiError) and o.failure is client.Failure.REFUSED
        }
        failed = next(
            (o for w, o in zip(labels, outcomes, strict=True)
             if isinstance(o, Exception) and w.node not in refused),
            None,
        )  # fmt: skip
        return LabelOutcome(failed, refused, any(o is False for o in outcomes))

    def _write_one(self, write: nodelabels.LabelWrite) -> bool | Exception:
        """One label copy: whether it was written, or the API failure that stopped it."""
        self._fence()
        try:
            done = nodes.set_label_if(
                self._api, write.node, constants.COMPUTE_DOMAIN_LABEL,
                expected=write.expected, value=write.value,
                resource_version=write.resource_version,
            )  # fmt: skip
        except client.API_ERRORS as exc:
            if client.failure(exc) is not client.Failure.REFUSED:  # a refusal: reported once
                log.warning("node %s: cannot write the domain label: %s", write.node, exc)
            return exc
        if done:
            was, now = write.expected or "-", write.value or "-"
            log.info("node %s: domain label %s -> %s", write.node, was, now)
            if write.value:
                self._trace.stage(trace.Stage.NODE_LABELED, domain=write.value, node=write.node)
        return done

    def report(
        self, domain: Domain, refused: Mapping[str, tuple[nodelabels.LabelWrite, Exception]]
    ) -> None:
        """Log and record a Warning Event for each label refusal, once per node and answer.

        Each refused request is counted already (``api_requests_total`` by code). A node
        written, or no longer planned, is forgotten: a later refusal is reported again.
        """
        answers = {node: str(exc) for node, (_, exc) in refused.items()}
        with self._lock:
            before = self._refusals.get(domain.uid, {})
            if answers:
                self._refusals[domain.uid] = answers
            else:
                self._refusals.pop(domain.uid, None)
        for node, (write, exc) in sorted(refused.items()):
            if before.get(node) == answers[node]:
                continue
            change = (
                f"set its label {constants.COMPUTE_DOMAIN_LABEL}={write.value}"
                if write.value
                else f"remove its label {constants.COMPUTE_DOMAIN_LABEL}"
            )
            message = (
                f"node {node}: the API refused to {change}: {exc}. The label is only a copy "
                "of the membership record (the ComputeDomainClique objects), which is written; "
                f"the write is tried again every {REFUSED_RETRY_SECONDS:g}s"
            )
            log.warning("domain %s/%s: %s", domain.namespace, domain.name, message)
            self._emit(domain, EventSpec(Reason.LABEL_REFUSED, message, warning=True))
