"""Reading optional fields of Kubernetes objects as JSON holds them: a field that is missing or of
another type reads as empty, so a malformed object is reported by its kind's structure check with
its field path (``taugate.structure``), never as a crash where it is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def metadata_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """``obj.metadata`` when it is an object, else an empty dict (also for ``obj`` None or not an object)."""
    return as_dict(obj.get("metadata")) if isinstance(obj, Mapping) else {}


def name_of(obj: Mapping[str, Any] | None) -> str:
    """``metadata.name``, or '' without one."""
    return str(metadata_of(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.namespace``, or None for a cluster-scoped object."""
    found = metadata_of(obj).get("namespace")
    return None if found is None else str(found)


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """A copy of ``metadata.labels`` (empty without any)."""
    return dict(metadata_of(obj).get("labels") or {})


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """A copy of ``metadata.annotations`` (empty without any)."""
    return dict(metadata_of(obj).get("annotations") or {})
