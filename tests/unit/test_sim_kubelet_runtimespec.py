"""A pod's container as runc's configuration: argv, user, capabilities, root, mounts, devices."""

from __future__ import annotations

import pathlib

import pytest

from cdsim.kubelet import imagestore, runtimespec

IMAGE = imagestore.ImageConfig(entrypoint=("computedomains",), cmd=("--help",), user="65532")


@pytest.mark.parametrize(
    ("command", "args", "argv"),
    [
        ((), (), ["computedomains", "--help"]),
        ((), ("controller", "-v", "1"), ["computedomains", "controller", "-v", "1"]),
        (("sh", "-c"), (), ["sh", "-c"]),  # a command drops the image's CMD
        (("sh", "-c"), ("ls /",), ["sh", "-c", "ls /"]),
    ],
)
def test_command_and_args_combine_with_the_image_as_the_kubelet_combines_them(
    command: tuple[str, ...], args: tuple[str, ...], argv: list[str]
) -> None:
    assert runtimespec.process_args(command, args, IMAGE) == argv


def test_nothing_to_run_is_refused() -> None:
    with pytest.raises(runtimespec.RuntimeSpecError, match="no command specified"):
        runtimespec.process_args((), (), imagestore.ImageConfig())


@pytest.fixture
def rootfs(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        "computedomains:x:65532:65533:cd:/nonexistent:/usr/sbin/nologin\n"
    )
    (tmp_path / "etc/group").write_text("root:x:0:\nstaff:x:50:\n")
    return tmp_path


def test_the_user_comes_from_the_container_then_the_pod_then_the_image(
    rootfs: pathlib.Path,
) -> None:
    image = imagestore.ImageConfig(user="computedomains")
    assert runtimespec.identity({}, {}, image, rootfs) == runtimespec.Identity(65532, 65533)
    assert runtimespec.identity({}, {"runAsUser": 7}, image, rootfs).uid == 7
    chosen = runtimespec.identity(
        {"runAsUser": 0, "runAsGroup": 0}, {"runAsUser": 7, "fsGroup": 2000}, image, rootfs
    )
    assert chosen == runtimespec.Identity(0, 0, (2000,))
    named = imagestore.ImageConfig(user="computedomains:staff")
    assert runtimespec.identity({}, {}, named, rootfs) == runtimespec.Identity(65532, 50)


def test_run_as_non_root_refuses_a_root_user(rootfs: pathlib.Path) -> None:
    with pytest.raises(runtimespec.RuntimeSpecError, match="image will run as root"):
        runtimespec.identity({}, {"runAsNonRoot": True}, imagestore.ImageConfig(), rootfs)
    with pytest.raises(runtimespec.RuntimeSpecError, match="breaks non-root policy"):
        runtimespec.identity({"runAsUser": 0}, {"runAsNonRoot": True}, IMAGE, rootfs)


def test_an_image_user_missing_from_its_passwd_is_refused(rootfs: pathlib.Path) -> None:
    nobody = imagestore.ImageConfig(user="nobody")
    with pytest.raises(runtimespec.RuntimeSpecError, match="'nobody' is not in its /etc/passwd"):
        runtimespec.identity({}, {}, nobody, rootfs)
    # A runAsUser makes the image's user irrelevant, as in the kubelet.
    assert runtimespec.identity({"runAsUser": 7}, {}, nobody, rootfs).uid == 7
    with pytest.raises(runtimespec.RuntimeSpecError, match=r"non-numeric user \(nobody\)"):
        runtimespec.identity({}, {"runAsNonRoot": True}, nobody, rootfs)


def test_capabilities_start_from_containerds_defaults() -> None:
    assert runtimespec.capabilities({}) == runtimespec.DEFAULT_CAPABILITIES
    assert runtimespec.capabilities({"capabilities": {"drop": ["ALL"]}}) == frozenset()
    some = runtimespec.capabilities({"capabilities": {"drop": ["ALL"], "add": ["CAP_SYS_ADMIN"]}})
    assert some == {"SYS_ADMIN"}  # named adds come after the drops, as in containerd
    assert runtimespec.capabilities({"capabilities": {"add": ["SYS_ADMIN"], "drop": ["KILL"]}}) == (
        runtimespec.DEFAULT_CAPABILITIES - {"KILL"} | {"SYS_ADMIN"}
    )
    assert runtimespec.capabilities({"privileged": True}) == runtimespec.ALL_CAPABILITIES


def test_the_config_carries_the_root_binds_and_device_nodes(tmp_path: pathlib.Path) -> None:
    run = runtimespec.ContainerRun(
        rootfs=tmp_path / "merged",
        args=("ls", "/dev/nvidia-caps-imex-channels"),
        env=("PATH=/bin",),
        cwd="",
        user=runtimespec.Identity(0, 0, (2000,)),
        hostname="worker-0",
        readonly_root=True,
        capabilities=frozenset(),
        no_new_privileges=True,
        binds=(runtimespec.Bind(tmp_path / "proc", "/host-proc", readonly=True),),
        devices=(runtimespec.DeviceNode("/dev/nvidia-caps-imex-channels/channel3", 235, 3),),
    )
    config = runtimespec.config(run)
    assert config["root"] == {"path": str(tmp_path / "merged"), "readonly": True}
    assert config["process"]["cwd"] == "/"
    assert config["process"]["user"] == {"uid": 0, "gid": 0, "additionalGids": [2000]}
    assert config["process"]["capabilities"]["effective"] == []
    assert config["process"]["noNewPrivileges"] is True
    bind = next(m for m in config["mounts"] if m["destination"] == "/host-proc")
    assert bind["source"] == str(tmp_path / "proc") and "ro" in bind["options"]
    assert {"type": "pid"} in config["linux"]["namespaces"]
    assert {"type": "network"} not in config["linux"]["namespaces"]  # the host's loopback
    (device,) = config["linux"]["devices"]
    assert (device["path"], device["major"], device["minor"]) == (
        "/dev/nvidia-caps-imex-channels/channel3", 235, 3,
    )  # fmt: skip
    rules = config["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}
    assert {"allow": True, "type": "c", "major": 235, "minor": 3, "access": "rwm"} in rules
