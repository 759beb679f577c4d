"""The benchmarks' process accounting: which part of the simulated cluster a command line is."""

from __future__ import annotations

import pathlib
import shlex

import pytest

from cdsim.fakeimex import install
from cdsim.image import spec
from tests.benchmarks import footprint


def _exec_argv(script: pathlib.Path, *args: str) -> list[str]:
    """The command line the kernel makes of the installed script's ``#!`` line, in /proc."""
    interpreter = shlex.split(script.read_text().splitlines()[0].removeprefix("#!"))
    return [*interpreter, str(script), *args]


def test_the_installed_fake_imex_programs_are_recognised(tmp_path: pathlib.Path) -> None:
    daemon, ctl = install.install(tmp_path)
    assert footprint.component_of(_exec_argv(daemon, "-c", "/cfg")) == "fake nvidia-imex"
    assert footprint.component_of(_exec_argv(ctl, "-q", "-c", "/cfg")) == "fake nvidia-imex-ctl"


@pytest.mark.parametrize(
    ("argv", "component"),
    [
        (["/opt/bin/kube-apiserver", "--secure-port=1"], "kube-apiserver"),
        (["python", "-m", "cdsim", "kubelet", "-c", "x"], "simulated kubelet"),
        (["python", "-m", "computedomains", "imex-agent", "-c", "x"], "imex-agent"),
        # The image's entrypoint script under runc, as the kernel runs its #! line.
        ([spec.PYTHON, f"/{spec.SCRIPTS}/computedomains", "kubelet-plugin"], "kubelet-plugin"),
        (["runc", "--root", "/x", "run", "--bundle", "/b", "c1"], "runc"),
        (["python", "-S", "-c", "print(1)"], ""),
        (["sh", "-c", "sleep 1"], ""),
        ([], ""),
    ],
)
def test_component_of(argv: list[str], component: str) -> None:
    assert footprint.component_of(argv) == component
