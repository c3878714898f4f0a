"""Structure checks: does an object have the types its API gives it, where admission reads or writes?

The API server checks an object against its schema only after the mutating webhooks have run,
so they see objects exactly as a client sent them. ``Shape`` collects ``(field path, problem)``
for every field that does not have its API type (core/v1 pod templates here; each workload kind
in ``taugate.kinds`` checks its own spec with it), so a bad object is denied with the path, never
crashes the webhook. ``object_depth_problem`` and ``json_problem`` find values no Kubernetes
object can hold at all.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from taugate.fieldpath import Path, field_path
from taugate.pods import quantity


def json_type(value: Any) -> str:
    """The JSON name of a value's type: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


MAX_DEPTH = 100
"""How deep an object may nest (levels below its root). Kubernetes objects nest ~20 levels (a
pod template's affinity is among the deepest). A review nested past 255 levels is HTTP 400
(orjson's limit). Checking depth costs ~70 us a RayJob, too much for every request, so it is
checked where depth breaks something: when the policy engine (whose JSON reader stops at 128
levels) or a copy fails on an object, and for every object ``taugate admit`` reads; an object
past ``MAX_DEPTH`` is then denied naming the path (``object_depth_problem``), never a 500."""

INT64 = (-(2**63), 2**63 - 1)
"""The range of a Kubernetes integer field (int64; apimachinery decodes JSON numbers into it)."""


