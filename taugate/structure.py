"""Structure checks: does an object have the types its API gives it, where taugate reads or writes?

One way to check structure in taugate: pydantic (v2). taugate's own kinds (TauCluster,
TauWorkspace, TauQuotaRequest, TauRun) are pydantic models in ``taugate.models`` and
``taugate.run_models`` (which also generate their CRDs). Everyone else's objects (core/v1,
batch/v1, KubeRay, Kueue, the AdmissionReview) are ``TypedDict``s of exactly the fields taugate
reads, validated with a ``pydantic.TypeAdapter`` (compiled once, to pydantic-core): the shared
parts here (``ObjectMeta``, ``PodTemplateSpec``, ``AdmissionReviewModel``), each workload kind's
``spec`` in its module (``taugate.kinds``), the objects cluster state reads in
``taugate.state_objects``. Their schemas belong to their owners: unknown fields are ignored, and
the object itself is never replaced by the validated copy (validation only).

The API server checks an object against its schema only after the mutating webhooks have run, so
they see objects exactly as a client sent them. ``workload_problems`` (through
``taugate.kinds.base.WorkloadKind.malformed``, on every admission request) gives ``(field path,
problem)`` for every field without its API type, so a bad object is denied naming the path and
never crashes the webhook.

Rules of every model:

- strict types (``validate_python(..., strict=True)``): ``"2"`` is not a number, ``"true"`` not a
  boolean, as in the Go API types;
- null is an absent field where Kubernetes treats it so (an optional pointer, slice or map in Go):
  write such a field ``NotRequired`` (``total=False``) with ``| None``; a field the API requires
  is ``Required[...]`` without ``None`` (null then reads "is missing; it is required");
- ranges and grammars are ``Annotated`` types whose validator raises ``PydanticCustomError`` with
  taugate's own message, starting ``is ...`` (``Int32``, ``Quantity``, ...): what was asked, what
  is allowed;
- ``problem`` turns every pydantic error (foreign objects and taugate's own kinds alike) into one
  line in those words, its ``loc`` into the one field-path type (``taugate.fieldpath.loc_path``).

How to write a new workload kind's model (``taugate.kinds``): in the kind's module, a
``TypedDict`` (``total=False``, from ``typing_extensions``, which pydantic needs on Python 3.11) of
its ``spec`` with every field ``pod_templates`` (and the kind's ``checks``) read, typed from the
kind's Go API types (``*int32`` -> ``Int32 | None``; ``*bool`` -> ``bool | None``; a
``corev1.PodTemplateSpec`` -> ``PodTemplateSpec``; ``map[string]string`` -> ``StringMap | None``;
a required struct -> ``Required[...]``); a rule across fields is an ``AfterValidator`` raising
``PydanticCustomError`` (its ``at`` context names the field under the model, as ``RayJobSpec``
does). Set it as the kind's ``spec_model``; ``WorkloadKind.malformed`` checks ``metadata``
(``ObjectMeta``) and ``spec`` with it. ``tests/admission/test_structure.py`` has a sketch.

``object_depth_problem`` and ``json_problem`` find values no Kubernetes object can hold at all
(nesting, integers past int64): not type checks, but the structure's outer bounds.
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
    """The JSON name of a value's type: an object, an array, a string, a number, a boolean or null."""
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
    """``repr`` of a value quoted in a problem, cut to 80 characters."""
    return _cut(repr(value))


def _cut(text: str) -> str:
    """``text`` cut to 80 characters."""
    return text if len(text) <= 80 else text[:77] + "..."


# --- Annotated types: ranges and grammars, with taugate's messages --------------------------------

INT64 = (-(2**63), 2**63 - 1)
"""The range of a Kubernetes integer field (int64; apimachinery decodes JSON numbers into it)."""


def whole_number(lo: int, hi: int, what: str) -> PlainValidator:
    """The validator of an ``Annotated`` int from ``lo`` to ``hi`` (a JSON integer, never a boolean
    or a float); ``what`` is the allowed range in words, quoted in the problem."""
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
    """True when ``raw`` matches the quantity grammar; the same few strings ("1", "8Gi")
    recur on every request, so the answers are remembered."""
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
    """True when ``raw`` is a quantity from 0 to ``MAX_QUANTITY``; a Node's "96", "1800Gi"
    recur on every node of a snapshot, so the answers are remembered."""
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
"""Labels, annotations, node selectors, ``rayStartParams``: string keys to string values."""

# --- core/v1, as far as taugate reads it ------------------------------------------------------


class ObjectMeta(TypedDict, total=False):
    """meta/v1 ObjectMeta: the names taugate reads and writes, labels, annotations and finalizers
    (taugate adds Kueue's to a queued Pod)."""

    name: str | None
    generateName: str | None
    namespace: str | None
    labels: StringMap | None
    annotations: StringMap | None
    finalizers: list[str] | None


