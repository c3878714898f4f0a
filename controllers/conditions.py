"""Conditions (``metav1.Condition``) and patches over plain dicts, for the reconcile modules.
``lastTransitionTime`` moves only when a condition's status changes (Kubernetes API conventions),
so an unchanged object reconciles to an identical status and no write at all.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with seconds (``2026-11-29T10:00:00Z``)."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def condition(type_: str, ok: bool | None, reason: str, message: str, now: str,
              observed_generation: int | None = None) -> dict[str, Any]:
    """One condition as wire JSON. ``ok``: True/False/None (Unknown). ``reason`` must be CamelCase
    (metav1.Condition's pattern); raises ValueError otherwise, so a typo fails in tests."""
    if not _REASON.match(reason):
        raise ValueError(f"condition reason {reason!r} is not CamelCase (metav1.Condition rule)")
    out: dict[str, Any] = {"type": type_, "status": "Unknown" if ok is None else ("True" if ok else "False"),
                           "reason": reason, "message": message, "lastTransitionTime": now}
    if observed_generation is not None:
        out["observedGeneration"] = observed_generation
    return out


def carry_transition_times(new: list[dict], old: list[dict] | None) -> list[dict]:
    """``new`` conditions, each keeping the previous ``lastTransitionTime`` of the same type when
    its status did not change (metav1.Condition rule)."""
    before = {c.get("type"): c for c in old or [] if isinstance(c, dict)}
    out = []
    for c in new:
        prev = before.get(c.get("type"))
        if prev is not None and prev.get("status") == c.get("status") and prev.get("lastTransitionTime"):
            c = dict(c, lastTransitionTime=prev["lastTransitionTime"])
        out.append(c)
    return out


def merge_patch(current: Any, desired: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``desired`` (both dicts), or
    None when they are equal. Keys missing from ``desired`` are deleted (``None``); lists and
    scalars are replaced whole."""
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return None if current == desired else desired
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
        elif isinstance(value, dict) and isinstance(current[key], dict):
            sub = merge_patch(current[key], value)
            if sub is not None:
                patch[key] = sub
        elif current[key] != value:
            patch[key] = value
    for key in current:
        if key not in desired:
            patch[key] = None
    return patch or None


def owned_patch(current: dict | None, desired: dict) -> dict | None:
    """``merge_patch`` limited to the top-level keys of ``desired`` (the keys this controller
    owns), so fields another writer keeps beside them (TauGrid's ``managedResources``, say) stay."""
    current = current or {}
    return merge_patch({k: current[k] for k in desired if k in current}, desired)


def subset_patch(current: Any, desired: Any) -> Any:
    """A merge patch that sets every field of ``desired`` on ``current`` and removes nothing
    (fields others own are left alone), or None when ``current`` already has them all."""
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return None if current == desired else desired
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            sub = subset_patch(current[key], value)
            if sub is not None:
                patch[key] = sub
        elif key not in current or current[key] != value:
            patch[key] = value
    return patch or None


def selector_matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """Does a ``metav1.LabelSelector`` (matchLabels and matchExpressions with In, NotIn, Exists,
    DoesNotExist) select an object with ``labels``? An empty selector selects everything and a
    None selector nothing (Kubernetes LabelSelector rules)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
