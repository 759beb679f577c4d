"""A ``clique: Required`` domain whose members span NVLink cliques (pure).

The webhook keeps a ``Required`` domain in one clique with a required pod affinity added at
pod CREATE (``webhook/podaffinity.py``). Its pod entry is ``failurePolicy: Ignore``, so a pod
created while the webhook is down gets neither the domain label nor the affinity and may land
in any clique; its node still becomes a member (membership follows claims, not labels). Pods
that did get the affinity match only labelled pods, so they share one clique; the members
elsewhere are most likely those the webhook never saw. Nothing can move a running pod, so the
controller says so: ``Degraded`` with reason ``SpansCliques`` (:mod:`conditions`) and one
Warning Event ``SpansCliques`` per set of cliques spanned (:func:`event`). ``Preferred``
allows spreading and ``None`` asks for nothing: neither is ever told.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from computedomains.api import models
from computedomains.controller import eventplan

PREFIX = "members span "
"""How :attr:`Spread.message` starts: what another condition message it is appended to is
cut at (:func:`conditions.compute` keeps a ``MembersLost`` message without it)."""


@dataclasses.dataclass(frozen=True)
class Spread:
    """Members of a ``Required`` domain in more than one clique."""

    cliques: tuple[tuple[str, int], ...]
    """(clique, members in it), most members first, then by clique."""
    outside: tuple[str, ...]
    """Members outside the main clique (the first of :attr:`cliques`), by name."""

    @property
    def main(self) -> str:
        """The clique most members share: where the pods with the affinity went."""
        return self.cliques[0][0]

    @property
    def key(self) -> str:
        """The ``reported`` key of the Warning: one per set of cliques spanned."""
        return f"{eventplan.Reason.SPANS_CLIQUES}/{','.join(sorted(c for c, _ in self.cliques))}"

    @property
    def message(self) -> str:
        """The cliques with their member counts, and why the members outside the main one are."""
        counts = eventplan.listing(
            f"{c} ({n} node{'' if n == 1 else 's'})" for c, n in self.cliques
        )
        return (
            f"{PREFIX}{len(self.cliques)} cliques though spec.placement.clique is Required: "
            f"{counts}; the pods on the members outside {self.main} (the clique most members "
            f"share), {eventplan.listing(self.outside)}, were most likely admitted while the "
            "admission webhook was down, so they got no clique affinity"
        )


def of(
    nodes: Sequence[models.ComputeDomainNode], placement: models.CliquePlacement
) -> Spread | None:
    """The spread of the listed ``nodes`` (every member), or None when there is none to tell.

    Only ``Required`` is told. Members without a fabric (``cliqueID: ""``) are in no clique and
    share NVLink with nobody: they do not count.
    """
    if placement is not models.CliquePlacement.REQUIRED:
        return None
    counts = Counter(n.clique_id for n in nodes if n.clique_id)
    if len(counts) < 2:
        return None
    cliques = tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    main = cliques[0][0]
    outside = tuple(sorted(n.name for n in nodes if n.clique_id and n.clique_id != main))
    return Spread(cliques=cliques, outside=outside)


def event(
    spread: Spread | None, *, reported: frozenset[str]
) -> tuple[list[eventplan.EventSpec], frozenset[str]]:
    """The Warning for ``spread`` unless its key is ``reported``, and the key to remember.

    Once per set of cliques: a member joining a clique already spanned changes the counts the
    condition shows, not what the operator has to do; a further clique, or spanning again after
    the domain was back in one, warns again.
    """
    if spread is None:
        return [], frozenset()
    keep = frozenset({spread.key})
    if spread.key in reported:
        return [], keep
    return [eventplan.EventSpec(eventplan.Reason.SPANS_CLIQUES, spread.message, warning=True)], keep
