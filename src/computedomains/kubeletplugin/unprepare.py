"""Unprepare one claim: its spec and entry go, and the node leaves the domain with its last one."""

from __future__ import annotations

from computedomains.kubeletplugin import ledger, nodelabel


def unprepare(uid: str, *, book: ledger.Ledger, label: nodelabel.NodeLabel) -> None:
    """Release the claim (unknown claims too: a crash may have left their spec) and fix the label.

    The label is synced on every call, not only when this claim held the node: a kubelet
    retry after a failed label write finds the claim already released and must still get
    the label right. The sync costs no API call while the label is already as wanted.
    """
    book.release(uid)
    label.sync()