class NamedMeta(TypedDict, total=False):
    """ObjectMeta of a stored object, whose ``name`` cluster state reads (``ObjectMeta`` otherwise)."""

    name: Required[str]
    namespace: str | None
    labels: StringMap | None
    annotations: StringMap | None


class NodeSelectorRequirement(TypedDict, total=False):
    """core/v1 NodeSelectorRequirement: ``key``, ``operator`` (In, NotIn, Exists, ...) and ``values``."""

    key: str | None
    operator: str | None
    values: list[str] | None


class NodeSelectorTerm(TypedDict, total=False):
    """core/v1 NodeSelectorTerm: requirements on node labels and fields, all of which must hold."""

    matchExpressions: list[NodeSelectorRequirement] | None
    matchFields: list[NodeSelectorRequirement] | None


class NodeSelector(TypedDict, total=False):
    """core/v1 NodeSelector: terms of which one must hold (required node affinity)."""

    nodeSelectorTerms: list[NodeSelectorTerm] | None


class PreferredSchedulingTerm(TypedDict, total=False):
    """core/v1 PreferredSchedulingTerm: a term and its ``weight`` (1 to 100)."""

    weight: Weight | None
    preference: NodeSelectorTerm | None


class NodeAffinity(TypedDict, total=False):
    """core/v1 NodeAffinity: required terms and weighted preferred terms."""

    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTerm] | None


class Affinity(TypedDict, total=False):
    """core/v1 Affinity, as far as placement reads it: the node affinity's terms."""

    nodeAffinity: NodeAffinity | None


class Toleration(TypedDict, total=False):
    """core/v1 Toleration: ``key``, ``operator``, ``value``, ``effect`` and ``tolerationSeconds`` (int64 s)."""

    key: str | None
    operator: str | None
    value: str | None
    effect: str | None
    tolerationSeconds: Seconds | None


class ResourceRequirements(TypedDict, total=False):
    """core/v1 ResourceRequirements: ``requests`` and ``limits``, resource name to quantity."""

    requests: dict[str, Quantity] | None
    limits: dict[str, Quantity] | None


class Container(TypedDict, total=False):
    """core/v1 Container: its name, resources (GPU demand) and volume mounts."""

    name: str | None
    resources: ResourceRequirements | None
    volumeMounts: list[dict[str, Any]] | None


class PodSchedulingGate(TypedDict, total=False):
    """core/v1 PodSchedulingGate: its ``name`` (Kueue holds a queued Pod with one)."""

    name: Required[str]


class PodSpec(TypedDict, total=False):
    """core/v1 PodSpec: the containers' resources (GPU demand), the placement taugate injects and
    checks (nodeSelector, affinity, tolerations) and the volumes policies read."""

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
"""A core/v1 PodSpec with at least one container (a Pod's ``spec``, a pod template's ``spec``)."""


class PodTemplateSpec(TypedDict, total=False):
    """core/v1 PodTemplateSpec (a workload's pod template): ``spec`` required, with at least one
    container."""

    metadata: ObjectMeta | None
    spec: Required[PodSpecWithContainers]


# --- admission.k8s.io/v1 AdmissionReview, as the webhook reads it --------------------------------


class GroupVersionKind(TypedDict, total=False):
    """meta/v1 GroupVersionKind of an AdmissionRequest (``group`` "" for core/v1)."""

    group: str
    version: str
    kind: Required[Annotated[str, Field(min_length=1)]]


class AdmissionRequest(TypedDict, total=False):
    """admission/v1 ``AdmissionRequest``: who asks (``uid``, ``userInfo``), for what (``kind``,
    ``operation``, ``namespace``, ``name``, ``subResource``) and the objects."""

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
    """admission.k8s.io/v1 (or v1beta1) ``AdmissionReview`` holding a request."""

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
    """``(field path, problem)`` for one pydantic error: the path from its ``loc``
    (``taugate.fieldpath.loc_path``; a custom error's ``at`` context names a field below it), the
    problem in taugate's words, what the field is (its JSON type, and the value of a scalar) and
    what it must be. A custom error (``PydanticCustomError``, whose message starts ``is ...``)
    carries its own message; another of pydantic's (a taugate model's enum, a validator's
    ``ValueError``) is quoted after what the field is."""
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
    """``(field path, problem)`` for every error of a pydantic ``ValidationError`` (``problem``),
    for foreign objects and taugate's own kinds alike."""
    return [problem(err) for err in error.errors(include_url=False)]