def _short(value: Any) -> str:
    """``repr`` of a value quoted in a problem, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def object_depth_problem(obj: Any, limit: int = MAX_DEPTH) -> tuple[str, str] | None:
    """``(field path, problem)`` for the first place ``obj`` nests deeper than ``limit``
    levels, or None. Iterative (no recursion limit), stops at the first such place."""
    stack: list[tuple[Any, Path]] = [(obj, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > limit:
            return field_path(path[:limit + 1]), (f"nests more than {limit} levels deep; Kubernetes objects nest about "
                                                  f"20 levels, taugate reads up to {limit}")
        if type(value) is dict:
            stack.extend((v, path + (k,)) for k, v in value.items())
        elif type(value) is list:
            stack.extend((v, path + (i,)) for i, v in enumerate(value))
    return None


def json_problem(obj: Any) -> str | None:
    """One line naming the first value of ``obj`` that no Kubernetes object can hold: nesting
    past ``MAX_DEPTH``, or an integer outside int64 (``INT64``); None when there is none."""
    deep = object_depth_problem(obj)
    if deep:
        return f"{deep[0]}: {deep[1]}"
    stack: list[tuple[Any, Path]] = [(obj, ())]
    while stack:
        value, path = stack.pop()
        if type(value) is dict:
            stack.extend((v, path + (k,)) for k, v in value.items())
        elif type(value) is list:
            stack.extend((v, path + (i,)) for i, v in enumerate(value))
        elif type(value) is int and not INT64[0] <= value <= INT64[1]:
            return f"{field_path(path)}: {value} is outside the 64-bit integer range of Kubernetes fields"
    return None



# A non-negative Kubernetes quantity (apimachinery resource.Quantity grammar): a decimal number,
# then a binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent.
_QUANTITY = re.compile(r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


@lru_cache(maxsize=1024)
def _quantity_text(raw: str) -> bool:
    """True when ``raw`` matches the quantity grammar; the same few strings ("1", "8Gi")
    recur on every request, so the answers are remembered."""
    return _QUANTITY.match(raw) is not None


class Shape:
    """Collects type problems as ``(field path, problem)``.

    Admission runs this on every object, so the usual case (a well-typed field) is an inline
    ``type(...) is`` test and field paths are only built for problems."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, path: Path, problem: str) -> None:
        self.problems.append((field_path(path), problem))

    def obj(self, value: Any, path: Path, *, required: bool = False) -> bool:
        """True when ``value`` is an object; a problem when it is something else (or missing
        and required)."""
        if isinstance(value, dict):
            return True
        if value is not None or required:
            self.bad(path, "is missing; it is required" if value is None else f"is {json_type(value)}; it must be an object")
        return False

    def array(self, value: Any, path: Path) -> bool:
        if isinstance(value, list):
            return True
        if value is not None:
            self.bad(path, f"is {json_type(value)}; it must be an array")
        return False

    def objects(self, items: Any, path: Path) -> None:
        """An array (or absent) whose items are all objects."""
        if type(items) is list:
            for i, item in enumerate(items):
                if type(item) is not dict:
                    self.obj(item, path + (i,), required=True)
        elif items is not None:
            self.array(items, path)

    def string_map(self, value: Any, path: Path) -> None:
        if type(value) is not dict:
            if value is not None:
                self.obj(value, path)
            return
        for k, v in value.items():
            if type(v) is not str:
                self.bad(path + (k,), f"is {json_type(v)}; label, annotation and selector values must be strings")

    def scalar(self, value: Any, path: Path, typ: type, what: str, minimum: int | None = None,
               maximum: int | None = None) -> None:
        if value is None:
            return
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            self.bad(path, f"is {json_type(value)} ({_short(value)}); it must be {what}")
        elif (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.bad(path, f"is {value}; it must be {what}")

    def strings(self, value: Any, path: Path) -> None:
        """An array (or absent) of strings."""
        if type(value) is list:
            for i, item in enumerate(value):
                if type(item) is not str:
                    self.bad(path + (i,), f"is {json_type(item)} ({_short(item)}); it must be a string")
        elif value is not None:
            self.array(value, path)

    def selector_terms(self, terms: Any, path: Path) -> None:
        """core/v1 NodeSelectorTerms: objects whose ``matchExpressions``/``matchFields`` are
        NodeSelectorRequirements (``key``, ``operator`` strings; ``values`` strings)."""
        self.objects(terms, path)
        for i, term in enumerate(terms if type(terms) is list else ()):
            if type(term) is not dict:
                continue
            for key in ("matchExpressions", "matchFields"):
                reqs = term.get(key)
                self.objects(reqs, path + (i, key))
                for j, req in enumerate(reqs if type(reqs) is list else ()):
                    if type(req) is not dict:
                        continue
                    for name in ("key", "operator"):
                        if type(req.get(name)) is not str:
                            self.scalar(req.get(name), path + (i, key, j, name), str, "a string")
                    self.strings(req.get("values"), path + (i, key, j, "values"))

    def affinity(self, affinity: Any, path: Path) -> None:
        """core/v1 Affinity, as far as placement reads it: ``nodeAffinity``'s required
        ``nodeSelectorTerms`` and preferred ``{weight, preference}`` terms."""
        if not self.obj(affinity, path):
            return
        node = affinity.get("nodeAffinity")
        if not self.obj(node, path + ("nodeAffinity",)):
            return
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
        rpath = path + ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
        if self.obj(required, rpath):
            self.selector_terms(required.get("nodeSelectorTerms"), rpath + ("nodeSelectorTerms",))
        preferred = node.get("preferredDuringSchedulingIgnoredDuringExecution")
        ppath = path + ("nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
        self.objects(preferred, ppath)
        for i, p in enumerate(preferred if type(preferred) is list else ()):
            if type(p) is dict:
                self.scalar(p.get("weight"), ppath + (i, "weight"), int, "a whole number from 1 to 100", 1, 100)
                if self.obj(p.get("preference"), ppath + (i, "preference")):
                    self.selector_terms([p["preference"]], ppath + (i,))  # reported under preference[...]

    def tolerations(self, items: Any, path: Path) -> None:
        """core/v1 Tolerations: ``key``, ``operator``, ``value``, ``effect`` strings and
        ``tolerationSeconds`` an int64."""
        self.objects(items, path)
        for i, t in enumerate(items if type(items) is list else ()):
            if type(t) is not dict:
                continue
            for name in ("key", "operator", "value", "effect"):
                if t.get(name) is not None and type(t[name]) is not str:
                    self.scalar(t[name], path + (i, name), str, "a string")
            seconds = t.get("tolerationSeconds")
            if seconds is not None and type(seconds) is not int or (type(seconds) is int and not INT64[0] <= seconds <= INT64[1]):
                self.scalar(seconds, path + (i, "tolerationSeconds"), int, "a whole number of seconds (int64)",
                            INT64[0], INT64[1])

    def meta(self, meta: Any, path: Path) -> None:
        if not self.obj(meta, path):
            return
        for key in ("name", "generateName", "namespace"):
            value = meta.get(key)
            if value is not None and type(value) is not str:
                self.scalar(value, path + (key,), str, "a string")
        self.string_map(meta.get("labels"), path + ("labels",))
        self.string_map(meta.get("annotations"), path + ("annotations",))

    def quantities(self, resources: Any, path: Path) -> None:
        if not self.obj(resources, path):
            return
        for which in ("requests", "limits"):
            values = resources.get(which)
            if values is None:
                continue
            if type(values) is not dict and not self.obj(values, path + (which,)):
                continue
            for name, raw in values.items():
                if (type(raw) is str and _quantity_text(raw)) or (type(raw) is int and raw >= 0):
                    continue  # the usual case, without parsing
                q = quantity(raw) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
                if q is None:
                    self.bad(path + (which, name), f"is {json.dumps(raw)}, which is not a Kubernetes quantity "
                                                   f"(e.g. 2, 500m, 8Gi)")
                elif q < 0:
                    self.bad(path + (which, name), f"is {raw}; quantities must not be negative")

    def pod_template(self, template: Any, path: Path) -> None:
        if not self.obj(template, path, required=True):
            return
        if template.get("metadata") is not None:
            self.meta(template["metadata"], path + ("metadata",))
        spec = template.get("spec")
        if not self.obj(spec, path + ("spec",), required=True):
            return
        self.string_map(spec.get("nodeSelector"), path + ("spec", "nodeSelector"))
        if spec.get("affinity") is not None:
            self.affinity(spec["affinity"], path + ("spec", "affinity"))
        if spec.get("tolerations") is not None:
            self.tolerations(spec["tolerations"], path + ("spec", "tolerations"))
        self.objects(spec.get("volumes"), path + ("spec", "volumes"))
        for key in ("containers", "initContainers"):
            items = spec.get(key)
            if key == "containers" and (items is None or items == []):
                self.bad(path + ("spec", key), "is missing or empty; a pod needs at least one container")
                continue
            if items is None:
                continue
            if type(items) is not list:
                self.array(items, path + ("spec", key))
                continue
            for i, c in enumerate(items):
                if type(c) is not dict:
                    self.obj(c, path + ("spec", key, i), required=True)
                    continue
                name = c.get("name")
                if name is not None and type(name) is not str:
                    self.scalar(name, path + ("spec", key, i, "name"), str, "a string")
                if c.get("resources") is not None:
                    self.quantities(c["resources"], path + ("spec", key, i, "resources"))
                mounts = c.get("volumeMounts")
                if mounts is not None:
                    self.objects(mounts, path + ("spec", key, i, "volumeMounts"))

