"""Record Kubernetes Events (core/v1) on objects users look at: pods, claims, nodes, CDs."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid

from kubernetes import client
from kubernetes.client.exceptions import ApiException

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

    api: client.ApiClient
    component: str
    host: str = ""

    def emit(self, ref: ObjectRef, *, reason: str, message: str, warning: bool = False) -> None:
        """Create one Event about ``ref`` (namespaced objects get it in their namespace)."""
        now = datetime.datetime.now(datetime.UTC)
        namespace = ref.namespace or "default"
        body = {
            "metadata": {
                "name": f"{ref.name}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace or None,
                "uid": ref.uid or None,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component, "host": self.host or None},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            client.CoreV1Api(self.api).create_namespaced_event(namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            log.warning(
                "could not record event %s on %s %s: %s", reason, ref.kind, ref.name, exc.reason
            )
