"""Bearer credentials of an API client: a fixed token, a token file, or a kubeconfig exec plugin.

A token file (the pod's projected ServiceAccount token, a kubeconfig ``tokenFile``) is read
again every minute, since the kubelet rotates it. An exec plugin (``users[].user.exec``, as
cloud providers' kubeconfigs use) runs as client-go runs it: with ``KUBERNETES_EXEC_INFO`` in
its environment, its ``ExecCredential`` read from stdout, the token kept until the
``expirationTimestamp`` it gives, or until the API server answers 401.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

TOKEN_REREAD = 60.0
"""Seconds between re-reads of a token file (the kubelet rotates projected tokens)."""
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT = 60.0
"""Seconds an exec plugin may run (it may call its provider's token endpoint)."""
EXPIRY_MARGIN = 10.0
"""Seconds before its expiry that a plugin's token is replaced, so no request carries it late."""


class CredentialError(OSError):
    """No credential could be had: the request is not sent (an OSError, as a failed connection)."""


class Bearer(Protocol):
    """Where a client's bearer token comes from."""

    def token(self, *, within: float = EXEC_TIMEOUT) -> str:
        """The token to send now, had within ``within`` seconds.

        :class:`CredentialError` when there is none to be had in that time.
        """

    def refused(self, token: str) -> None:
        """The API server answered 401 to ``token``: it is not to be sent again."""


@dataclasses.dataclass
class Fixed:
    """A token written into the kubeconfig."""

    value: str

    def token(self, *, within: float = EXEC_TIMEOUT) -> str:
        """The token."""
        return self.value

    def refused(self, token: str) -> None:
        """Nothing to refresh."""


class TokenFile:
    """A token in a file that is rewritten under us; read again every :data:`TOKEN_REREAD` s."""

    def __init__(self, path: pathlib.Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Read ``path`` when first asked."""
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._read_at = 0.0

    def token(self, *, within: float = EXEC_TIMEOUT) -> str:
        """The file's token, read at most :data:`TOKEN_REREAD` s ago."""
        with self._lock:
            now = self._clock()
            if self._value is None or now - self._read_at > TOKEN_REREAD:
                try:
                    self._value = self._path.read_text().strip()
                except OSError as exc:
                    raise CredentialError(f"token file {self._path}: {exc.strerror}") from exc
                self._read_at = now
            return self._value

    def refused(self, token: str) -> None:
        """Read the file again on the next request (the kubelet may just have rotated it)."""
        with self._lock:
            if self._value == token:
                self._value = None


@dataclasses.dataclass(frozen=True)
class ExecSpec:
    """A kubeconfig user's ``exec`` entry."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    interactive: str = "IfAvailable"
    """``interactiveMode``: a component has no terminal, so ``Always`` cannot be served."""

    @classmethod
    def parse(cls, entry: Mapping[str, Any], base: pathlib.Path) -> ExecSpec:
        """The ``exec`` entry of a kubeconfig in folder ``base``; ValueError names what is wrong."""
        command = str(entry.get("command") or "")
        if not command:
            raise ValueError("exec: command is required")
        api_version = str(entry.get("apiVersion") or "")
        if api_version not in EXEC_API_VERSIONS:
            raise ValueError(
                f"exec: apiVersion {api_version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
            )
        # As client-go: a relative command with a slash is relative to the kubeconfig's folder.
        if os.sep in command and not pathlib.Path(command).is_absolute():
            command = str(base / command)
        args, env = entry.get("args") or [], entry.get("env") or []
        if not isinstance(args, list):
            raise ValueError("exec: args must be a list")
        if not isinstance(env, list) or not all(isinstance(e, dict) and e.get("name") for e in env):
            raise ValueError("exec: env must be a list of entries with a name and a value")
        return cls(
            command=command,
            args=tuple(str(a) for a in args),
            env={str(e["name"]): str(e.get("value", "")) for e in env},
            api_version=api_version,
            install_hint=str(entry.get("installHint") or ""),
            interactive=str(entry.get("interactiveMode") or "IfAvailable"),
        )


@dataclasses.dataclass(frozen=True)
class Issued:
    """A token an exec plugin gave, and until when it may be sent (None: until refused)."""

    token: str
    expires: float | None


def parse_exec_output(output: str, *, api_version: str, now: float) -> Issued:
    """An exec plugin's stdout as the token it issues; ValueError says what is wrong with it.

    ``now`` is the wall clock (seconds since the epoch), the expiry's reference.
    """
    try:
        document = json.loads(output)
    except json.JSONDecodeError as exc:
        raise ValueError(f"its output is not JSON ({exc.msg})") from None
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise ValueError("its output is not an ExecCredential")
    if document.get("apiVersion") != api_version:
        raise ValueError(
            f"it answered apiVersion {document.get('apiVersion')!r}, asked for {api_version!r}"
        )
    status = document.get("status") or {}
    if not isinstance(status, dict):
        raise ValueError("its ExecCredential's status is not an object")
    token = status.get("token")
    if not token:
        if status.get("clientCertificateData"):
            raise ValueError("it issued a client certificate; only tokens are supported")
        raise ValueError("its ExecCredential has no status.token")
    expires = None
    if stamp := status.get("expirationTimestamp"):
        try:
            moment = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expirationTimestamp {stamp!r} is not RFC 3339") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        expires = moment.timestamp()
    if expires is not None and expires <= now:
        raise ValueError(f"its token expired already ({stamp})")
    return Issued(str(token), expires)


class Exec:
    """A kubeconfig exec plugin: run when there is no token, it has expired, or was refused."""

    def __init__(
        self,
        spec: ExecSpec,
        *,
        clock: Callable[[], float] = time.time,
        run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    ) -> None:
        """Run ``spec`` when first asked; ``clock`` is the wall clock the expiry is read on."""
        self._spec = spec
        self._clock = clock
        self._run = run
        self._lock = threading.Lock()
        """Guards :attr:`_issued`; never held while the plugin runs."""
        self._refresh = threading.Lock()
        """Held by the one thread running the plugin: the others wait for its token."""
        self._issued: Issued | None = None

    def token(self, *, within: float = EXEC_TIMEOUT) -> str:
        """The plugin's token, running it again when the one held is near its expiry.

        Waits at most ``within`` seconds, for another thread's run or its own.
        """
        if (held := self._usable()) is not None:
            return held
        started = time.monotonic()
        if not self._refresh.acquire(timeout=max(0.0, within)):
            raise CredentialError(f"exec plugin {self._spec.command}: no token within {within:g}s")
        try:
            if (held := self._usable()) is not None:
                return held  # another thread ran it meanwhile
            left = within - (time.monotonic() - started)
            issued = self._call(self._clock(), timeout=max(0.1, min(EXEC_TIMEOUT, left)))
            with self._lock:
                self._issued = issued
            return issued.token
        finally:
            self._refresh.release()

    def refused(self, token: str) -> None:
        """Run the plugin again on the next request, unless it was run since ``token``."""
        with self._lock:
            if self._issued is not None and self._issued.token == token:
                self._issued = None

    def _usable(self) -> str | None:
        with self._lock:
            held = self._issued
            if held is None:
                return None
            if held.expires is not None and held.expires - EXPIRY_MARGIN <= self._clock():
                return None
            return held.token

    def _call(self, now: float, *, timeout: float) -> Issued:
        spec = self._spec
        name = f"exec plugin {spec.command}"
        if spec.interactive == "Always":
            raise CredentialError(f"{name}: interactiveMode Always needs a terminal; none here")
        info = {"apiVersion": spec.api_version, "kind": "ExecCredential",
                "spec": {"interactive": False}}  # fmt: skip
        env = {**os.environ, **spec.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            done = self._run(
                [spec.command, *spec.args], env=env, capture_output=True, text=True,
                stdin=subprocess.DEVNULL, timeout=timeout, check=False,
            )  # fmt: skip
        except FileNotFoundError:
            hint = f" ({spec.install_hint.strip()})" if spec.install_hint.strip() else ""
            raise CredentialError(f"{name} not found{hint}") from None
        except subprocess.TimeoutExpired:
            # Not the exception's text: it quotes the arguments, which may hold secrets.
            raise CredentialError(f"{name} did not answer within {timeout:.1f}s") from None
        except OSError as exc:
            raise CredentialError(f"{name}: {exc.strerror or type(exc).__name__}") from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()[-1:] or ["no message"]
            raise CredentialError(f"{name} exited {done.returncode}: {said[0]}")
        try:
            return parse_exec_output(done.stdout, api_version=spec.api_version, now=now)
        except ValueError as exc:
            raise CredentialError(f"{name}: {exc}") from None


def from_user(user: Mapping[str, Any], base: pathlib.Path) -> Bearer | None:
    """The bearer credentials of a kubeconfig ``user`` in folder ``base`` (None: none).

    ``token`` wins over ``tokenFile``, as in client-go; ``exec`` is used when neither is set.
    """
    if user.get("token"):
        return Fixed(str(user["token"]))
    if user.get("tokenFile"):
        path = pathlib.Path(str(user["tokenFile"]))
        return TokenFile(path if path.is_absolute() else base / path)
    if user.get("exec"):
        return Exec(ExecSpec.parse(user["exec"], base))
    if user.get("auth-provider"):
        raise ValueError(
            "auth-provider users are not supported (removed from client-go): use an exec plugin"
        )
    return None
