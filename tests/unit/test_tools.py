"""Tool resolution: versions, prebuilt overrides, cache layout and build errors."""

from __future__ import annotations

import pathlib
import stat

import pytest

from cdsim import tools


def _box(tmp_path: pathlib.Path, env: dict[str, str]) -> tools.ToolBox:
    return tools.ToolBox(
        versions=tools.load_versions(), cache=tmp_path / "cache", env=env, log=lambda _: None
    )


def _executable(path: pathlib.Path) -> pathlib.Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_versions_file_pins_every_tool() -> None:
    versions = tools.load_versions()
    assert set(versions) == {"kubernetes", "etcd", "kwok", "helm3", "helm4"}
    assert versions["kubernetes"].startswith("v1.36.")
    assert versions["etcd"].startswith("v3.6.")
    assert versions["helm3"].startswith("v3.") and versions["helm4"].startswith("v4.")


def test_newest_patch_of_a_minor() -> None:
    available = ["v1.36.0", "v1.36.3", "v1.36.10", "v1.37.1", "v1.36.11-rc.0", "v1.3.99"]
    assert tools.newest_patch("1.36", available) == "v1.36.10"
    assert tools.newest_patch("v1.37", available) == "v1.37.1"
    with pytest.raises(tools.ToolError, match=r"no k8s\.io/kubernetes release of 1\.40"):
        tools.newest_patch("1.40", available)


def test_asset_env_names() -> None:
    assert tools.asset_env_name("kube-apiserver", "kubernetes") == "TEST_ASSET_KUBE_APISERVER"
    assert tools.asset_env_name("etcd", "etcd") == "TEST_ASSET_ETCD"
    assert tools.asset_env_name("helm", "helm4") == "TEST_ASSET_HELM4"


def test_explicit_asset_wins_then_kubebuilder_assets_then_cache(tmp_path: pathlib.Path) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    _executable(assets / "etcd")
    mine = _executable(tmp_path / "my-apiserver")
    box = _box(
        tmp_path, {"KUBEBUILDER_ASSETS": str(assets), "TEST_ASSET_KUBE_APISERVER": str(mine)}
    )
    assert box.path("etcd") == assets / "etcd"
    assert box.path("kubernetes", "kube-apiserver") == mine

    kwok = box.tool("kwok")
    cached = box.cached_dir(kwok)
    cached.mkdir(parents=True)
    _executable(cached / "kwok")
    (cached / ".complete").write_text("")
    assert box.path("kwok") == cached / "kwok"


def test_asset_that_is_not_executable_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    box = _box(tmp_path, {"TEST_ASSET_ETCD": str(tmp_path / "missing")})
    with pytest.raises(
        tools.ToolError, match=r"TEST_ASSET_ETCD=.*missing is not an executable file"
    ):
        box.path("etcd")


def test_build_without_go_names_the_tool_and_version(tmp_path: pathlib.Path) -> None:
    box = _box(tmp_path, {"PATH": str(tmp_path / "empty")})
    with pytest.raises(tools.ToolError, match=r"building kwok v\d.* needs Go >= 1.26"):
        box.path("kwok")
    assert not box.is_cached(box.tool("kwok"))


def test_failed_go_build_reports_the_go_error(tmp_path: pathlib.Path) -> None:
    fake_go = tmp_path / "bin" / "go"
    fake_go.parent.mkdir()
    fake_go.write_text(
        "#!/bin/sh\n"
        "echo 'go: sigs.k8s.io/kwok@v9.9.9: reading at revision: unknown revision' >&2\n"
        "exit 1\n"
    )
    fake_go.chmod(0o755)
    box = _box(tmp_path, {"PATH": str(fake_go.parent)})
    box.versions["kwok"] = "v9.9.9"
    with pytest.raises(tools.ToolError) as failed:
        box.path("kwok")
    message = str(failed.value)
    assert "building kwok v9.9.9 failed" in message
    assert "unknown revision" in message
    assert not box.is_cached(box.tool("kwok"))
