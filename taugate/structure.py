"""Structure checks: does an object have the types its API gives it, where taugate reads or writes?

The API server checks an object against its schema only after the mutating webhooks run, so they
see objects as a client sent them; a bad field is denied naming its path, never a crash.

A new kind's ``spec_model``: a ``TypedDict`` (``total=False``, from ``typing_extensions``, which
pydantic needs on Python 3.11) of every field ``pod_templates`` and ``checks`` read, typed from
the Go API types: ``*int32`` -> ``Int32 | None``, ``*bool`` -> ``bool | None``, a
``corev1.PodTemplateSpec`` -> ``PodTemplateSpec``, a required field -> ``Required[...]`` without
``None`` (an optional pointer, slice or map takes ``| None``: null is absent). A rule across fields
is an ``AfterValidator`` raising ``PydanticCustomError`` with a message starting ``is ...`` (its
``at`` context names the field, as ``RayJobSpec`` does). ``tests/admission/test_structure.py``
has a sketch.
"""
from __future__ import annotations

import json
import re
from decimal import Decimal
from functools import lru_cache
from typing import Annotated, Any, Literal, NotRequired, Required

from pydantic import AfterValidator, Field, PlainValidator, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs this TypedDict on Python 3.11

from taugate.fieldpath import Path, field_path, loc_path
from taugate.memo import Memo
from taugate.pods import INT32_MAX, json_bytes, quantity


def json_type(value: Any) -> str:
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


def _short(value: Any) -> str:
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


# --- Annotated types: ranges and grammars, with taugate's messages --------------------------------

INT64 = (-(2**63), 2**63 - 1)
"""A Kubernetes integer field's range (int64; apimachinery decodes JSON numbers into it)."""


def whole_number(lo: int, hi: int, what: str) -> PlainValidator:
    """An ``Annotated`` int from ``lo`` to ``hi`` (never a boolean or a float); ``what`` is the
    allowed range in words."""
    def check(value: Any) -> int:
        if type(value) is int and lo <= value <= hi:
            return value
        asked = str(value) if type(value) is int else f"{json_type(value)} ({_short(value)})"
        raise PydanticCustomError("whole_number", "is {asked}; it must be {what}", {"asked": asked, "what": what})
    return PlainValidator(check)


Int32 = Annotated[int, whole_number(0, INT32_MAX, f"a whole number from 0 to {INT32_MAX} (int32)")]
"""A count the Go API types as ``*int32`` and that is never negative (replicas, parallelism)."""
PositiveInt32 = Annotated[int, whole_number(1, INT32_MAX, f"a whole number from 1 to {INT32_MAX} (int32)")]
"""An ``*int32`` of at least 1 (KubeRay's ``numOfHosts``)."""
Weight = Annotated[int, whole_number(1, 100, "a whole number from 1 to 100")]
"""core/v1 ``PreferredSchedulingTerm.weight``."""
Seconds = Annotated[int, whole_number(*INT64, "a whole number of seconds (int64)")]
"""An ``*int64`` of seconds (``Toleration.tolerationSeconds``)."""

