"""The wheel builds and installs the way the Dockerfile does, and carries every package."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("compute_domains-*.whl")
    return built


def test_wheel_maps_hooks_and_node_init_into_the_package(wheel: pathlib.Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "computedomains/cli.py",
        "computedomains/hooks/__init__.py",
        "computedomains/nodeinit/__init__.py",
        "computedomains/sim/tool-versions.toml",
        "computedomains/sim/kwok-stages.yaml",
    ):
        assert expected in names, f"{expected} missing from {wheel.name}"
    assert not any(n.startswith(("tests/", "hooks/", "node-init/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "computedomains = computedomains.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_installed_wheel_runs_its_console_script(
    wheel: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", str(wheel)], check=True, timeout=600
    )
    version = subprocess.run(
        [str(venv / "bin/computedomains"), "--version"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"computedomains {declared}"
    imported = subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "import computedomains.hooks, computedomains.nodeinit, computedomains.sim.cluster\n"
            "print('ok')",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert imported.stdout.strip() == "ok"
