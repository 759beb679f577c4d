"""The Kubernetes API client of every component: one HTTPS connection pool, JSON in and out.

Why not the generated ``kubernetes`` client: importing it costs about 30 MiB of memory per
process and half a second of CPU (every API and model class loads), and its models make
every field Optional and cost more than the request itself on loopback. Our components run
on every node and only ever need a handful of verbs on raw objects, so they use this.
"""
# size: the one API client: credentials, the retried request and its failure taxonomy

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import logging
import os
import pathlib
import random
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import urllib3
import urllib3.exceptions

from computedomains.api import resources
from computedomains.flaggroups import ApiBudget
from computedomains.kube import credentials, ratelimit, retry

log = logging.getLogger(__name__)

SERVICEACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICEACCOUNT_DIR_ENV = "COMPUTE_DOMAINS_SERVICEACCOUNT_DIR"
"""Set only by the simulated cluster, which cannot mount the token at the usual path."""

RequestObserver = Callable[[str, str, int], None]
"""Called after each request with (method, path, HTTP status; 0 when none came back)."""


class Failure(enum.Enum):
    """What a failed API call met, as its caller must take it: the one taxonomy of the code.

    The value is what metrics and logs name it by.
    """

    NOT_FOUND = "NotFound"
    """404: no such object (gone already, or not made yet)."""
    CONFLICT = "Conflict"
    """409: the object changed since it was read, or exists already: read again, decide again."""
    REFUSED = "Refused"
    """Any other 4xx (400, 401, 403, 422, ...): the same request will be refused again."""
    BUSY = "Busy"
    """408, 429 or a 5xx: the server is there but did not act now; later may do."""
    UNREACHABLE = "Unreachable"
    """No answer: no connection, TLS failure, lost connection, or no credential to send."""

    @property
    def transient(self) -> bool:
        """The same request may succeed later, unchanged."""
        return self in (Failure.BUSY, Failure.UNREACHABLE)


_LATER = frozenset({408, 429})
"""4xx answers that say "later" (timeout, too many requests) rather than "never"."""


def failure_of_status(status: int) -> Failure:
    """The failure an HTTP answer of ``status`` (not 2xx) is."""
    if status == NOT_FOUND:
        return Failure.NOT_FOUND
    if status == CONFLICT:
        return Failure.CONFLICT
    if status in _LATER or status >= 500:
        return Failure.BUSY
    return Failure.REFUSED


