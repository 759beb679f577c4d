"""Build the test tools (control plane, kwok, helm) from their Go modules, once, into a cache.

Nothing here downloads a release binary: every tool is compiled from its Go module through
the module proxy into ``<cache>/tools/<name>-<version>/`` and reused from then on. A
prebuilt set named by ``KUBEBUILDER_ASSETS`` or ``TEST_ASSET_<BINARY>`` wins over the cache.
Versions live in ``tool-versions.toml`` next to this module. The fake ``libnvidia-ml.so.1``
(:mod:`cdsim.fakenvml`) is one of the tools too: compiled with ``gcc`` into
``<cache>/tools/fakenvml-<hash of its source>/``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence

from cdsim import fakenvml

VERSIONS_FILE = pathlib.Path(__file__).with_name("tool-versions.toml")
KUBE_VERSION_ENV = "COMPUTE_DOMAINS_KUBE_VERSION"
CACHE_ENV = "COMPUTE_DOMAINS_CACHE"
_COMPLETE_STAMP = ".complete"


KUBERNETES_MODULE = ("kubernetes", "kubectl")
"""Tools built from k8s.io/kubernetes (its staging modules replaced, its version stamped)."""


class ToolError(RuntimeError):
    """A tool could not be found or built; the message says which, which version and why."""


@dataclasses.dataclass(frozen=True)
class Tool:
    """One Go-built tool: its cache name, version and the binaries one build yields."""

    name: str
    version: str
    binaries: tuple[str, ...]
    packages: tuple[str, ...]
    """Go main packages, in the same order as ``binaries``."""

    @property
    def key(self) -> str:
        """Cache directory name, e.g. ``kubernetes-v1.36.3``."""
        return f"{self.name}-{self.version}"


def asset_env_name(binary: str, tool: str) -> str:
    """``TEST_ASSET_*`` variable naming a prebuilt binary (``helm`` is per major version)."""
    stem = tool if tool.startswith("helm") else binary
    return "TEST_ASSET_" + re.sub(r"[^A-Z0-9]", "_", stem.upper())


def cache_root(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """The cache folder outside the repository (``$COMPUTE_DOMAINS_CACHE`` or ``~/.cache``)."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return pathlib.Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "compute-domains"