# A non-negative Kubernetes quantity (apimachinery resource.Quantity grammar): a decimal number,
# then a binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent.
_QUANTITY = re.compile(r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


@lru_cache(maxsize=1024)
def _quantity_text(raw: str) -> bool:
    """Remembered: the same few strings ("1", "8Gi") recur on every request."""
    return _QUANTITY.match(raw) is not None


def _quantity(raw: Any) -> Any:
    if (type(raw) is str and _quantity_text(raw)) or (type(raw) is int and raw >= 0):
        return raw  # the usual case, without parsing
    q = quantity(raw) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    if q is None:
        raise PydanticCustomError("quantity", "is {asked}, which is not a Kubernetes quantity (e.g. 2, 500m, 8Gi)",
                                  {"asked": json_type(raw) if isinstance(raw, (dict, list)) else _cut(json.dumps(raw))})
    if q < 0:
        raise PydanticCustomError("quantity", "is {asked}; quantities must not be negative", {"asked": raw})
    return raw


Quantity = Annotated[Any, PlainValidator(_quantity)]
"""A container's resource quantity (``resources.requests``/``limits`` values): a string in the
quantity grammar (``"500m"``, ``"8Gi"``) or a number, never negative."""

MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity cluster state reads (Kubernetes quantities are int64-backed)."""


def _bounded(q: Decimal | None) -> bool:
    return q is not None and q.is_finite() and 0 <= q <= MAX_QUANTITY


@lru_cache(maxsize=1024)
def _bounded_text(raw: str) -> bool:
    """Remembered: a Node's "96", "1800Gi" recur on every node of a snapshot."""
    return _bounded(quantity(raw))


def _bounded_quantity(value: Any) -> Any:
    if type(value) is str:
        if _bounded_text(value):
            return value
    elif type(value) in (int, float) and _bounded(quantity(value)):  # a boolean is no quantity
        return value
    raise PydanticCustomError("bounded_quantity", "is {asked}; it must be a Kubernetes quantity from 0 to {most} "
                              "(e.g. 8, 500m, 64Gi)",
                              {"asked": f"{json_type(value)} ({_short(value)})", "most": str(MAX_QUANTITY)})


BoundedQuantity = Annotated[Any, PlainValidator(_bounded_quantity)]
"""A quantity cluster state reads (Node allocatable, ClusterQueue quotas and usage): 0 to
``MAX_QUANTITY``."""

StringMap = dict[str, str]

# --- core/v1, as far as taugate reads it ------------------------------------------------------


class ObjectMeta(TypedDict, total=False):
    """meta/v1 ObjectMeta, as far as taugate reads and writes it."""

    name: str | None
    generateName: str | None
    namespace: str | None
    labels: StringMap | None
    annotations: StringMap | None
    finalizers: list[str] | None


class NamedMeta(TypedDict, total=False):
    """ObjectMeta of a stored object, whose ``name`` cluster state reads."""

    name: Required[str]
    namespace: str | None
    labels: StringMap | None
    annotations: StringMap | None


class NodeSelectorRequirement(TypedDict, total=False):
    """core/v1 NodeSelectorRequirement."""

    key: str | None
    operator: str | None
    values: list[str] | None


class NodeSelectorTerm(TypedDict, total=False):
    """core/v1 NodeSelectorTerm."""

    matchExpressions: list[NodeSelectorRequirement] | None
    matchFields: list[NodeSelectorRequirement] | None


class NodeSelector(TypedDict, total=False):
    """core/v1 NodeSelector."""

    nodeSelectorTerms: list[NodeSelectorTerm] | None


class PreferredSchedulingTerm(TypedDict, total=False):
    """core/v1 PreferredSchedulingTerm."""

    weight: Weight | None
    preference: NodeSelectorTerm | None


class NodeAffinity(TypedDict, total=False):
    """core/v1 NodeAffinity."""

    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTerm] | None


class Affinity(TypedDict, total=False):
    """core/v1 Affinity, as far as placement reads it."""

    nodeAffinity: NodeAffinity | None


class Toleration(TypedDict, total=False):
    """core/v1 Toleration."""

    key: str | None
    operator: str | None
    value: str | None
    effect: str | None
    tolerationSeconds: Seconds | None


class ResourceRequirements(TypedDict, total=False):
    """core/v1 ResourceRequirements."""

    requests: dict[str, Quantity] | None
    limits: dict[str, Quantity] | None


class Container(TypedDict, total=False):
    """core/v1 Container: its name, resources (GPU demand) and volume mounts."""

    name: str | None
    resources: ResourceRequirements | None
    volumeMounts: list[dict[str, Any]] | None


class PodSchedulingGate(TypedDict, total=False):
    """core/v1 PodSchedulingGate (Kueue holds a queued Pod with one)."""

    name: Required[str]


class PodSpec(TypedDict, total=False):
    """core/v1 PodSpec, as far as taugate reads and writes it."""

    containers: Required[list[Container]]
    initContainers: list[Container] | None
    nodeSelector: StringMap | None
    affinity: Affinity | None
    tolerations: list[Toleration] | None
    volumes: list[dict[str, Any]] | None
    schedulingGates: list[PodSchedulingGate] | None


def _some_container(spec: PodSpec) -> PodSpec:
    if not spec["containers"]:
        raise PydanticCustomError("containers", "is empty; a pod needs at least one container",
                                  {"at": "containers"})
    return spec


PodSpecWithContainers = Annotated[PodSpec, AfterValidator(_some_container)]


