"""Bearer credentials: token files read again, exec plugins run as client-go runs them."""

from __future__ import annotations

import json
import pathlib
import subprocess
import threading
from typing import Any

import pytest

from computedomains.kube import credentials

V1 = "client.authentication.k8s.io/v1"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _credential(token: str = "t", expires: str | None = None, **status: Any) -> str:
    body: dict[str, Any] = {"token": token, **status} if token else dict(status)
    if expires:
        body["expirationTimestamp"] = expires
    return json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": body})


def test_an_exec_credential_with_an_expiry_is_read() -> None:
    issued = credentials.parse_exec_output(
        _credential("abc", "2027-01-15T09:00:00Z"), api_version=V1, now=NOW
    )
    assert issued == credentials.Issued("abc", NOW + 3600)
    assert credentials.parse_exec_output(_credential("x"), api_version=V1, now=NOW).expires is None


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ("not json", "is not JSON"),
        (json.dumps({"kind": "Other"}), "not an ExecCredential"),
        (_credential().replace(V1, "client.authentication.k8s.io/v1beta1"), "asked for"),
        (_credential(""), "no status.token"),
        (_credential("", clientCertificateData="PEM"), "only tokens are supported"),
        (_credential("t", "2027-01-15T07:00:00Z"), "expired already"),
        (_credential("t", "tomorrow"), "is not RFC 3339"),
        (json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": "t"}), "not an object"),
    ],
)
def test_a_bad_exec_credential_says_what_is_wrong(output: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        credentials.parse_exec_output(output, api_version=V1, now=NOW)


class _Plugin:
    """A stand-in for subprocess.run: answers with the next output, counts its runs."""

    def __init__(self, *outputs: str, returncode: int = 0, stderr: str = "") -> None:
        self.outputs = list(outputs)
        self.returncode, self.stderr = returncode, stderr
        self.calls: list[dict[str, Any]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append({"argv": argv, **kwargs})
        out = self.outputs.pop(0) if self.outputs else ""
        return subprocess.CompletedProcess(argv, self.returncode, out, self.stderr)


def _exec(plugin: _Plugin, clock: list[float], **spec: Any) -> credentials.Exec:
    entry = {"apiVersion": V1, "command": "/bin/get-token", **spec}
    parsed = credentials.ExecSpec.parse(entry, pathlib.Path("/etc/kube"))
    return credentials.Exec(parsed, clock=lambda: clock[0], run=plugin)


def test_an_exec_token_is_kept_until_near_its_expiry_then_asked_for_again() -> None:
    plugin = _Plugin(_credential("one", "2027-01-15T08:01:00Z"), _credential("two"))
    clock = [NOW]
    source = _exec(plugin, clock, args=["--cluster", "a"], env=[{"name": "K", "value": "v"}])
    assert source.token() == "one"
    clock[0] = NOW + 60 - credentials.EXPIRY_MARGIN - 1
    assert source.token() == "one" and len(plugin.calls) == 1
    clock[0] = NOW + 60 - credentials.EXPIRY_MARGIN
    assert source.token() == "two" and len(plugin.calls) == 2
    call = plugin.calls[0]
    assert call["argv"] == ["/bin/get-token", "--cluster", "a"]
    assert call["env"]["K"] == "v" and call["stdin"] == subprocess.DEVNULL
    info = json.loads(call["env"]["KUBERNETES_EXEC_INFO"])
    assert info == {"apiVersion": V1, "kind": "ExecCredential", "spec": {"interactive": False}}


def test_a_refused_exec_token_is_not_sent_again() -> None:
    plugin = _Plugin(_credential("one"), _credential("two"))
    source = _exec(plugin, [NOW])
    assert source.token() == "one"
    assert source.token() == "one"
    source.refused("one")
    assert source.token() == "two"
    source.refused("one")  # a late 401 to the old token: the new one stays
    assert source.token() == "two" and not plugin.outputs


@pytest.mark.parametrize(
    ("plugin", "spec", "error"),
    [
        (_Plugin(returncode=3, stderr="warming up\nlogin required\n"), {},
         "exec plugin /bin/get-token exited 3: login required"),
        (_Plugin("garbage"), {}, "exec plugin /bin/get-token: its output is not JSON"),
        (_Plugin(), {"interactiveMode": "Always"}, "needs a terminal"),
    ],
)  # fmt: skip
def test_an_exec_plugin_that_fails_is_a_credential_error(
    plugin: _Plugin, spec: dict[str, Any], error: str
) -> None:
    with pytest.raises(credentials.CredentialError, match=error):
        _exec(plugin, [NOW], **spec).token()


def test_a_missing_exec_plugin_names_its_install_hint() -> None:
    def missing(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    entry = {"apiVersion": V1, "command": "get-token", "installHint": "apt install get-token"}
    source = credentials.Exec(credentials.ExecSpec.parse(entry, pathlib.Path("/")), run=missing)
    with pytest.raises(credentials.CredentialError, match=r"not found \(apt install get-token\)"):
        source.token()


def test_an_exec_command_with_a_relative_path_is_relative_to_the_kubeconfig() -> None:
    base = pathlib.Path("/etc/kube")
    assert credentials.ExecSpec.parse({"apiVersion": V1, "command": "./bin/t"}, base).command == (
        "/etc/kube/bin/t"
    )
    assert credentials.ExecSpec.parse({"apiVersion": V1, "command": "t"}, base).command == "t"
    with pytest.raises(ValueError, match=r"apiVersion 'client\.authentication\.k8s\.io/v1alpha1'"):
        credentials.ExecSpec.parse(
            {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "t"}, base
        )


def test_a_token_file_is_read_again_after_a_minute_or_a_401(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    clock = [0.0]
    source = credentials.TokenFile(path, clock=lambda: clock[0])
    assert source.token() == "first"
    path.write_text("second")
    clock[0] = credentials.TOKEN_REREAD
    assert source.token() == "first"
    clock[0] = credentials.TOKEN_REREAD + 1
    assert source.token() == "second"
    path.write_text("third")
    source.refused("first")  # a late 401 to a token read before: no re-read
    assert source.token() == "second"
    source.refused("second")
    assert source.token() == "third"
    path.unlink()
    source.refused("third")
    with pytest.raises(credentials.CredentialError, match="token file"):
        source.token()


def test_a_kubeconfig_user_picks_token_then_token_file_then_exec(tmp_path: pathlib.Path) -> None:
    exec_entry = {"apiVersion": V1, "command": "t"}
    chosen = credentials.from_user({"token": "a", "tokenFile": "f", "exec": exec_entry}, tmp_path)
    assert isinstance(chosen, credentials.Fixed)
    chosen = credentials.from_user({"tokenFile": "f", "exec": exec_entry}, tmp_path)
    assert isinstance(chosen, credentials.TokenFile)
    assert isinstance(credentials.from_user({"exec": exec_entry}, tmp_path), credentials.Exec)
    assert credentials.from_user({"client-certificate": "c"}, tmp_path) is None
    with pytest.raises(ValueError, match="auth-provider users are not supported"):
        credentials.from_user({"auth-provider": {"name": "gcp"}}, tmp_path)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"args": "--flag"}, "args must be a list"),
        ({"env": [{"value": "v"}]}, "env must be a list of entries with a name"),
        ({"command": ""}, "command is required"),
    ],
)
def test_a_malformed_exec_entry_is_a_value_error(entry: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        credentials.ExecSpec.parse({"apiVersion": V1, "command": "t", **entry}, pathlib.Path("/"))


def test_a_plugin_that_hangs_is_named_without_its_arguments() -> None:
    def hangs(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    entry = {"apiVersion": V1, "command": "get-token", "args": ["--secret=hunter2"]}
    source = credentials.Exec(credentials.ExecSpec.parse(entry, pathlib.Path("/")), run=hangs)
    with pytest.raises(credentials.CredentialError) as caught:
        source.token(within=2)
    assert "did not answer within 2.0s" in str(caught.value) and "hunter2" not in str(caught.value)


def test_a_request_waits_for_another_threads_plugin_run_no_longer_than_its_time() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        started.set()
        release.wait(10)
        return subprocess.CompletedProcess(argv, 0, _credential("slow"), "")

    source = credentials.Exec(
        credentials.ExecSpec.parse({"apiVersion": V1, "command": "t"}, pathlib.Path("/")), run=slow
    )
    first = threading.Thread(target=source.token)
    first.start()
    assert started.wait(10), "the first caller to run the plugin"
    with pytest.raises(credentials.CredentialError, match=r"no token within 0\.05s"):
        source.token(within=0.05)
    release.set()
    first.join(10)
    assert source.token(within=0.05) == "slow"  # the first run's token serves everyone
