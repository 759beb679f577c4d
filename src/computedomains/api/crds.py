"""The CRDs, generated from the models: ``python -m computedomains.api.crds --write|--check``.

The schemas come from the field declarations in :mod:`computedomains.api.models`; this module
adds what belongs to the CRD rather than to a field (names, scope, subresources, printer
columns, versions and their conversion) and writes one Helm template per CRD into the ``crds``
subchart. The templates are plain YAML apart from the metadata lines that pull in the chart's
labels and annotations, each version's ``storage`` (from the ``storageVersion`` value) and the
conversion webhook's Service (``compute-domains-crds.webhookServiceName``, release namespace).

Both CRDs serve v1beta1 and v1beta2 and store v1beta2 by default. ComputeDomainClique has one
schema in both (conversion None); ComputeDomain converts through the webhook.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from computedomains.api import constants, models
from computedomains.api.schema import Model, openapi

DEFAULT_CHART_DIR = pathlib.Path("chart/charts/crds")
"""The subchart, relative to the repository root (where ``make crds`` runs)."""
HELPER_PREFIX = "compute-domains-crds"
"""Prefix of the subchart's named templates; Helm shares one namespace across all charts."""


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry (what ``kubectl get`` shows)."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""

    def to_dict(self) -> dict[str, str]:
        """The CRD form."""
        out = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        return out | ({"description": self.description} if self.description else {})


@dataclasses.dataclass(frozen=True)
class Version:
    """One served version of a CRD: the model that defines its schema, its printer columns."""

    name: str
    model: type[Model]
    printer_columns: tuple[PrinterColumn, ...] = ()


@dataclasses.dataclass(frozen=True)
class Webhook:
    """The Service the API server calls to convert objects between versions."""

    service: str
    namespace: str


class Conversion(enum.StrEnum):
    """``spec.conversion.strategy`` of a CRD."""

    NONE = "None"
    """Only ``apiVersion`` changes: the versions share one schema."""
    WEBHOOK = "Webhook"
    """The conversion webhook converts (``api/conversion.py``, behind ``/convert``)."""


@dataclasses.dataclass(frozen=True)
class CustomResource:
    """One CRD: its versions (oldest first) plus CRD-level settings."""

    plural: str
    short_names: tuple[str, ...]
    status_subresource: bool
    versions: tuple[Version, ...]
    conversion: Conversion

    @property
    def model(self) -> type[Model]:
        """The model of the storage version (the one every component reads and writes)."""
        return self.version(constants.STORAGE_VERSION).model

    def version(self, name: str) -> Version:
        """The served version ``name``."""
        return next(v for v in self.versions if v.name == name)

    @property
    def kind(self) -> str:
        """The kind, from the models."""
        assert self.model.KIND is not None
        return self.model.KIND

    @property
    def name(self) -> str:
        """The CRD's object name, ``<plural>.<group>``."""
        return f"{self.plural}.{constants.GROUP}"

    @property
    def filename(self) -> str:
        """The template's file name (the incumbent's CRD file name, for familiarity)."""
        return f"{constants.GROUP}_{self.plural}.yaml"


# Declaring any column drops the implicit Age column, so each version lists it again.
_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")
_NODES = PrinterColumn("Nodes", ".status.nodesReady", description="Ready nodes / all nodes.")
COMPUTE_DOMAIN = CustomResource(
    plural=constants.COMPUTE_DOMAIN_PLURAL,
    # Neither name is a built-in short name; the cluster test checks discovery for clashes.
    short_names=("cd",),
    status_subresource=True,
    versions=(
        Version(
            constants.VERSION,
            models.ComputeDomain,
            (
                PrinterColumn("Status", ".status.status", description="Overall readiness."),
                _NODES,
                _AGE,
            ),
        ),
        Version(
            constants.VERSION_V1BETA2,
            models.ComputeDomainV1Beta2,
            (
                PrinterColumn(
                    "Ready",
                    '.status.conditions[?(@.type=="Ready")].status',
                    description="The Ready condition.",
                ),
                PrinterColumn(
                    "Reason",
                    '.status.conditions[?(@.type=="Ready")].reason',
                    description="Why the domain is (not) Ready.",
                ),
                _NODES,
                PrinterColumn(
                    "Placement", ".spec.placement.clique", description="Clique placement."
                ),
                _AGE,
            ),
        ),
    ),
    conversion=Conversion.WEBHOOK,
)
CLIQUE = CustomResource(
    plural=constants.CLIQUE_PLURAL,
    short_names=("cdclique",),
    # The daemons write the top-level `daemons` list; there is nothing to split off.
    status_subresource=False,
    versions=(
        Version(constants.VERSION, models.ComputeDomainClique),
        Version(constants.VERSION_V1BETA2, models.ComputeDomainCliqueV1Beta2),
    ),
    conversion=Conversion.NONE,
)
RESOURCES = (COMPUTE_DOMAIN, CLIQUE)
DEFAULT_WEBHOOK = Webhook(service="compute-domains-cd-webhook", namespace="compute-domains")
"""Where :func:`manifest` points the conversion by default (tests that run no chart)."""


