"""The fields cluster state reads from Kubernetes and Kueue objects, and their types, checked
before a snapshot or a watched object is used (``shape_error``), so a wrong type is one line
naming the field instead of a crash deep in ``taugate.snapshot.build_state``.

A small schema language, hand-rolled: jsonschema took ~0.5 ms a Node, 2.5 s on a 5,000-node
snapshot; this takes ~10 us. A schema is a type name ("string", "boolean", "quantity": a
non-negative Kubernetes quantity up to ``MAX_QUANTITY``, "object", "any"), a list ``[item
schema]`` for an array, or a dict ``{field: schema}`` for an object whose listed fields are
checked when present (a trailing "!" on a field name: required); ``{"*": schema}`` checks every
value of a map. Field types follow the Go API types: core/v1 Node, Kueue v1beta2 LocalQueue,
ClusterQueue and ResourceFlavor (sigs.k8s.io/kueue apis/kueue/v1beta2; a snapshot may still hold
v1beta1 objects, whose ClusterQueue names its cohort ``cohort``).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from taugate.fieldpath import field_path
from taugate.pods import quantity
from taugate.shape import json_type

_LABELS = {"*": "string"}
_META = {"name!": "string", "namespace": "string", "labels": _LABELS, "annotations": _LABELS}
_TAINT = {"key!": "string", "value": "string", "effect": "string"}
_TOLERATION = {"key": "string", "operator": "string", "value": "string", "effect": "string"}
_SELECTOR = {"matchLabels": _LABELS, "matchExpressions": [{"key!": "string", "operator!": "string",
                                                           "values": ["string"]}]}
_USAGE = [{"name!": "string", "resources": [{"name!": "string", "total": "quantity", "borrowed": "quantity"}]}]
_SHAPES: dict[str, dict[str, Any]] = {
    "Node": {"metadata!": _META,
             "spec": {"unschedulable": "boolean", "taints": [_TAINT]},
             "status": {"allocatable": {"*": "quantity"}, "capacity": {"*": "quantity"},
                        "conditions": [{"type!": "string", "status!": "string"}]}},
    "LocalQueue": {"metadata!": _META, "spec!": {"clusterQueue!": "string"}},
    "ClusterQueue": {"metadata!": _META,
                     "spec": {"cohort": "string", "cohortName": "string", "namespaceSelector": _SELECTOR,
                              "queueingStrategy": "string",
                              "resourceGroups": [{"coveredResources": ["string"], "flavors": [{
                                  "name!": "string", "resources": [{
                                      "name!": "string", "nominalQuota": "quantity", "borrowingLimit": "quantity",
                                      "lendingLimit": "quantity"}]}]}]},
                     "status": {"flavorsUsage": _USAGE, "flavorsReservation": _USAGE}},
    "ResourceFlavor": {"metadata!": _META,
                       "spec": {"nodeLabels": _LABELS, "nodeTaints": [_TAINT], "tolerations": [_TOLERATION],
                                "topologyName": "string"}},
    "WorkloadPriorityClass": {"metadata!": _META},
}

MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity a snapshot may hold (Kubernetes quantities are int64-backed)."""

_JSON_TYPES = {"string": str, "boolean": bool}


Problem = tuple[tuple[str | int, ...], str]
"""Where (a path of keys and indices) and what."""


def _shape_problem(value: Any, schema: Any, path: tuple[str | int, ...]) -> Problem | None:
    if isinstance(schema, str):
        return _type_problem(value, schema, path)
    if isinstance(schema, list):
        if type(value) is not list:
            return path, f"is {json_type(value)} ({_shown(value)}); it must be an array"
        return _first(_shape_problem(item, schema[0], (*path, i)) for i, item in enumerate(value))
    if type(value) is not dict:
        return path, f"is {json_type(value)} ({_shown(value)}); it must be an object"
    every = schema.get("*")
    if every is not None:
        return _first(_shape_problem(v, every, (*path, k)) for k, v in value.items())
    return _fields_problem(value, schema, path)


def _first(problems: Iterable[Problem | None]) -> Problem | None:
    return next((p for p in problems if p), None)


def _type_problem(value: Any, schema: str, path: tuple[str | int, ...]) -> Problem | None:
    """A scalar type name: "any", "quantity" (0 to ``MAX_QUANTITY``), "string", "boolean"."""
    if schema == "any":
        return None
    if schema == "quantity":
        q = quantity(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
        if q is None or not q.is_finite() or q < 0 or q > MAX_QUANTITY:
            return path, (f"is {json_type(value)} ({_shown(value)}); it must be a Kubernetes quantity from 0 to "
                          f"{MAX_QUANTITY} (e.g. 8, 500m, 64Gi)")
        return None
    if type(value) is not _JSON_TYPES[schema]:
        return path, f"is {json_type(value)} ({_shown(value)}); it must be a {schema}"
    return None


def _fields_problem(value: dict[str, Any], schema: dict[str, Any], path: tuple[str | int, ...]) -> Problem | None:
    """An object's listed fields, in schema order; a name ending in "!" is required."""
    for name, sub in schema.items():
        key = name.rstrip("!")
        v = value.get(key)
        if v is None:
            if name.endswith("!"):
                return (*path, key), "is missing; it is required"
            continue
        found = _shape_problem(v, sub, (*path, key))
        if found:
            return found
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def shape_error(obj: dict[str, Any]) -> str | None:
    """The first type problem of a Node, LocalQueue, ClusterQueue or ResourceFlavor, as
    ``field: problem`` (a Kubernetes field path); None when it has the shape cluster state
    reads (``_SHAPES``), and for other kinds."""
    kind = obj.get("kind")
    schema = _SHAPES.get(kind) if isinstance(kind, str) else None
    found = _shape_problem(obj, schema, ()) if schema else None
    if found is None:
        return None
    return f"{field_path(found[0]) or '(object)'}: {found[1]}"
