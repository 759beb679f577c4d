"""The Python side of the image: the lock file, pip's cross-install, wheel tags, the script.

pip installs for the target (``--platform``, ``--python-version``, ``--implementation``,
``--only-binary``) into ``--target``, so arm64 wheels install on any host without running
them. Every file is hash-checked: the dependencies against ``image/requirements.lock``, the
product's wheel against the hash of the file just built.
"""

from __future__ import annotations

import configparser
import dataclasses
import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping

from packaging import requirements, utils

from cdsim.image import arch as arch_
from cdsim.image import errors, spec

LOCK = pathlib.PurePosixPath("image/requirements.lock")
"""The lock file, relative to the repository root: it travels with the revision it pins."""
PYTHON_VERSION = "3.11"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


class WheelError(errors.ImageError):
    """Installing or checking the wheels failed; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Tag:
    """One ``Tag:`` line of a wheel's ``WHEEL`` file."""

    interpreter: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, text: str) -> Tag:
        """``cp311-abi3-manylinux_2_17_x86_64`` → its three parts."""
        interpreter, abi, platform = text.strip().split("-", 2)
        return cls(interpreter, abi, platform)

    def runs_on(self, arch: arch_.Arch) -> bool:
        """True when this tag fits CPython 3.11 on ``arch``."""
        if not arch.accepts_platform_tag(self.platform):
            return False
        if self.interpreter in ("py3", "py311", "cp311"):
            return True
        cpython = re.fullmatch(r"cp3(\d+)", self.interpreter)
        return self.abi == "abi3" and cpython is not None and int(cpython.group(1)) <= 11


def locked(text: str) -> dict[str, str]:
    """``normalized name → version`` pinned by a lock file's text."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[utils.canonicalize_name(match.group(1))] = match.group(2)
    return pins


def target_environment(arch: arch_.Arch) -> dict[str, str]:
    """The marker environment of Debian's python3.11 on ``arch``."""
    return {
        "implementation_name": "cpython",
        "platform_machine": arch.machine,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "python_version": PYTHON_VERSION,
        "python_full_version": PYTHON_VERSION + ".2",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def unmet(requires: Iterable[str], pins: Mapping[str, str], *, arch: arch_.Arch) -> list[str]:
    """The product's ``Requires-Dist`` entries the lock does not satisfy on ``arch``."""
    environment = target_environment(arch)
    problems: list[str] = []
    for line in requires:
        requirement = requirements.Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = utils.canonicalize_name(requirement.name)
        version = pins.get(name)
        if version is None:
            problems.append(f"{requirement} is not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} is not met by the locked {name}=={version}")
    return problems


def lock_markers(text: str) -> list[str]:
    """Lock lines with environment markers: pip would judge them by the host, not the target."""
    return [line for line in text.splitlines() if _PIN.match(line) and ";" in line]


def pip_argv(arch: arch_.Arch, target: pathlib.Path) -> list[str]:
    """The pip command that cross-installs for ``arch`` (the requirements are appended)."""
    argv = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-compile", "--no-deps", "--only-binary=:all:", "--target", str(target),
        "--python-version", PYTHON_VERSION, "--implementation", "cp",
    ]  # fmt: skip
    for platform in arch.pip_platforms():
        argv += ["--platform", platform]
    return argv


def sha256(path: pathlib.Path) -> str:
    """Hex SHA-256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install(
    arch: arch_.Arch, *, lock: pathlib.Path, wheel: pathlib.Path, root: pathlib.Path
) -> None:
    """Install the locked dependencies and the product's wheel into ``root``'s site-packages.

    Scripts pip writes under ``--target`` name the host's interpreter; they are removed, and
    the product's console script is written for the image's.
    """
    site = root / spec.SITE_PACKAGES
    site.mkdir(parents=True, exist_ok=True)
    _pip([*pip_argv(arch, site), "--require-hashes", "-r", str(lock)], arch)
    name, version = wheel.name.split("-")[:2]
    pinned = wheel.with_name(f"{name}.requirements.txt")
    pinned.write_text(f"{name}=={version} --hash=sha256:{sha256(wheel)}\n")
    _pip(
        [
            *pip_argv(arch, site),
            "--no-index",
            "--find-links",
            str(wheel.parent),
            "--require-hashes",
            "-r",
            str(pinned),
        ],
        arch,
    )
    shutil.rmtree(site / "bin", ignore_errors=True)
    for record in sorted(site.glob("*.dist-info/RECORD")):
        record.write_text(without_scripts(record.read_text()))
    for command, (module, function) in console_scripts(site).items():
        script = root / spec.SCRIPTS / command
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(spec.console_script(module, function))
        script.chmod(0o755)


def without_scripts(record: str) -> str:
    """A ``RECORD`` without the scripts pip wrote outside site-packages (``../``).

    Those scripts are removed, and their hashes depend on the build host's interpreter path,
    which would make two builds of one revision differ.
    """
    kept = [line for line in record.splitlines(keepends=True) if not line.startswith("../")]
    return "".join(kept)


def _pip(argv: list[str], arch: arch_.Arch) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1200)
    if done.returncode != 0:
        raise WheelError(
            f"pip install ({arch.name}) exited {done.returncode}:\n"
            + (done.stdout + done.stderr).strip()[-3000:]
        )


def console_scripts(site: pathlib.Path) -> dict[str, tuple[str, str]]:
    """``command → (module, function)`` of the product's console scripts."""
    scripts: dict[str, tuple[str, str]] = {}
    for entry_points in sorted(site.glob("compute_domains-*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser()
        parser.read_string(entry_points.read_text())
        if parser.has_section("console_scripts"):
            for command, target in parser.items("console_scripts"):
                module, _, function = target.partition(":")
                scripts[command] = (module.strip(), function.strip())
    if not scripts:
        raise WheelError(f"no console script of compute-domains under {site}")
    return scripts


def requires_dist(metadata: str) -> list[str]:
    """The ``Requires-Dist`` values of a wheel's ``METADATA`` text."""
    return [
        line.partition(":")[2].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def installed_tags(site: pathlib.Path) -> dict[str, list[Tag]]:
    """``dist-info folder → its tags`` for every wheel installed under ``site``."""
    return {
        wheel.parent.name: [
            Tag.parse(line.partition(":")[2])
            for line in wheel.read_text().splitlines()
            if line.startswith("Tag:")
        ]
        for wheel in sorted(site.glob("*.dist-info/WHEEL"))
    }


def tag_problems(tags: Mapping[str, list[Tag]], arch: arch_.Arch) -> list[str]:
    """Wheels whose tags name another machine, or none that fits CPython 3.11 on ``arch``."""
    problems: list[str] = []
    for dist, dist_tags in tags.items():
        foreign = [t for t in dist_tags if not arch.accepts_platform_tag(t.platform)]
        if foreign or not any(t.runs_on(arch) for t in dist_tags):
            shown = ", ".join(f"{t.interpreter}-{t.abi}-{t.platform}" for t in dist_tags)
            problems.append(f"{dist} is tagged {shown or 'nothing'}, not for {arch.name}")
    return problems


def marker_free(text: str) -> None:
    """Refuse a lock whose pins carry markers (see :func:`lock_markers`)."""
    found = lock_markers(text)
    if found:
        raise WheelError(
            "the lock has environment markers, which pip evaluates for the build host, not "
            f"the image: {found[:3]}; regenerate it with `make lock`"
        )