class PodTemplateSpec(TypedDict, total=False):
    """core/v1 PodTemplateSpec, with at least one container."""

    metadata: ObjectMeta | None
    spec: Required[PodSpecWithContainers]


# --- admission.k8s.io/v1 AdmissionReview, as the webhook reads it --------------------------------


class GroupVersionKind(TypedDict, total=False):
    """meta/v1 GroupVersionKind (``group`` "" for core/v1)."""

    group: str
    version: str
    kind: Required[Annotated[str, Field(min_length=1)]]


class AdmissionRequest(TypedDict, total=False):
    """admission/v1 ``AdmissionRequest``."""

    uid: Required[Annotated[str, Field(min_length=1)]]
    kind: Required[GroupVersionKind]
    operation: Required[Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]]
    namespace: str | None
    name: str | None
    subResource: str | None
    object: dict[str, Any] | None
    oldObject: dict[str, Any] | None
    userInfo: dict[str, Any] | None


def _carries_its_objects(req: AdmissionRequest) -> AdmissionRequest:
    """The API server sends ``object`` on a CREATE or UPDATE of the resource itself (not a
    subresource) and ``oldObject`` on such an UPDATE (k8s.io/api admission/v1 types.go)."""
    if req.get("subResource"):
        return req
    operation = req["operation"]
    if operation in ("CREATE", "UPDATE") and req.get("object") is None:
        raise PydanticCustomError("review_object", "is missing; a {operation} review carries the object",
                                  {"operation": operation, "at": "object"})
    if operation == "UPDATE" and req.get("oldObject") is None:
        raise PydanticCustomError("review_object", "is missing; an UPDATE review carries the old object",
                                  {"at": "oldObject"})
    return req


class AdmissionReviewModel(TypedDict):

    apiVersion: Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
    kind: Literal["AdmissionReview"]
    request: Annotated[AdmissionRequest, AfterValidator(_carries_its_objects)]


# --- checking: pydantic errors in taugate's words ---------------------------------------------

_MUST_BE = {"dict_type": "an object", "model_type": "an object", "list_type": "an array", "string_type": "a string",
            "bool_type": "true or false", "bool_parsing": "true or false", "int_type": "a whole number",
            "int_parsing": "a whole number", "int_from_float": "a whole number", "float_type": "a number",
            "float_parsing": "a number"}
"""What a field must be, by pydantic's type errors (strict and lax)."""


def problem(err: ErrorDetails) -> tuple[str, str]:
    """``(field path, problem)`` for one pydantic error, in taugate's words: what the field is (its
    JSON type, and the value of a scalar) and what it must be. A custom error's ``at`` context names
    a field below its ``loc``; its message (starting ``is ...``) is used as is."""
    kind, value, ctx = err["type"], err["input"], err.get("ctx") or {}
    where = field_path(loc_path(err["loc"]) + ((ctx["at"],) if "at" in ctx else ()))
    must = _MUST_BE.get(kind)
    if kind == "missing" or (must is not None and value is None):
        return where, "is missing; it is required"
    if must is None and err["msg"].startswith("is "):
        return where, err["msg"]
    asked = json_type(value) if isinstance(value, (dict, list)) else f"{json_type(value)} ({_short(value)})"
    if must is None:
        said = err["msg"].removeprefix("Value error, ")
        return where, f"is {asked}; {said[:1].lower()}{said[1:]}"
    return where, f"is {asked}; it must be {must}"


def validation_problems(error: ValidationError) -> list[tuple[str, str]]:
    return [problem(err) for err in error.errors(include_url=False)]


def first_problem(error: ValidationError) -> str:
    where, what = problem(error.errors(include_url=False)[0])
    return f"{where}: {what}" if where else what


def problems(adapter: TypeAdapter[Any], obj: Any) -> list[tuple[str, str]]:
    """``(field path, problem)`` for every field of ``obj`` without the type ``adapter``'s model
    gives it (strict: no coercion); ``[]`` when it has. ``obj`` is only read."""
    try:
        adapter.validate_python(obj, strict=True)
    except ValidationError as e:
        return validation_problems(e)
    return []


@lru_cache(maxsize=64)
def workload_adapter(spec_model: Any) -> TypeAdapter[Any]:
    """Built once per model (pydantic compiles it to Rust)."""
    # the functional form: the spec's model is only known here
    workload = TypedDict("workload", {"metadata": NotRequired[ObjectMeta | None],  # noqa: UP013
                                      "spec": Required[spec_model]}, total=False)
    return TypeAdapter(workload)