def encode(body: Any, *, separators: tuple[str, str] = (",", ":")) -> bytes:
    """``body`` as a request sends it: compact JSON, as Go clients (kubectl) write it."""
    return json.dumps(body, separators=separators).encode()


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code, ``reason``/``message`` the Status's."""

    def __init__(
        self, status: int, reason: str, message: str, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def failure(self) -> Failure:
        """What kind of failure the answer is."""
        return failure_of_status(self.status)


_NO_ANSWER: tuple[type[Exception], ...] = (
    urllib3.exceptions.HTTPError, credentials.CredentialError, ConnectionError, TimeoutError,
    ssl.SSLError,
)  # fmt: skip
"""What a request that got no answer raises; other OSErrors are local (a full disk, say)."""


def failure(exc: BaseException) -> Failure | None:
    """What kind of API failure ``exc`` is; None when it is none (a local error, a bug)."""
    if isinstance(exc, ApiError):
        return exc.failure
    if isinstance(exc, _NO_ANSWER):
        return Failure.UNREACHABLE
    return None


INTERNAL = "Internal"
"""The error reason of a failure that is no API failure (a local error, a bug)."""
ERROR_REASONS = (*(f.value for f in Failure), INTERNAL)
"""Every value :func:`error_reason` gives: the metrics' ``reason`` label."""


def error_reason(exc: BaseException) -> str:
    """The reason metrics name a failure by: its :class:`Failure`, else :data:`INTERNAL`."""
    found = failure(exc)
    return found.value if found is not None else INTERNAL


def _error(response: urllib3.BaseHTTPResponse) -> ApiError:
    data = response.data or b""
    try:
        status = json.loads(data)
    except ValueError:
        status = {}
    if not isinstance(status, dict):
        status = {}
    return ApiError(
        response.status,
        str(status.get("reason") or response.reason or ""),
        str(status.get("message") or data[:500].decode(errors="replace")),
        status,
    )


@dataclasses.dataclass(frozen=True)
class _Call:
    """One request as every try of it sends it."""

    method: str
    path: str
    url: str
    body: bytes | None
    content_type: str
    deadline: float
    """``time.monotonic()`` after which no try starts and no wait ends."""

    def within(self, wait: float | None) -> float | None:
        """``wait`` if the next try would still start before the deadline, else None."""
        if wait is None or time.monotonic() + wait >= self.deadline:
            return None
        return wait


@dataclasses.dataclass(frozen=True)
class _Again:
    """A try that is to be made again after ``seconds``."""

    seconds: float


_NOT_SENT = (urllib3.exceptions.ConnectTimeoutError, ConnectionRefusedError)
"""Failures before the request left: nothing reached the server."""


class Client:
    """Talks to one API server as one identity (bearer token or client certificate)."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: pathlib.Path | None = None,
        bearer: credentials.Bearer | None = None,
        cert: tuple[pathlib.Path, pathlib.Path] | None = None,
        max_connections: int = 16,
        qps: float = 0.0,
        burst: int = 1,
        policy: retry.Policy | None = None,
    ) -> None:
        """A client of ``server``.

        ``qps``/``burst``: its request budget (``qps <= 0``: none, for tools and tests; the
        components pass their ``--kube-api-qps``/``--kube-api-burst``); ``policy``: how failed
        requests are tried again (:mod:`retry`).
        """
        self.server = server.rstrip("/")
        self.limiter = ratelimit.TokenBucket(qps, burst)
        self.policy = policy or retry.Policy()
        self._bearer = bearer
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=max_connections, ssl_context=context)
        self.observer: RequestObserver | None = None
        """Set by a component that counts its API requests (metrics); None counts nothing."""

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: pathlib.Path) -> Client:
        """A client for the current context of a kubeconfig.

        Its user may have a token, a token file, an exec plugin or a client certificate.
        """
        import yaml  # noqa: PLC0415 - in a pod there is no kubeconfig to parse

        document = yaml.safe_load(path.read_text())
        context_name = document["current-context"]
        context = next(c["context"] for c in document["contexts"] if c["name"] == context_name)
        cluster = next(
            c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"]
        )
        user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
        base = path.parent
        ca = _file_or_data(base, cluster, "certificate-authority")
        cert = key = None
        if "client-certificate" in user or "client-certificate-data" in user:
            cert = _file_or_data(base, user, "client-certificate")
            key = _file_or_data(base, user, "client-key")
        try:
            bearer = credentials.from_user(user, base)
        except ValueError as exc:
            raise ValueError(f"kubeconfig {path}, user {context['user']}: {exc}") from None
        return cls(
            cluster["server"],
            ca_file=ca,
            bearer=bearer,
            cert=(cert, key) if cert and key else None,
        )

    @classmethod
    def in_cluster(cls) -> Client:
        """A client for the pod's ServiceAccount, like every in-cluster Kubernetes client."""
        directory = pathlib.Path(os.environ.get(SERVICEACCOUNT_DIR_ENV, SERVICEACCOUNT_DIR))
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host:
            host = f"[{host}]"
        return cls(
            f"https://{host}:{port}",
            ca_file=directory / "ca.crt",
            bearer=credentials.TokenFile(directory / "token"),
        )

    # -- requests -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
        guard: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """One request; returns the decoded JSON body, raises :class:`ApiError` on non-2xx.

        Throttled by :attr:`limiter`; a refusal to act (429, a 5xx with ``Retry-After``) or a
        failure the request cannot have caused is tried again as :mod:`retry` says, and only
        the last outcome reaches the caller. ``timeout`` bounds every try and every wait
        together: a caller with a deadline (the leader's Lease renewal) never waits past it.
        ``guard`` runs before every try and raises to send nothing more (a leader's fence: a
        write waiting for its budget or a retry is not sent by a replica that lost the lead).
        """
        data = None if body is None else body if isinstance(body, bytes) else encode(body)
        deadline = time.monotonic() + timeout
        call = _Call(method, path, self._url(path, query), data, content_type, deadline)
        for attempt in range(self.policy.attempts):
            self.limiter.take()
            # The credential first (an exec plugin may take a while): the guard comes last,
            # right before the request leaves.
            token = self._token(within=call.deadline - time.monotonic())
            if guard is not None:
                guard()
            outcome = self._try(call, attempt, token)
            if not isinstance(outcome, _Again):
                return outcome
            time.sleep(outcome.seconds)
        raise AssertionError("unreachable: the last attempt raises or returns")

    def _try(self, call: _Call, attempt: int, token: str | None) -> dict[str, Any] | _Again:
        """One try with ``token``: the decoded body, or how long to wait before the next try."""
        headers = _headers(token)
        if call.body is not None:
            headers["Content-Type"] = call.content_type
        status = 0
        left = max(0.001, call.deadline - time.monotonic())
        try:
            response = self._pool.request(
                call.method, call.url, body=call.body, headers=headers, retries=False,
                timeout=urllib3.Timeout(connect=min(5, left), read=left),
            )  # fmt: skip
            status = response.status
            self._answered(status, token)
        except API_ERRORS as exc:
            sent = not isinstance(exc, _NOT_SENT)
            draw = random.random()  # noqa: S311 - spreads waits; nothing secret
            wait = call.within(
                retry.after_failure(self.policy, call.method, sent=sent, attempt=attempt, draw=draw)
            )
            if wait is None:
                raise
            log.debug("%s %s failed (%s); trying again in %.2fs", call.method, call.path, exc, wait)
            return _Again(wait)
        finally:
            if self.observer is not None:
                self.observer(call.method, call.path, status)
        if 200 <= status <= 299:
            decoded: dict[str, Any] = json.loads(response.data) if response.data else {}
            return decoded
        asked = response.headers.get("Retry-After")
        draw = random.random()  # noqa: S311 - spreads waits; nothing secret
        wait = call.within(
            retry.after_answer(self.policy, call.method, status, asked, attempt, draw=draw)
        )
        if wait is None:
            raise _error(response)
        log.debug("%s %s answered %d; trying again in %.2fs", call.method, call.path, status, wait)
        return _Again(wait)

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """GET ``path``."""
        return self.request("GET", path, **kwargs)

    def find(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        """GET ``path``; None when there is no such object (404)."""
        try:
            return self.get(path, **kwargs)
        except ApiError as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def create(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        """POST ``body`` to the collection ``path``."""
        return self.request("POST", path, body=body, **kwargs)

    def replace(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        """PUT ``body`` (with its resourceVersion: a stale one is a 409) to ``path``."""
        return self.request("PUT", path, body=body, **kwargs)

    def patch(
        self, path: str, body: Any, *, strategic: bool = False, **kwargs: Any
    ) -> dict[str, Any]:
        """Merge-patch ``path`` (``strategic`` for lists merged by key, like conditions)."""
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return self.request(
            "PATCH", path, body=body, content_type=f"application/{kind}+json", **kwargs
        )

    def apply(
        self, path: str, body: Any, *, field_manager: str, force: bool = True, **kwargs: Any
    ) -> dict[str, Any]:
        """Server-side apply ``body`` to ``path`` as ``field_manager`` (owning what it names)."""
        query = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return self.request(
            "PATCH", path, body=body, content_type="application/apply-patch+yaml", query=query,
            **kwargs,
        )  # fmt: skip

    def delete(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """DELETE ``path``."""
        return self.request("DELETE", path, **kwargs)

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout: float
    ) -> Iterator[dict[str, Any]]:
        """Watch events (decoded JSON lines) of a ``watch=1`` request until the server ends it.

        Not tried again here: the informer that watches lists and watches again itself.
        """
        self.limiter.take()
        token = self._token(within=timeout)
        response = self._pool.request(
            "GET", self._url(path, {**query, "watch": "1"}), headers=_headers(token),
            timeout=urllib3.Timeout(connect=min(5, timeout), read=timeout), retries=False,
            preload_content=False,
        )  # fmt: skip
        self._answered(response.status, token)
        if self.observer is not None:
            self.observer("WATCH", path, response.status)
        try:
            if not 200 <= response.status <= 299:
                response.read()
                raise _error(response)
            pending = b""
            for chunk in response.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def _url(self, path: str, query: Mapping[str, str] | None) -> str:
        url = self.server + path
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def _token(self, *, within: float) -> str | None:
        """The bearer token to send, had within ``within`` seconds (None: no bearer)."""
        return self._bearer.token(within=max(0.0, within)) if self._bearer is not None else None

    def _answered(self, status: int, token: str | None) -> None:
        """Note an answer's status: a 401 retires the token it answered."""
        if status == UNAUTHORIZED and self._bearer is not None and token is not None:
            self._bearer.refused(token)


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "compute-domains"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _file_or_data(base: pathlib.Path, entry: Mapping[str, Any], key: str) -> pathlib.Path | None:
    """A kubeconfig file reference, or its inline ``-data`` twin written to a private file."""
    if entry.get(key):
        path = pathlib.Path(entry[key])
        return path if path.is_absolute() else base / path
    data = entry.get(f"{key}-data")
    if not data:
        return None
    handle = tempfile.NamedTemporaryFile(prefix="kubeconfig-", delete=False)  # noqa: SIM115
    with handle:
        handle.write(base64.b64decode(data))
    return pathlib.Path(handle.name)


UNAUTHORIZED = 401
NOT_FOUND = 404
CONFLICT = 409
INVALID = 422
API_ERRORS: tuple[type[Exception], ...] = (ApiError, urllib3.exceptions.HTTPError, OSError)
"""What a call raises when the server refuses it or cannot be reached (:func:`failure` says
which :class:`Failure` it is)."""


def connect(kubeconfig: pathlib.Path | None = None, budget: ApiBudget | None = None) -> Client:
    """The client a component uses: ``kubeconfig`` if given, else the pod's ServiceAccount.

    ``budget``: its request budget (``--kube-api-qps``/``--kube-api-burst``); None: unlimited.
    """
    api = Client.from_kubeconfig(kubeconfig) if kubeconfig is not None else Client.in_cluster()
    if budget is not None:
        api.limiter = ratelimit.TokenBucket(budget.qps, budget.burst)
    return api


def server_version(api: Client) -> str:
    """The API server's version, e.g. ``v1.36.3``."""
    return str(api.get("/version")["gitVersion"])


def mint_service_account_token(
    api: Client,
    *,
    namespace: str,
    service_account: str,
    expiration_seconds: int = 3600,
    audiences: list[str] | None = None,
    bound_pod: tuple[str, str] | None = None,
) -> str:
    """Request a token for ``namespace/service_account`` through the TokenRequest API.

    ``bound_pod`` (name, uid) binds the token to a pod, as the kubelet's projected tokens
    are; the API server then adds the pod's node name to the token's claims.
    """
    spec: dict[str, Any] = {"audiences": audiences or [], "expirationSeconds": expiration_seconds}
    if bound_pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": bound_pod[0],
            "uid": bound_pod[1],
        }
    path = resources.SERVICE_ACCOUNTS.path(
        service_account, namespace=namespace, subresource="token"
    )
    answer = api.create(
        path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    )
    token = answer.get("status", {}).get("token")
    if not token:
        raise ApiError(
            500, "NoToken", f"TokenRequest for {namespace}/{service_account} returned no token"
        )
    return str(token)