def load_versions(path: pathlib.Path = VERSIONS_FILE) -> dict[str, str]:
    """Read the pinned tool versions."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    return {str(k): str(v) for k, v in data.items()}


def tools_for(versions: Mapping[str, str]) -> dict[str, Tool]:
    """The tool set for a version map (kubernetes version already resolved to a patch)."""
    kube = versions["kubernetes"]
    return {
        "kubernetes": Tool(
            name="kubernetes",
            version=kube,
            binaries=("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
            packages=tuple(
                f"k8s.io/kubernetes/cmd/{b}"
                for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
            ),
        ),
        # kubectl too, only to apply rendered manifests as a GitOps pipeline would: a tool of
        # its own, so the control plane's cached build stays valid.
        "kubectl": Tool("kubectl", kube, ("kubectl",), ("k8s.io/kubernetes/cmd/kubectl",)),
        "etcd": Tool("etcd", versions["etcd"], ("etcd",), ("go.etcd.io/etcd/server/v3",)),
        "kwok": Tool("kwok", versions["kwok"], ("kwok",), ("sigs.k8s.io/kwok/cmd/kwok",)),
        "helm3": Tool("helm3", versions["helm3"], ("helm",), ("helm.sh/helm/v3/cmd/helm",)),
        "helm4": Tool("helm4", versions["helm4"], ("helm",), ("helm.sh/helm/v4/cmd/helm",)),
    }


def newest_patch(minor: str, available: Sequence[str]) -> str:
    """Pick the newest released ``vX.Y.Z`` of ``minor`` ("1.36") from a version list."""
    want = minor.removeprefix("v")
    found: list[tuple[int, str]] = []
    for v in available:
        m = re.fullmatch(r"v(\d+\.\d+)\.(\d+)", v)
        if m and m.group(1) == want:
            found.append((int(m.group(2)), v))
    if not found:
        raise ToolError(f"the Go module proxy serves no k8s.io/kubernetes release of {minor}")
    return max(found)[1]


@dataclasses.dataclass
class ToolBox:
    """Finds or builds the tools; one per process, built from settings, not import time."""

    versions: dict[str, str]
    cache: pathlib.Path
    env: Mapping[str, str]
    log: Callable[[str], None]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ToolBox:
        """Versions from the pinned file, overrides and cache location from the environment."""
        env = dict(os.environ if env is None else env)
        versions = load_versions()
        if env.get(KUBE_VERSION_ENV):
            versions["kubernetes"] = env[KUBE_VERSION_ENV]
        return cls(versions=versions, cache=cache_root(env), env=env, log=_stderr)

    # -- lookup ---------------------------------------------------------------------------

    def tool(self, name: str) -> Tool:
        """The tool called ``name`` with its version resolved (a bare minor becomes a patch)."""
        versions = dict(self.versions)
        kube = versions["kubernetes"]
        if re.fullmatch(r"v?\d+\.\d+", kube):
            versions["kubernetes"] = self._resolve_minor(kube)
            self.versions["kubernetes"] = versions["kubernetes"]
        try:
            return tools_for(versions)[name]
        except KeyError:
            raise ToolError(f"unknown tool {name!r}") from None

    def prebuilt(self, tool: Tool, binary: str) -> pathlib.Path | None:
        """A binary given by ``TEST_ASSET_*`` or ``KUBEBUILDER_ASSETS``, if any."""
        explicit = self.env.get(asset_env_name(binary, tool.name))
        if explicit:
            path = pathlib.Path(explicit)
            if not os.access(path, os.X_OK):
                raise ToolError(
                    f"{asset_env_name(binary, tool.name)}={explicit} is not an executable file"
                )
            return path
        assets = self.env.get("KUBEBUILDER_ASSETS")
        if assets and not tool.name.startswith("helm"):
            candidate = pathlib.Path(assets) / binary
            if os.access(candidate, os.X_OK):
                return candidate
        return None

    def cached_dir(self, tool: Tool) -> pathlib.Path:
        """Where a build of ``tool`` lives in the cache."""
        return self.cache / "tools" / tool.key

    def is_cached(self, tool: Tool) -> bool:
        """True when a complete build of ``tool`` is in the cache."""
        return (self.cached_dir(tool) / _COMPLETE_STAMP).exists()

    def path(self, name: str, binary: str | None = None) -> pathlib.Path:
        """Path of a binary of tool ``name``, building the tool first when it is missing."""
        if name == fakenvml.TOOL:
            return self.nvml_library()
        tool = self.tool(name)
        binary = binary or tool.binaries[0]
        given = self.prebuilt(tool, binary)
        if given is not None:
            return given
        if not self.is_cached(tool):
            self.build(tool)
        return self.cached_dir(tool) / binary

    def ensure_all(self, names: Sequence[str] | None = None) -> dict[str, pathlib.Path]:
        """Make every tool available; returns binary name (helm as helm3/helm4) → path."""
        result: dict[str, pathlib.Path] = {}
        for name in names or [*tools_for(self.versions).keys(), fakenvml.TOOL]:
            if name == fakenvml.TOOL:
                result[name] = self.nvml_library()
                continue
            tool = self.tool(name)
            for binary in tool.binaries:
                label = tool.name if tool.name.startswith("helm") else binary
                result[label] = self.path(name, binary)
        return result

    def nvml_library(self) -> pathlib.Path:
        """The fake ``libnvidia-ml.so.1`` of the current source, compiled first when missing.

        Keyed by a hash of the source and flags, so an edited source builds anew. Builders
        racing each other (test workers) each compile into a folder of their own; the first
        rename wins and the others use it.
        """
        key = f"{fakenvml.TOOL}-{fakenvml.digest()}"
        final = self.cache / "tools" / key
        if (final / _COMPLETE_STAMP).exists():
            return final / fakenvml.LIBRARY
        started = time.monotonic()
        self.log(f"[tools] building the fake {fakenvml.LIBRARY} ({key})")
        staging = self.cache / "tools" / f".{key}.{os.getpid()}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            fakenvml.compile_library(staging / fakenvml.LIBRARY)
        except fakenvml.FakeNvmlError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ToolError(str(exc)) from None
        (staging / _COMPLETE_STAMP).write_text(f"{key}\n")
        try:
            staging.rename(final)
        except OSError:  # another builder was first (or left a broken folder: replace it)
            if not (final / _COMPLETE_STAMP).exists():
                shutil.rmtree(final, ignore_errors=True)
                staging.rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        self.log(f"[tools] {key} ready in {final} ({_elapsed(started)})")
        return final / fakenvml.LIBRARY

    # -- building -------------------------------------------------------------------------

    def build(self, tool: Tool) -> None:
        """Compile ``tool`` from its Go module into the cache (atomically: all or nothing)."""
        started = time.monotonic()
        self.log(f"[tools] building {tool.name} {tool.version} ({', '.join(tool.binaries)})")
        work = self.cache / "build" / tool.key
        work.mkdir(parents=True, exist_ok=True)
        (work / "go.mod").write_text(self._wrapper_gomod(tool))
        (work / "go.sum").touch()
        for package in tool.packages:
            self._go(tool, work, "get", "-tool", f"{package}@{tool.version}")
        staging = self.cache / "tools" / f".{tool.key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        ldflags = " ".join(["-s", "-w", *self._version_ldflags(tool, work)])
        for binary, package in zip(tool.binaries, tool.packages, strict=True):
            self.log(f"[tools]   go build {binary} ({_elapsed(started)})")
            self._go(
                tool,
                work,
                "build",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                str(staging / binary),
                package,
            )
        for binary in tool.binaries:
            self._check_version(tool, staging / binary)
        (staging / _COMPLETE_STAMP).write_text(f"{tool.key}\n")
        final = self.cached_dir(tool)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        self.log(f"[tools] {tool.key} ready in {final} ({_elapsed(started)})")

    def _wrapper_gomod(self, tool: Tool) -> str:
        lines = ["module computedomains.local/toolbuild", "", "go 1.26", ""]
        if tool.name in KUBERNETES_MODULE:
            # k8s.io/kubernetes points its staging modules at ./staging; a wrapper module must
            # replace each with the published v0.X.Y twin of v1.X.Y.
            staging_version = "v0." + tool.version.removeprefix("v1.")
            for module in self._kubernetes_staging_modules(tool):
                lines.append(f"replace {module} => {module} {staging_version}")
        return "\n".join(lines) + "\n"

    def _kubernetes_staging_modules(self, tool: Tool) -> list[str]:
        out = self._go(
            tool, self.cache, "mod", "download", "-json", f"k8s.io/kubernetes@{tool.version}"
        )
        match = re.search(r'"GoMod":\s*"([^"]+)"', out)
        if not match:
            raise ToolError(f"building kubernetes {tool.version}: no go.mod in `go mod download`")
        gomod = pathlib.Path(match.group(1)).read_text()
        return re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, re.MULTILINE)

    def _version_ldflags(self, tool: Tool, work: pathlib.Path) -> list[str]:
        """``-X`` flags so each binary reports its real version instead of a dev default."""
        v = tool.version
        if tool.name in KUBERNETES_MODULE:
            major, minor = v.removeprefix("v").split(".")[:2]
            flags = []
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [
                    f"-X {pkg}.gitVersion={v}",
                    f"-X {pkg}.gitMajor={major}",
                    f"-X {pkg}.gitMinor={minor}",
                    f"-X {pkg}.gitTreeState=clean",
                ]
            return flags
        if tool.name == "kwok":
            return [f"-X sigs.k8s.io/kwok/pkg/consts.Version={v}"]
        if tool.name.startswith("helm"):
            major = tool.name.removeprefix("helm")
            flags = [f"-X helm.sh/helm/v{major}/internal/version.version={v}"]
            client_go = self._required_version(work, "k8s.io/client-go")
            if client_go and major == "3":
                # helm 3 takes its default Capabilities.KubeVersion from these, not from go.mod.
                kminor = client_go.removeprefix("v0.").split(".")[0]
                flags += [
                    "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
                    f"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={kminor}",
                    "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
                    f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={kminor}",
                ]
            return flags
        return []

    def _required_version(self, work: pathlib.Path, module: str) -> str | None:
        gomod = (work / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod, re.MULTILINE)
        return match.group(1) if match else None

    def _check_version(self, tool: Tool, binary: pathlib.Path) -> None:
        args = (
            ["version", "--short"] if tool.name.startswith("helm")
            else ["version", "--client"] if tool.name == "kubectl"
            else ["--version"]
        )  # fmt: skip
        out = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, timeout=60, check=False
        )
        text = out.stdout + out.stderr
        if tool.version.removeprefix("v") not in text:
            raise ToolError(
                f"built {binary.name} of {tool.key} but `{binary.name} {' '.join(args)}` "
                f"reports {text.strip()!r}, not {tool.version}"
            )

    def _resolve_minor(self, minor: str) -> str:
        out = self._go(
            Tool("kubernetes", minor, (), ()),
            self.cache,
            "list",
            "-m",
            "-versions",
            "k8s.io/kubernetes",
        )
        version = newest_patch(minor, out.split()[1:])
        self.log(f"[tools] kubernetes {minor} resolves to {version}")
        return version

    def _go(self, tool: Tool, cwd: pathlib.Path, *args: str) -> str:
        cwd.mkdir(parents=True, exist_ok=True)
        env = dict(self.env)
        env.setdefault("GOFLAGS", "-buildvcs=false")
        env["GOTOOLCHAIN"] = env.get("GOTOOLCHAIN", "local")
        env["CGO_ENABLED"] = "0"
        try:
            proc = subprocess.run(
                ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            raise ToolError(
                f"building {tool.name} {tool.version} needs Go >= 1.26 on PATH; `go` was not found"
            ) from None
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-25:])
            raise ToolError(
                f"building {tool.name} {tool.version} failed: `go {' '.join(args)}` "
                f"exited {proc.returncode}:\n{tail}"
            )
        return proc.stdout


def _elapsed(started: float) -> str:
    return f"{time.monotonic() - started:.0f}s"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
