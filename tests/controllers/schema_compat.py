"""Is one CRD structural schema at least as permissive as another? (test helper, pure)

``widening_problems(theirs, ours)`` walks both ``openAPIV3Schema`` trees side by side and lists
every place where ``ours`` could reject an object that ``theirs`` accepts: a missing property
(pruned by the API server), a different type, a narrower enum, an extra required field, a
tighter bound or pattern, a CEL rule or list-type uniqueness that ``theirs`` does not have.
An empty list means every object valid under ``theirs`` is valid under ``ours`` (for the
constructs CRD structural schemas use).

``example_instance(schema)`` builds an object that fills every property of a schema with a valid
value (the maximal object), to validate against the other schema.
"""

from __future__ import annotations

from typing import Any

_BOUNDS_MIN = ("minimum", "minLength", "minItems", "minProperties")
_BOUNDS_MAX = ("maximum", "maxLength", "maxItems", "maxProperties")


def _types(s: dict) -> set[str]:
    if s.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    t = s.get("type")
    return {t} if t else set()


def widening_problems(theirs: dict, ours: dict, path: str = "") -> list[str]:
    """Places where ``ours`` is stricter than ``theirs`` (empty: ours accepts all theirs accepts)."""
    here = path or "<root>"
    if ours.get("x-kubernetes-preserve-unknown-fields") and not ours.get("properties") and not ours.get("type"):
        return []  # ours accepts any value here
    their_types, our_types = _types(theirs), _types(ours)
    if their_types and our_types and not their_types <= our_types:
        return [f"{here}: type {sorted(their_types)} is not accepted by ours {sorted(our_types)}"]
    return _value_problems(theirs, ours, here) + _list_type_problems(theirs, ours, here) + \
        _nested_problems(theirs, ours, path)


def _value_problems(theirs: dict, ours: dict, here: str) -> list[str]:
    """Enums, required fields, bounds, patterns, formats and CEL rules of one node."""
    out: list[str] = []
    if "enum" in ours and ("enum" not in theirs or not set(theirs["enum"]) <= set(ours["enum"])):
        out.append(f"{here}: our enum {ours['enum']} is narrower than theirs {theirs.get('enum', 'any')}")
    missing_required = set(ours.get("required") or []) - set(theirs.get("required") or [])
    if missing_required:
        out.append(f"{here}: we require {sorted(missing_required)}, they do not")
    for key in _BOUNDS_MIN:
        if key in ours and (key not in theirs or theirs[key] < ours[key]):
            out.append(f"{here}: our {key} {ours[key]} is tighter than theirs {theirs.get(key)}")
    for key in _BOUNDS_MAX:
        if key in ours and (key not in theirs or theirs[key] > ours[key]):
            out.append(f"{here}: our {key} {ours[key]} is tighter than theirs {theirs.get(key)}")
    if "pattern" in ours and ours["pattern"] != theirs.get("pattern"):
        out.append(f"{here}: our pattern {ours['pattern']!r} differs from theirs {theirs.get('pattern')!r}")
    if "format" in ours and ours["format"] != theirs.get("format"):
        out.append(f"{here}: our format {ours['format']!r} is not theirs {theirs.get('format')!r}")
    their_rules = {r.get("rule") for r in theirs.get("x-kubernetes-validations") or []}
    for rule in ours.get("x-kubernetes-validations") or []:
        if rule.get("rule") not in their_rules:
            out.append(f"{here}: our CEL rule {rule.get('rule')!r} is not one of theirs")
    return out


def _list_type_problems(theirs: dict, ours: dict, here: str) -> list[str]:
    """A ``set`` or ``map`` list type of ours that theirs does not share (with the same keys)."""
    our_lt = ours.get("x-kubernetes-list-type")
    if our_lt not in ("set", "map"):
        return []
    their_lt = theirs.get("x-kubernetes-list-type")
    if their_lt != our_lt or (our_lt == "map" and sorted(theirs.get("x-kubernetes-list-map-keys") or [])
                              != sorted(ours.get("x-kubernetes-list-map-keys") or [])):
        return [f"{here}: our list type {our_lt} {ours.get('x-kubernetes-list-map-keys', '')} "
                f"is stricter than theirs {their_lt}"]
    return []


def _nested_problems(theirs: dict, ours: dict, path: str) -> list[str]:
    """Properties, additionalProperties and items, compared recursively."""
    out: list[str] = []
    here = path or "<root>"
    their_props = theirs.get("properties") or {}
    our_props = ours.get("properties") or {}
    preserve = bool(ours.get("x-kubernetes-preserve-unknown-fields"))
    for name, sub in their_props.items():
        if path == "" and name == "metadata":
            continue
        if name in our_props:
            out += widening_problems(sub, our_props[name], f"{path}.{name}" if path else name)
        elif not preserve:
            out.append(f"{path}.{name}: a field of theirs we do not have (the API server would prune it)"
                       if path else f"{name}: a field of theirs we do not have")
    if isinstance(theirs.get("additionalProperties"), dict):
        ours_add = ours.get("additionalProperties")
        if isinstance(ours_add, dict):
            out += widening_problems(theirs["additionalProperties"], ours_add, f"{here}[*]")
        elif not preserve:
            out.append(f"{here}: they allow free-form keys, we do not")
    if isinstance(theirs.get("items"), dict):
        if isinstance(ours.get("items"), dict):
            out += widening_problems(theirs["items"], ours["items"], f"{here}[]")
        else:
            out.append(f"{here}: they have list items, we do not")
    return out


def example_instance(schema: dict, name: str = "x") -> Any:
    """A value valid under ``schema`` that sets every property it declares (pure, deterministic).

    Honors ``default``, ``enum``, int-or-string, minimums and list-map keys well enough for the
    TauGrid schemas; CEL rules are not evaluated (the caller picks values that satisfy them)."""
    if "default" in schema and not isinstance(schema["default"], dict):
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    t = schema.get("type")
    if t == "object":
        props = schema.get("properties") or {}
        if not props:
            add = schema.get("additionalProperties")
            if isinstance(add, dict):
                return {f"{name}-key": example_instance(add, name)}
            return {}
        return {k: example_instance(v, k) for k, v in props.items()}
    if t == "array":
        return [example_instance(schema.get("items") or {}, name)]
    if t == "integer":
        return max(int(schema.get("minimum", 1)), 1)
    if t == "number":
        return float(max(schema.get("minimum", 1), 1))
    if t == "boolean":
        return False
    if t == "string":
        if schema.get("format") == "date-time":
            return "2026-01-01T00:00:00Z"
        if "pattern" in schema and "[KMGTPE]i" in schema["pattern"]:
            return "1"
        if "pattern" in schema and schema["pattern"].startswith("^[A-Za-z]"):
            return "Reason"
        return name.lower() if name else "x"
    return None
