"""Structure checks: does an object have the types its API gives it, where taugate reads or writes?

One rule for checking structure in taugate: pydantic for taugate's own kinds (TauCluster,
TauWorkspace, TauQuotaRequest, TauRun in ``taugate.models`` and ``taugate.run_models``, which also
generate their CRDs), ``Shape`` here for everyone else's objects (core/v1, batch/v1, KubeRay,
Kueue). Their schemas belong to their owners and taugate reads a few fields of each, so a
hand-written check of exactly those fields is both the fastest and the clearest.

The API server checks an object against its schema only after the mutating webhooks have run,
so they see objects exactly as a client sent them. ``Shape`` collects ``(field path, problem)``
for every field that does not have its API type (core/v1 pod templates here; each workload kind
in ``taugate.kinds`` checks its own spec with it), so a bad object is denied with the path, never
crashes the webhook. Cluster state checks the Node and Kueue objects it reads the same way
(``state_object_problem``, on a snapshot's objects), so a wrong type is one line naming the field
instead of a crash deep in ``taugate.snapshot.build_state``. ``object_depth_problem`` and
``json_problem`` find values no Kubernetes object can hold at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeGuard

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


MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity cluster state reads (Kubernetes quantities are int64-backed)."""


def _bounded(q: Decimal | None) -> bool:
    return q is not None and q.is_finite() and 0 <= q <= MAX_QUANTITY


@lru_cache(maxsize=1024)
def _bounded_text(raw: str) -> bool:
    """True when ``raw`` is a quantity from 0 to ``MAX_QUANTITY``; a Node's "96", "1800Gi"
    recur on every node of a snapshot, so the answers are remembered."""
    return _bounded(quantity(raw))


