"""The CRDs, generated from the models: ``python -m computedomains.api.crds --write|--check``.

The schemas come from the field declarations in :mod:`computedomains.api.models`; this module
adds what belongs to the CRD rather than to a field (names, scope, subresources, printer
columns) and writes one Helm template per CRD into the ``crds`` subchart. The templates are
plain YAML apart from the metadata lines that pull in the chart's labels and annotations.
"""

from __future__ import annotations

import argparse
import dataclasses
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
class CustomResource:
    """One CRD: the model that defines its schema plus CRD-level settings."""

    model: type[Model]
    plural: str
    short_names: tuple[str, ...]
    status_subresource: bool
    printer_columns: tuple[PrinterColumn, ...] = ()

    @property
    def kind(self) -> str:
        """The kind, from the model."""
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


COMPUTE_DOMAIN = CustomResource(
    model=models.ComputeDomain,
    plural=constants.COMPUTE_DOMAIN_PLURAL,
    # Neither name is a built-in short name; the cluster test checks discovery for clashes.
    short_names=("cd",),
    status_subresource=True,
    printer_columns=(
        PrinterColumn("Status", ".status.status", description="Overall readiness."),
        PrinterColumn("Nodes", ".status.nodesReady", description="Ready nodes / all nodes."),
        # Declaring any column drops the implicit Age column, so it is listed again.
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    ),
)
CLIQUE = CustomResource(
    model=models.ComputeDomainClique,
    plural=constants.CLIQUE_PLURAL,
    short_names=("cdclique",),
    # The daemons write the top-level `daemons` list; there is nothing to split off.
    status_subresource=False,
)
RESOURCES = (COMPUTE_DOMAIN, CLIQUE)


def open_api_schema(resource: CustomResource) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``resource``: the model's schema plus apiVersion and kind."""
    schema = openapi(resource.model)
    schema["properties"] = {
        "apiVersion": {
            "type": "string",
            "description": "Versioned schema of this object: group/version.",
        },
        "kind": {"type": "string", "description": "The object's kind, in CamelCase."},
        **schema["properties"],
    }
    return schema


def manifest(resource: CustomResource) -> dict[str, Any]:
    """The CustomResourceDefinition, without the chart's labels and annotations."""
    version: dict[str, Any] = {
        "name": constants.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": open_api_schema(resource)},
    }
    if resource.status_subresource:
        version["subresources"] = {"status": {}}
    if resource.printer_columns:
        version["additionalPrinterColumns"] = [c.to_dict() for c in resource.printer_columns]
    names: dict[str, Any] = {
        "kind": resource.kind,
        "listKind": f"{resource.kind}List",
        "plural": resource.plural,
        "singular": resource.kind.lower(),
    }
    if resource.short_names:
        names["shortNames"] = list(resource.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.name},
        "spec": {
            "group": constants.GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def template(resource: CustomResource) -> str:
    """The Helm template of ``resource``'s CRD, as committed in the subchart."""
    crd = manifest(resource)
    head = f"""\
{{{{- /* Generated by `make crds` from computedomains.api.models; do not edit. */ -}}}}
apiVersion: {crd["apiVersion"]}
kind: {crd["kind"]}
metadata:
  name: {resource.name}
  labels:
    {{{{- include "{HELPER_PREFIX}.labels" . | nindent 4 }}}}
  {{{{- with include "{HELPER_PREFIX}.annotations" . }}}}
  annotations:
    {{{{- . | nindent 4 }}}}
  {{{{- end }}}}
"""
    body = yaml.safe_dump({"spec": crd["spec"]}, sort_keys=True, width=100)
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
