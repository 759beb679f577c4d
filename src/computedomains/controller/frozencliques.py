"""Clique objects this controller cannot fully read: their slots are held, never rewritten.

A ComputeDomainClique is where the agents read their slots. One that does not parse, or was
written in a schema newer than this controller knows (another ``apiVersion``, fields it has
no name for: a newer release wrote it and was rolled back), must not be taken for empty:
rebuilding it would free or move every slot in it and break the IMEX domain that runs on it
(user-pain P3). Such a clique is *frozen* (docs/control-side.md, Frozen cliques):

- its nodes keep the slots it lists, as far as they can be made out (node name and index);
- it is never rewritten, no slot in it is freed and none is assigned into it (this
  controller cannot see which indices it really holds), so newcomers of its clique wait;
- a member it lists stays in it, whichever clique the node's label names now;
- a Warning Event ``CliqueFrozen`` on the domain says why, once per reason;
- it is deleted only with the rest of the domain's cliques, once no node runs the domain.

:func:`read` is the one parser of clique objects for the controller's snapshots. A frozen
clique's daemons come as a :class:`Frozen` tuple, so everything that only reads slots treats
them as held without knowing about freezing; only the code that writes asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from computedomains.api import constants, models
from computedomains.api.schema import ValidationError


class Frozen(tuple[models.CliqueDaemon, ...]):
    """The daemons a frozen clique object lists, as far as they can be made out."""

    reason: str
    """Why the object cannot be read, for the Event."""

    def __new__(cls, daemons: Iterable[models.CliqueDaemon], *, reason: str) -> Frozen:
        """``daemons`` of an object that cannot be read for ``reason``."""
        made = super().__new__(cls, daemons)
        made.reason = reason
        return made


def is_frozen(daemons: tuple[models.CliqueDaemon, ...] | None) -> bool:
    """True for the daemons of a frozen clique."""
    return isinstance(daemons, Frozen)


def read(obj: Mapping[str, Any]) -> tuple[models.CliqueDaemon, ...]:
    """The daemons of a clique object; a :class:`Frozen` tuple unless fully understood.

    Strict: an unknown field is a schema newer than ours, not something to drop, since
    whatever it says about the slots would be lost on the next rewrite.
    """
    version = obj.get("apiVersion")
    if version != constants.API_VERSION_V1BETA2:
        reason = f"apiVersion {version!r} is not {constants.API_VERSION_V1BETA2!r}"
        return Frozen(_salvage(obj), reason=reason)
    try:
        return models.ComputeDomainCliqueV1Beta2.from_dict(obj, strict=True).daemons
    except ValidationError as exc:
        return Frozen(_salvage(obj), reason=str(exc))


def _salvage(obj: Mapping[str, Any]) -> list[models.CliqueDaemon]:
    """Every entry that names a node, with what of it is readable: what agents act on."""
    entries = obj.get("daemons")
    out: list[models.CliqueDaemon] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        node, index = entry.get("nodeName"), entry.get("index")
        if not isinstance(node, str) or not node:
            continue
        status = entry.get("status")
        out.append(
            models.CliqueDaemon(
                node_name=node,
                ip_address=_text(entry.get("ipAddress")),
                clique_id=_text(entry.get("cliqueID")),
                index=index if isinstance(index, int) and not isinstance(index, bool) else None,
                status=models.Status.READY
                if status == models.Status.READY.value
                else models.Status.NOT_READY,
            )
        )
    return out


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