def open_api_schema(version: Version) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``version``: the model's schema plus apiVersion and kind."""
    schema = openapi(version.model)
    schema["properties"] = {
        "apiVersion": {
            "type": "string",
            "description": "Versioned schema of this object: group/version.",
        },
        "kind": {"type": "string", "description": "The object's kind, in CamelCase."},
        **schema["properties"],
    }
    return schema


def manifest(
    resource: CustomResource,
    *,
    storage_version: str = constants.STORAGE_VERSION,
    webhook: Webhook = DEFAULT_WEBHOOK,
) -> dict[str, Any]:
    """The CustomResourceDefinition, without the chart's labels and annotations.

    The conversion webhook gets no caBundle: the webhook injects it at runtime, so neither
    Helm nor Argo CD owns (and fights over) that field.
    """
    versions = []
    for v in resource.versions:
        version: dict[str, Any] = {
            "name": v.name,
            "served": True,
            "storage": v.name == storage_version,
            "schema": {"openAPIV3Schema": open_api_schema(v)},
        }
        if resource.status_subresource:
            version["subresources"] = {"status": {}}
        if v.printer_columns:
            version["additionalPrinterColumns"] = [c.to_dict() for c in v.printer_columns]
        versions.append(version)
    names: dict[str, Any] = {
        "kind": resource.kind,
        "listKind": f"{resource.kind}List",
        "plural": resource.plural,
        "singular": resource.kind.lower(),
    }
    if resource.short_names:
        names["shortNames"] = list(resource.short_names)
    conversion: dict[str, Any] = {"strategy": resource.conversion.value}
    if resource.conversion is Conversion.WEBHOOK:
        conversion["webhook"] = {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {
                    "name": webhook.service,
                    "namespace": webhook.namespace,
                    "path": constants.CONVERSION_PATH,
                    "port": 443,
                }
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.name},
        "spec": {
            "group": constants.GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": versions,
            "conversion": conversion,
        },
    }


# Stand-ins the generator dumps as plain YAML and then swaps for Helm expressions.
_TEMPLATED = {
    "__WEBHOOK_SERVICE__": f'{{{{ include "{HELPER_PREFIX}.webhookServiceName" . }}}}',
    "__RELEASE_NAMESPACE__": "{{ .Release.Namespace }}",
    **{
        f"__STORAGE_{v}__": f"{{{{ eq .Values.storageVersion {json.dumps(v)} }}}}"
        for v in (constants.VERSION, constants.VERSION_V1BETA2)
    },
}


def template(resource: CustomResource) -> str:
    """The Helm template of ``resource``'s CRD, as committed in the subchart."""
    crd = manifest(
        resource, webhook=Webhook(service="__WEBHOOK_SERVICE__", namespace="__RELEASE_NAMESPACE__")
    )
    for version in crd["spec"]["versions"]:
        version["storage"] = f"__STORAGE_{version['name']}__"
    head = f"""\
{{{{- /* Generated by `make crds` from computedomains.api.models; do not edit. */ -}}}}
apiVersion: {crd["apiVersion"]}
kind: {crd["kind"]}
metadata:
  name: {resource.name}
  labels:
    {{{{- include "{HELPER_PREFIX}.labels" . | nindent 4 }}}}
  annotations:
    {{{{- include "{HELPER_PREFIX}.annotations" . | nindent 4 }}}}
"""
    body = yaml.safe_dump({"spec": crd["spec"]}, sort_keys=True, width=100)
    for stand_in, expression in _TEMPLATED.items():
        body = body.replace(stand_in, expression)
    return head + body


def stale_templates(chart_dir: pathlib.Path) -> dict[pathlib.Path, str]:
    """Template path → generated text, for each template in ``chart_dir`` that differs."""
    wanted = {chart_dir / "templates" / r.filename: template(r) for r in RESOURCES}
    return {
        path: text
        for path, text in wanted.items()
        if not path.is_file() or path.read_text() != text
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Write the CRD templates into the subchart, or with ``--check`` report stale ones."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the CRD templates")
    mode.add_argument("--check", action="store_true", help="fail if a CRD template is stale")
    parser.add_argument(
        "--chart-dir",
        type=pathlib.Path,
        default=DEFAULT_CHART_DIR,
        help=f"the crds subchart (default {DEFAULT_CHART_DIR})",
    )
    args = parser.parse_args(argv)
    stale = stale_templates(args.chart_dir)
    if args.check:
        for path in stale:
            print(f"stale CRD template: {path}; run `make crds`")
        return 1 if stale else 0
    for path, text in stale.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
