"""Server-side dry runs with strict field validation: is an object valid as it is?"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

FIELD_MANAGER = "compute-domains-chart-schema-test"


def reason(exc: ApiException) -> str:
    """The API server's own message for a refused request."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return f"{exc.status} {exc.body}"
    return f"{exc.status} {body.get('reason', '')}: {body.get('message', exc.body)}"


def dry_run(dyn: Any, obj: dict[str, Any], namespace: str) -> str | None:
    """Create ``obj`` with dryRun=All and strict field validation; the failure, or None."""
    try:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        return f"the API server serves no {obj['kind']} in {obj['apiVersion']}"
    ns = namespace if resource.namespaced else None
    try:
        dyn.create(
            resource,
            body=obj,
            namespace=ns,
            dry_run="All",
            query_params=[("fieldValidation", "Strict")],
        )
    except ApiException as exc:
        if exc.status != 409:
            return reason(exc)
    else:
        return None
    try:  # it exists already: validate the same object as an update
        dyn.server_side_apply(
            resource,
            body=obj,
            name=obj["metadata"]["name"],
            namespace=ns,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            dry_run="All",
            query_params=[("fieldValidation", "Strict")],
        )
    except ApiException as exc:
        return f"(exists; as an update) {reason(exc)}"
    return None
