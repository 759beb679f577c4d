"""The wheel builds and installs as the image installs it, and carries the product alone."""

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
        "computedomains/drapb/dra_v1_pb2.py",
    ):
        assert expected in names, f"{expected} missing from {wheel.name}"
    assert not any(n.startswith(("tests/", "hooks/", "node-init/")) for n in names)
    # The simulator (cluster, fake IMEX, fake NVML, tool and image builders) is test-only.
    shipped_sim = [n for n in names if n.startswith(("cdsim/", "computedomains/sim/"))]
    assert shipped_sim == [], f"{wheel.name} ships the simulator: {shipped_sim[:5]}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "computedomains = computedomains.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_installed_wheel_runs_its_console_script(
    wheel: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    venv = tmp_path / "venv"
    # This pip installs into the bare venv; no bytecode, as the image's install writes none
    # (it compiles its own tree afterwards): compiling the dependencies doubled the time.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    subprocess.run(
        [
            sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install",
            "--quiet", "--no-compile", str(wheel),
        ],
        check=True,
        timeout=600,
    )  # fmt: skip
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
            "import importlib.util, computedomains.hooks, computedomains.nodeinit\n"
            "print('ok' if importlib.util.find_spec('cdsim') is None else 'simulator shipped')",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert imported.stdout.strip() == "ok"