@lru_cache(maxsize=64)
def _spec_adapter(spec_model: Any) -> TypeAdapter[Any]:
    """``workload_adapter`` without ``metadata``, so problems carry their ``spec.`` paths."""
    return TypeAdapter(TypedDict("workload_spec", {"spec": Required[spec_model]}))  # type: ignore[operator]  # noqa: UP013


_METADATA: TypeAdapter[Any] = TypeAdapter(TypedDict("workload_metadata",  # type: ignore[operator]  # noqa: UP013
                                                    {"metadata": NotRequired[ObjectMeta | None]}))

ADMISSION_REVIEW: TypeAdapter[AdmissionReviewModel] = TypeAdapter(AdmissionReviewModel)

SPEC_MEMO_SIZE = 256
"""Specs whose problems are remembered (``workload_problems``); the memo starts again when full."""

_spec_memo: Memo[tuple[int, bytes], tuple[Any, list[tuple[str, str]]]] = Memo(SPEC_MEMO_SIZE)
"""Keyed by the identity of the kind's ``spec_model`` (kept in the entry) and the spec's bytes."""


def workload_problems(spec_model: Any, obj: Any, spec_json: bytes | None = None) -> list[tuple[str, str]]:
    """``(field path, problem)`` for every field of a workload ``obj`` without its API type: the
    metadata's first, then the spec's.

    A spec's problems are remembered by its JSON bytes (the validating webhook sees what the
    mutating one saw; an UPDATE leaves the spec alone). Equal bytes mean equal JSON values of equal
    JSON types (orjson writes ``1`` and ``1.0``, ``true`` and ``1`` apart), all a strict check
    reads. Depth comes first, before pydantic or a message formats any value."""
    if type(obj) is not dict:
        return problems(workload_adapter(spec_model), obj)
    spec = obj.get("spec")
    rest = {k: v for k, v in obj.items() if k != "spec"}  # metadata, status, anything else: small
    deep = object_depth_problem(rest)
    if deep:
        return [deep]
    if type(spec) is not dict:
        return [deep] if (deep := object_depth_problem(obj)) else problems(workload_adapter(spec_model), obj)
    if spec_json is None:
        spec_json = json_bytes(spec)
    if spec_json is None:
        return [deep] if (deep := object_depth_problem(obj)) else problems(workload_adapter(spec_model), obj)
    key = (id(spec_model), spec_json)  # the model by identity: hashing a typing alias runs Python code
    hit = _spec_memo.get(key)
    if hit is not None and hit[0] is spec_model:
        found = hit[1]
    else:
        deep = object_depth_problem({"spec": spec})
        found = [deep] if deep else problems(_spec_adapter(spec_model), {"spec": spec})
        _spec_memo.put(key, (spec_model, found))  # the model kept alive, so its identity is never reused
    meta = obj.get("metadata")
    return (problems(_METADATA, {"metadata": meta}) if meta is not None else []) + found


# --- values no Kubernetes object can hold ------------------------------------------------------

MAX_DEPTH = 100
"""How deep an object may nest below its root (Kubernetes objects nest ~20 levels; orjson stops at
255 with HTTP 400). Checked before anything reads a value: formatting, hashing, copying or the
policy engine (whose JSON reader stops at 128 levels) recurse, so a deeper object is denied naming
the path, never a 500. ~5 us a RayJob."""


def _deeper_than(obj: Any, limit: int) -> bool:
    """The cheap test run on every object: one list of values per level, no paths kept."""
    level, depth = [obj], 0
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for value in level:
            if type(value) is dict:
                below.extend(value.values())
            elif type(value) is list:
                below.extend(value)
        level, depth = below, depth + 1
    return False


def object_depth_problem(obj: Any, limit: int = MAX_DEPTH) -> tuple[str, str] | None:
    """``(field path, problem)`` for the first place ``obj`` nests deeper than ``limit``, or None.
    Iterative (no recursion limit)."""
    if not _deeper_than(obj, limit):
        return None
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
    """The first value of ``obj`` no Kubernetes object can hold (too deep, an integer outside
    int64), as one line; None when there is none."""
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