def first_problem(error: ValidationError) -> str:
    """The first problem of a ``ValidationError`` as one line, ``field: problem``."""
    where, what = problem(error.errors(include_url=False)[0])
    return f"{where}: {what}" if where else what


def problems(adapter: TypeAdapter[Any], obj: Any) -> list[tuple[str, str]]:
    """``(field path, problem)`` for every field of ``obj`` that does not have the type
    ``adapter``'s model gives it (strict: no coercion), in the order pydantic finds them; ``[]``
    when it has. ``obj`` is only read."""
    try:
        adapter.validate_python(obj, strict=True)
    except ValidationError as e:
        return validation_problems(e)
    return []


@lru_cache(maxsize=64)
def workload_adapter(spec_model: Any) -> TypeAdapter[Any]:
    """The ``TypeAdapter`` of a workload object whose ``spec`` (required) is ``spec_model`` and
    whose ``metadata`` is ``ObjectMeta``; built once per model (pydantic compiles it to Rust)."""
    # The functional form: the spec's model is only known here.
    workload = TypedDict("workload", {"metadata": NotRequired[ObjectMeta | None],  # noqa: UP013
                                      "spec": Required[spec_model]}, total=False)
    return TypeAdapter(workload)


@lru_cache(maxsize=64)
def _spec_adapter(spec_model: Any) -> TypeAdapter[Any]:
    """``workload_adapter`` without ``metadata``: checks ``{"spec": ...}`` alone, so problems
    carry their ``spec.`` paths."""
    return TypeAdapter(TypedDict("workload_spec", {"spec": Required[spec_model]}))  # type: ignore[operator]  # noqa: UP013


_METADATA: TypeAdapter[Any] = TypeAdapter(TypedDict("workload_metadata",  # type: ignore[operator]  # noqa: UP013
                                                    {"metadata": NotRequired[ObjectMeta | None]}))

ADMISSION_REVIEW: TypeAdapter[AdmissionReviewModel] = TypeAdapter(AdmissionReviewModel)
"""Checks an AdmissionReview (``problems(ADMISSION_REVIEW, review)``)."""

SPEC_MEMO_SIZE = 256
"""Specs whose problems are remembered (``workload_problems``); the memo starts again when full."""

_spec_memo: Memo[tuple[int, bytes], tuple[Any, list[tuple[str, str]]]] = Memo(SPEC_MEMO_SIZE)
"""Keyed by the identity of the kind's ``spec_model`` (kept in the entry) and the spec's bytes."""


def workload_problems(spec_model: Any, obj: Any, spec_json: bytes | None = None) -> list[tuple[str, str]]:
    """``(field path, problem)`` for every field of a workload ``obj`` (``metadata`` and ``spec``,
    ``spec_model`` the kind's model) without the type its API gives it: the metadata's first,
    then the spec's.

    A spec's problems depend on nothing but its JSON text, and the same spec comes again and
    again (a pipeline submitting one job shape, the validating webhook seeing what the mutating
    one saw, every UPDATE that leaves the spec alone): they are remembered by the spec's JSON
    bytes (``SPEC_MEMO_SIZE`` specs). Equal bytes mean equal JSON values of equal JSON types
    (orjson writes ``1`` and ``1.0``, ``true`` and ``1`` apart), which is all a strict check reads.
    A spec orjson cannot write (nested past 255 levels, an integer beyond 64 bits) is checked
    whole, every time. ``spec_json``: the spec's orjson text when the caller has it already
    (``json_bytes(obj["spec"])``).

    Depth comes first (``object_depth_problem``): a part of the object nested past ``MAX_DEPTH``
    has that one problem, found before pydantic or a message formats any of its values (the
    spec's answer is remembered with the rest)."""
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
"""How deep an object may nest (levels below its root). Kubernetes objects nest ~20 levels (a
pod template's affinity is among the deepest). A review nested past 255 levels is HTTP 400
(orjson's limit). Depth is checked before anything else reads a value (``workload_problems``,
first thing of every admission path, the server's fast path included; ``taugate admit``'s
files): formatting a value in a message, hashing it, copying it or handing it to the policy
engine (whose JSON reader stops at 128 levels) recurses, so an object past ``MAX_DEPTH`` is
denied naming the path (``object_depth_problem``), never a 500. The check costs ~5 us a RayJob
(``_deeper_than``), and a spec's answer is remembered with its other problems."""


def _deeper_than(obj: Any, limit: int) -> bool:
    """True when some value of ``obj`` lies more than ``limit`` levels below it: one list of
    the values per level, no paths kept (the cheap test run on every object)."""
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
    """``(field path, problem)`` for the first place ``obj`` nests deeper than ``limit``
    levels, or None. Iterative (no recursion limit), stops at the first such place; the path
    is searched for only when ``_deeper_than`` found one."""
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

