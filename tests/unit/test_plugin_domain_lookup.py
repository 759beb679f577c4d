"""The plugin finds a claim's ComputeDomain by UID without watching the cluster's domains."""

from __future__ import annotations

from typing import Any

from computedomains.api import domainview, resources
from computedomains.kubeletplugin import domainlookup


class Domains:
    """ComputeDomains served by path, as the API server lists and reads them; calls recorded."""

    def __init__(self, *domains: tuple[str, str, str]) -> None:
        self.objects = {uid: {"metadata": {"namespace": ns, "name": name, "uid": uid}}
                        for ns, name, uid in domains}  # fmt: skip
        self.calls: list[str] = []

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append(path)
        everywhere = resources.COMPUTE_DOMAINS.path()
        return {
            "items": [
                o
                for o in self.objects.values()
                if path in (everywhere, resources.COMPUTE_DOMAINS.path(namespace=namespace_of(o)))
            ]
        }

    def find(self, path: str, **_: Any) -> dict[str, Any] | None:
        self.calls.append(path)
        for obj in self.objects.values():
            meta = obj["metadata"]
            if path == resources.COMPUTE_DOMAINS.path(meta["name"], namespace=meta["namespace"]):
                return obj
        return None


def namespace_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["namespace"])


def lookup(api: Domains, now: list[float]) -> domainlookup.DomainLookup:
    return domainlookup.DomainLookup(api, clock=lambda: now[0])


def test_the_claims_namespace_is_listed_first_then_every_namespace() -> None:
    api, now = Domains(("a", "cd", "u1"), ("b", "cd", "u2")), [0.0]
    found = lookup(api, now)
    assert found.find("u1", "a") == domainview.Domain.peek(api.objects["u1"])
    assert api.calls == [resources.COMPUTE_DOMAINS.path(namespace="a")]
    api.calls.clear()
    other = found.find("u2", "a")  # another namespace's: found, for the message
    assert other is not None and (other.namespace, other.name, other.uid) == ("b", "cd", "u2")
    assert api.calls == [
        resources.COMPUTE_DOMAINS.path(namespace="a"),
        resources.COMPUTE_DOMAINS.path(),
    ]
    api.calls.clear()
    assert found.find("nope", "a") is None
    assert len(api.calls) == 2


def test_a_found_domain_is_remembered_then_read_again_by_name() -> None:
    api, now = Domains(("a", "cd", "u1")), [0.0]
    found = lookup(api, now)
    assert found.find("u1", "a") is not None
    api.calls.clear()
    now[0] = domainlookup.RECHECK_SECONDS - 1
    assert found.find("u1", "a") is not None
    assert api.calls == []  # within the window: no API call
    now[0] = domainlookup.RECHECK_SECONDS + 1
    assert found.find("u1", "a") is not None
    assert api.calls == [resources.COMPUTE_DOMAINS.path("cd", namespace="a")]


def test_a_deleted_domain_is_not_found_even_when_its_name_was_taken_again() -> None:
    api, now = Domains(("a", "cd", "u1")), [0.0]
    found = lookup(api, now)
    assert found.find("u1", "a") is not None
    api.objects = {"u9": {"metadata": {"namespace": "a", "name": "cd", "uid": "u9"}}}
    now[0] = domainlookup.RECHECK_SECONDS + 1
    assert found.find("u1", "a") is None
    api.calls.clear()
    assert found.find("u1", "a") is None  # forgotten: looked for from scratch
    assert api.calls[0] == resources.COMPUTE_DOMAINS.path(namespace="a")
