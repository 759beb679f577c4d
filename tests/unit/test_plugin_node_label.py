"""The plugin's node label: one write per change, never a 409 however often the Node changes."""

from __future__ import annotations

from typing import Any

from computedomains.api import constants
from computedomains.kube import nodes
from computedomains.kubeletplugin import nodelabel
from tests.support.fakeapi import FakeApi

NODE = nodes.path("n1")
KEY = constants.COMPUTE_DOMAIN_LABEL


class BusyNode(FakeApi):
    """A Node that changes right after every read (the kubelet's heartbeats, node-init)."""

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = super().get(path, **kwargs)
        self._bump(self.objects[path])
        return answer


def _label(api: FakeApi) -> str | None:
    value = api.objects[NODE]["metadata"].get("labels", {}).get(KEY)
    return str(value) if value is not None else None


def test_the_label_follows_the_claims_with_one_write_per_change_and_no_precondition() -> None:
    api = BusyNode(objects={NODE: {"metadata": {"name": "n1", "labels": {"other": "x"}}}})
    api._bump(api.objects[NODE])
    want: list[str | None] = ["d1"]
    label = nodelabel.NodeLabel(api, node_name="n1", want=lambda: want[0])
    label.sync()
    assert _label(api) == "d1" and api.objects[NODE]["metadata"]["labels"]["other"] == "x"
    api.calls.clear()
    label.sync()  # nothing changed: no API call at all
    assert api.calls == []
    want[0] = None
    label.sync()
    assert _label(api) is None
    assert api.writes() == [("PATCH", NODE)]  # one write: no 409, no second try


def test_a_verifying_sync_puts_back_a_label_removed_by_hand() -> None:
    api = BusyNode(objects={NODE: {"metadata": {"name": "n1"}}})
    api._bump(api.objects[NODE])
    label = nodelabel.NodeLabel(api, node_name="n1", want=lambda: "d1")
    label.sync()
    api.objects[NODE]["metadata"]["labels"].pop(KEY)  # kubectl label node n1 key-
    label.sync()  # trusts the last answer: does not notice
    assert _label(api) is None
    label.sync(verify=True)
    assert _label(api) == "d1"