class Shape:
    """Collects type problems as ``(field path, problem)``.

    Admission runs this on every object, so the usual case (a well-typed field) is an inline
    ``type(...) is`` test and field paths are only built for problems."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, path: Path, problem: str) -> None:
        self.problems.append((field_path(path), problem))

    def obj(self, value: Any, path: Path, *, required: bool = False) -> TypeGuard[dict[str, Any]]:
        """True (and ``value`` typed as an object) when ``value`` is an object; a problem when it
        is something else (or missing and required)."""
        if isinstance(value, dict):
            return True
        if value is not None or required:
            self.bad(path, "is missing; it is required" if value is None
                     else f"is {json_type(value)}; it must be an object")
        return False

    def array(self, value: Any, path: Path) -> TypeGuard[list[Any]]:
        """True when ``value`` is an array; a problem when it is something else (absent is no problem)."""
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
        elif isinstance(value, int) and ((minimum is not None and value < minimum)
                                         or (maximum is not None and value > maximum)):
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
            if seconds is not None and not (type(seconds) is int and INT64[0] <= seconds <= INT64[1]):
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


    # Other owners' objects in cluster state: core/v1 Node and Kueue's LocalQueue, ClusterQueue,
    # ResourceFlavor and WorkloadPriorityClass, as far as ``taugate.snapshot`` reads them. Field
    # types follow the Go API types (sigs.k8s.io/kueue apis/kueue/v1beta2; a snapshot may still
    # hold v1beta1 objects, whose ClusterQueue names its cohort ``cohort``).

    def each(self, items: Any, path: Path) -> Iterator[tuple[dict[str, Any], Path]]:
        """``(item, path)`` for each object of the array ``items`` (absent: none); a problem for
        an array of something else, or for an item that is not an object."""
        self.objects(items, path)
        if type(items) is list:
            for i, item in enumerate(items):
                if type(item) is dict:
                    yield item, path + (i,)

    def string(self, value: Any, path: Path, *, required: bool = False) -> None:
        """A string field; absent is a problem only when ``required``."""
        if value is None:
            if required:
                self.bad(path, "is missing; it is required")
        elif type(value) is not str:
            self.scalar(value, path, str, "a string")

    def bounded_quantity(self, value: Any, path: Path) -> None:
        """A Kubernetes quantity from 0 to ``MAX_QUANTITY`` (absent: no problem)."""
        if value is None:
            return
        if type(value) is str:
            if _bounded_text(value):
                return
        elif type(value) in (int, float) and _bounded(quantity(value)):  # a boolean is no quantity
            return
        self.bad(path, f"is {json_type(value)} ({_short(value)}); it must be a Kubernetes quantity from 0 to "
                       f"{MAX_QUANTITY} (e.g. 8, 500m, 64Gi)")

    def quantity_map(self, value: Any, path: Path) -> None:
        """An object (or absent) of resource name to ``bounded_quantity``."""
        if self.obj(value, path):
            for name, q in value.items():
                self.bounded_quantity(q, path + (name,))

    def named_meta(self, meta: Any, path: Path) -> None:
        """``metadata`` (required) with a required string ``name`` (``meta``'s checks otherwise)."""
        if self.obj(meta, path, required=True):
            self.meta(meta, path)
            self.string(meta.get("name"), path + ("name",), required=True)

    def taints(self, items: Any, path: Path) -> None:
        """core/v1 Taints: ``key`` (required), ``value``, ``effect`` strings."""
        for taint, tpath in self.each(items, path):
            self.string(taint.get("key"), tpath + ("key",), required=True)
            self.string(taint.get("value"), tpath + ("value",))
            self.string(taint.get("effect"), tpath + ("effect",))

    def node(self, obj: dict[str, Any]) -> None:
        """core/v1 Node: ``spec.unschedulable``, ``spec.taints``, ``status.allocatable`` and
        ``capacity`` (quantities), ``status.conditions`` (``type`` and ``status`` strings)."""
        self.named_meta(obj.get("metadata"), ("metadata",))
        spec, status = obj.get("spec"), obj.get("status")
        if self.obj(spec, ("spec",)):
            self.scalar(spec.get("unschedulable"), ("spec", "unschedulable"), bool, "true or false")
            self.taints(spec.get("taints"), ("spec", "taints"))
        if self.obj(status, ("status",)):
            self.quantity_map(status.get("allocatable"), ("status", "allocatable"))
            self.quantity_map(status.get("capacity"), ("status", "capacity"))
            for condition, cpath in self.each(status.get("conditions"), ("status", "conditions")):
                self.string(condition.get("type"), cpath + ("type",), required=True)
                self.string(condition.get("status"), cpath + ("status",), required=True)

    def local_queue(self, obj: dict[str, Any]) -> None:
        """Kueue LocalQueue: ``spec.clusterQueue``, a required string."""
        self.named_meta(obj.get("metadata"), ("metadata",))
        spec = obj.get("spec")
        if self.obj(spec, ("spec",), required=True):
            self.string(spec.get("clusterQueue"), ("spec", "clusterQueue"), required=True)

    def cluster_queue(self, obj: dict[str, Any]) -> None:
        """Kueue ClusterQueue: cohort, namespace selector, queueing strategy, the quotas of
        ``spec.resourceGroups`` and the usage in ``status.flavorsUsage``/``flavorsReservation``."""
        self.named_meta(obj.get("metadata"), ("metadata",))
        spec, status = obj.get("spec"), obj.get("status")
        if self.obj(spec, ("spec",)):
            for key in ("cohort", "cohortName", "queueingStrategy"):
                self.string(spec.get(key), ("spec", key))
            selector = spec.get("namespaceSelector")
            if self.obj(selector, ("spec", "namespaceSelector")):
                self.string_map(selector.get("matchLabels"), ("spec", "namespaceSelector", "matchLabels"))
                for req, rpath in self.each(selector.get("matchExpressions"),
                                            ("spec", "namespaceSelector", "matchExpressions")):
                    self.string(req.get("key"), rpath + ("key",), required=True)
                    self.string(req.get("operator"), rpath + ("operator",), required=True)
                    self.strings(req.get("values"), rpath + ("values",))
            for group, gpath in self.each(spec.get("resourceGroups"), ("spec", "resourceGroups")):
                self.strings(group.get("coveredResources"), gpath + ("coveredResources",))
                for flavor, fpath in self.each(group.get("flavors"), gpath + ("flavors",)):
                    self.string(flavor.get("name"), fpath + ("name",), required=True)
                    for res, rpath in self.each(flavor.get("resources"), fpath + ("resources",)):
                        self.string(res.get("name"), rpath + ("name",), required=True)
                        for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                            self.bounded_quantity(res.get(key), rpath + (key,))
        if self.obj(status, ("status",)):
            for key in ("flavorsUsage", "flavorsReservation"):
                for usage, upath in self.each(status.get(key), ("status", key)):
                    self.string(usage.get("name"), upath + ("name",), required=True)
                    for res, rpath in self.each(usage.get("resources"), upath + ("resources",)):
                        self.string(res.get("name"), rpath + ("name",), required=True)
                        self.bounded_quantity(res.get("total"), rpath + ("total",))
                        self.bounded_quantity(res.get("borrowed"), rpath + ("borrowed",))

    def resource_flavor(self, obj: dict[str, Any]) -> None:
        """Kueue ResourceFlavor: ``spec.nodeLabels``, ``nodeTaints``, ``tolerations``, ``topologyName``."""
        self.named_meta(obj.get("metadata"), ("metadata",))
        spec = obj.get("spec")
        if self.obj(spec, ("spec",)):
            self.string_map(spec.get("nodeLabels"), ("spec", "nodeLabels"))
            self.taints(spec.get("nodeTaints"), ("spec", "nodeTaints"))
            self.tolerations(spec.get("tolerations"), ("spec", "tolerations"))
            self.string(spec.get("topologyName"), ("spec", "topologyName"))

    def workload_priority_class(self, obj: dict[str, Any]) -> None:
        """Kueue WorkloadPriorityClass: only its name is read."""
        self.named_meta(obj.get("metadata"), ("metadata",))


STATE_KINDS: dict[str, Callable[[Shape, dict[str, Any]], None]] = {
    "Node": Shape.node, "LocalQueue": Shape.local_queue, "ClusterQueue": Shape.cluster_queue,
    "ResourceFlavor": Shape.resource_flavor, "WorkloadPriorityClass": Shape.workload_priority_class,
}
"""The other owners' kinds cluster state reads, and their checks."""


def state_object_problem(obj: dict[str, Any]) -> str | None:
    """The first type problem of a Node, LocalQueue, ClusterQueue, ResourceFlavor or
    WorkloadPriorityClass (``STATE_KINDS``) as one line, ``field: problem`` (a Kubernetes field
    path); None when it has the shape cluster state reads, and for other kinds."""
    kind = obj.get("kind")
    check = STATE_KINDS.get(kind) if isinstance(kind, str) else None
    if check is None:
        return None
    shape = Shape()
    check(shape, obj)
    return f"{shape.problems[0][0]}: {shape.problems[0][1]}" if shape.problems else None
