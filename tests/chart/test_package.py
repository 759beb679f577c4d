"""The chart as it is published: packaged, with the metadata registries and Artifact Hub read,
and NOTES that point nowhere a packaged chart does not reach."""

from __future__ import annotations

import pathlib
import re
import tarfile

import pytest
import yaml

from tests.chart import rendering as r
from tests.support import helm


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The chart packaged by helm 3 (what `helm push` sends): its files by path."""
    out = tmp_path_factory.mktemp("package")
    h = r.helm_for("helm3", out / "home")
    h.run("package", str(r.CHART), "--destination", str(out))
    (archive,) = out.glob("*.tgz")
    with tarfile.open(archive) as tar:
        return {
            member.name.split("/", 1)[1]: tar.extractfile(member).read()
            for member in tar.getmembers()
            if member.isfile()
        }


def test_the_package_holds_the_chart_and_its_crds_subchart(package: dict[str, bytes]) -> None:
    for expected in ("Chart.yaml", "values.yaml", "values.schema.json", "templates/NOTES.txt",
                     "charts/crds/Chart.yaml", "README.md"):  # fmt: skip
        assert expected in package, expected


def test_chart_metadata_for_registries_and_artifact_hub(package: dict[str, bytes]) -> None:
    chart = yaml.safe_load(package["Chart.yaml"])
    assert chart["home"].startswith("https://") and chart["sources"] and chart["maintainers"]
    assert chart["icon"].startswith("https://")
    notes = chart["annotations"]
    assert notes["artifacthub.io/license"] == "Apache-2.0"
    (image,) = yaml.safe_load(notes["artifacthub.io/images"])
    assert image["image"].endswith(f":{chart['appVersion']}"), "the image tag moves with appVersion"
    assert image["platforms"] == ["linux/amd64", "linux/arm64"]
    crds = {c["name"] for c in yaml.safe_load(notes["artifacthub.io/crds"])}
    templates = {
        name
        for path, text in package.items()
        if path.startswith("charts/crds/templates/")
        for name in re.findall(r"^  name: ([\w.]+\.resource\.nvidia\.com)$", text.decode(), re.M)
    }
    assert crds == templates
    assert {c["kind"] for c in yaml.safe_load(notes["artifacthub.io/changes"])} <= {
        "added", "changed", "deprecated", "removed", "fixed", "security"
    }  # fmt: skip
    # A pre-release version says so to Artifact Hub as well.
    assert (notes.get("artifacthub.io/prerelease") == "true") == ("-" in chart["version"])


def test_the_icon_the_chart_names_is_in_the_repository() -> None:
    icon = pathlib.Path(r.REPO / "docs" / "icon.svg")
    assert r.CHART_METADATA["icon"].endswith("/docs/icon.svg") and icon.read_text().startswith(
        "<svg"
    )


def test_notes_name_no_file_of_the_repository(package: dict[str, bytes]) -> None:
    """A packaged chart has no examples/ or docs/: NOTES links to the project's home instead."""
    notes = package["templates/NOTES.txt"].decode()
    relative = re.findall(r"(?<![\w/.}])(?:examples|docs|values)/[\w./-]+", notes)
    assert relative == [], relative
    assert "{{ .Chart.Home }}/blob/main/docs/upgrade.md" in notes


def test_hook_jobs_print_their_log_when_they_fail_and_containers_fall_back_to_logs(
    h: helm.Helm,
) -> None:
    objects = r.template(h)
    jobs = r.of_kind(objects, "Job")
    assert jobs
    for job in jobs:
        assert job["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed"
    for obj in objects:
        spec = (obj.get("spec") or {}).get("template", {}).get("spec")
        if not spec:
            continue
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            assert container["terminationMessagePolicy"] == "FallbackToLogsOnError", (
                f"{obj['kind']} {obj['metadata']['name']} container {container['name']}"
            )
