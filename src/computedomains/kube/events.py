"""Record Kubernetes Events (core/v1) on objects users look at: pods, claims, nodes, CDs."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid

from computedomains.kube import client

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


@dataclasses.dataclass
class Recorder:
    """Writes Events as ``component`` on ``host``; failures are logged, never raised."""

    api: client.Client
    component: str
    host: str = ""

    def emit(self, ref: ObjectRef, *, reason: str, message: str, warning: bool = False) -> None:
        """Create one Event about ``ref`` (namespaced objects get it in their namespace)."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = ref.namespace or "default"
        involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        involved |= {"namespace": ref.namespace} if ref.namespace else {}
        involved |= {"uid": ref.uid} if ref.uid else {}
        body = {
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.api.create(f"/api/v1/namespaces/{namespace}/events", body)
        except client.API_ERRORS as exc:
            log.warning("could not record event %s on %s %s: %s", reason, ref.kind, ref.name, exc)
