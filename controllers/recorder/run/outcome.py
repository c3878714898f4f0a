"""A run's end state, read from its root object by its kind's own rule (``WorkloadKind.outcome``
in ``taugate/kinds/``, over ``taugate.outcome``). Batch kinds end on their own (``succeeded`` /
``failed``); serving kinds (``WorkloadKind.serving``) never do: they are ``running`` while
available, and their run ends when the object is deleted (``run.merge``: ``Completed`` with reason
``Deleted``)."""

from __future__ import annotations

from collections.abc import Mapping

from taugate.access import as_dict
from taugate.kinds import KINDS, kind_of
from taugate.outcome import Outcome

__all__ = ["SERVING_KINDS", "Outcome", "group_kind", "owner_outcome"]

SERVING_KINDS: frozenset[tuple[str, str]] = frozenset((k.group, k.kind) for k in KINDS if k.serving)
"""Kinds that never end on their own: deleting the object ends the run (``Completed``/``Deleted``)."""


def group_kind(obj: Mapping | None) -> tuple[str, str] | None:
    """``(group, kind)`` of an object or object reference (``apiVersion``, ``kind``), or None."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
        return None
    api_version = obj.get("apiVersion")
    group = api_version.split("/")[0] if isinstance(api_version, str) and "/" in api_version else ""
    return group, str(obj["kind"])


def owner_outcome(owner: Mapping | None) -> Outcome | None:
    """The state of the run's root object ``owner`` by its kind's rule (``WorkloadKind.outcome``); ``pending``
    / ``UnknownKind`` for a kind without one. Returns None when ``owner`` is None (deleted: the
    previous state stands)."""
    if owner is None:
        return None
    kind = kind_of(owner)
    if kind is None:
        return Outcome("pending", "UnknownKind", f"unsupported owner kind {owner.get('kind')!r}")
    return kind.outcome(owner, as_dict(owner.get("status")))
