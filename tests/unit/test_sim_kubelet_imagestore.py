"""Image references, pull policies and pull credentials as a node's runtime reads them."""

from __future__ import annotations

import base64
import json

import pytest

from cdsim.kubelet import imagestore

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("busybox", ("docker.io", "library/busybox", "latest", "")),
        ("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
         ("nvcr.io", "nvidia/k8s-dra-driver-gpu", "v25.8.0", "")),
        ("127.0.0.1:5000/compute-domains:0.2.1-dev.gabc",
         ("127.0.0.1:5000", "compute-domains", "0.2.1-dev.gabc", "")),
        (f"127.0.0.1:5000/compute-domains@{DIGEST}",
         ("127.0.0.1:5000", "compute-domains", "", DIGEST)),
        (f"127.0.0.1:5000/compute-domains:0.2.0@{DIGEST}",
         ("127.0.0.1:5000", "compute-domains", "0.2.0", DIGEST)),
        ("localhost/team/app", ("localhost", "team/app", "latest", "")),
        ("team/app:1", ("docker.io", "team/app", "1", "")),
    ],
)  # fmt: skip
def test_references_are_normalised_as_a_runtime_reads_them(
    image: str, expected: tuple[str, str, str, str]
) -> None:
    ref = imagestore.parse(image)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected


def test_a_reference_prints_back_and_pins_to_an_image_id() -> None:
    ref = imagestore.parse("127.0.0.1:5000/compute-domains:0.2.0")
    assert str(ref) == "127.0.0.1:5000/compute-domains:0.2.0"
    assert ref.pinned(DIGEST) == f"127.0.0.1:5000/compute-domains@{DIGEST}"


@pytest.mark.parametrize(
    ("image", "named"),
    [
        ("127.0.0.1:5000/Compute:1", "bad repository"),
        ("127.0.0.1:5000/compute:-1", "bad tag"),
        ("compute@sha256:abc", "bad digest"),
        ("127.0.0.1:5000/", "bad repository"),
    ],
)
def test_a_bad_reference_is_refused_naming_the_part(image: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        imagestore.parse(image)


@pytest.mark.parametrize(
    ("policy", "image", "present", "pull"),
    [
        ("Always", "r.io/a:1", True, True),
        ("IfNotPresent", "r.io/a:1", True, False),
        ("IfNotPresent", "r.io/a:1", False, True),
        ("Never", "r.io/a:1", True, False),
        ("Never", "r.io/a:1", False, None),
        ("", "r.io/a", True, True),  # no tag: latest, which defaults to Always
        ("", "r.io/a:1", True, False),
    ],
)
def test_pull_policy_decides_whether_a_start_pulls(
    policy: str, image: str, present: bool, pull: bool | None
) -> None:
    assert imagestore.needs_pull(policy, imagestore.parse(image), present=present) is pull


def test_the_image_config_gives_the_process_defaults() -> None:
    config = imagestore.image_config(
        {"config": {"Entrypoint": ["computedomains"], "Cmd": None, "Env": ["A=1"],
                    "User": "65532:65532", "WorkingDir": "/"}}
    )  # fmt: skip
    assert config == imagestore.ImageConfig(("computedomains",), (), ("A=1",), "65532:65532", "/")
    assert imagestore.image_config({}) == imagestore.ImageConfig()


def _docker_secret(auths: dict[str, dict[str, str]]) -> dict[str, object]:
    document = json.dumps({"auths": auths}).encode()
    return {"data": {".dockerconfigjson": base64.b64encode(document).decode()}}


def test_pull_credentials_come_from_the_first_secret_naming_the_registry() -> None:
    secrets = [
        _docker_secret({"other.io": {"username": "x", "password": "y"}}),
        _docker_secret({"https://127.0.0.1:5000/": {"auth": base64.b64encode(b"u:p").decode()}}),
        _docker_secret({"127.0.0.1:5000": {"username": "late", "password": "z"}}),
    ]
    assert imagestore.registry_credentials(secrets, "127.0.0.1:5000") == ("u", "p")
    assert imagestore.registry_credentials(secrets, "other.io") == ("x", "y")
    assert imagestore.registry_credentials(secrets, "none.io") is None
    assert imagestore.registry_credentials([{"data": {}}], "other.io") is None
