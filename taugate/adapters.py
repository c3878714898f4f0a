"""Workload adapters: one per kind, behind the small ``WorkloadAdapter`` Protocol.

An adapter turns a raw object (a dict as the API server sends it) into the list of its pod
templates, each with its role, replica count and GPU demand, so that mutation, validation and
the policy input never walk kind-specific paths themselves.

Kinds and where their pod templates are (KubeRay ``ray.io/v1`` and Kubernetes ``batch/v1``):

- RayCluster: ``spec.headGroupSpec.template`` (role ``head``, 1 pod) and
  ``spec.workerGroupSpecs[i].template`` (role ``worker``, ``worker_group_pods`` pods: the larger
  of what KubeRay creates and what Kueue reserves).
- RayJob: the same under ``spec.rayClusterSpec``, plus ``spec.submitterPodTemplate`` (role
  ``submitter``, 1 pod) when present.
- Job: ``spec.template`` (role ``job``, ``job_pods``: min(parallelism, completions) pods at a
  time; fewer under Kueue's partial admission, see ``job_min_pods``).

GPUs per pod follow Kubernetes' pod request formula with native sidecars (KEP-753,
``pod_request``), for ``nvidia.com/gpu`` and for every MIG slice resource ``nvidia.com/mig-*``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from decimal import Decimal, InvalidOperation
from typing import Any, Iterator, Literal, Protocol

from kubernetes.utils.quantity import parse_quantity

from taugate import labels

Role = Literal["head", "worker", "submitter", "job"]
Path = tuple[str | int, ...]


@lru_cache(maxsize=4096)
def field_path(path: Path) -> str:
    """Render a path (a tuple) as Kubernetes field paths read: ``spec.workerGroupSpecs[0].template``.
    The same few paths recur on every review, so they are remembered."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "/" in part or "." in part:
            out += f"[{part!r}]".replace("'", '"')
        else:
            out += f".{part}" if out else part
    return out


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes resource quantity ("500m", "8G", 2) as a Decimal; None if unparsable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return Decimal(value)
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    return q if q.is_finite() else None


MAX_GPUS = 2**31 - 1
"""The largest GPU count taugate reads (a Kubernetes int32 count); larger is not a quantity."""


def gpu_quantity(value: Any) -> Decimal | None:
    """An ``nvidia.com/gpu`` quantity, or None when unparsable, not finite or above ``MAX_GPUS``
    (``"1e999999999"`` included: its size is read from the exponent, never computed)."""
    if type(value) is str:
        return _gpu_text(value)
    return _within_gpus(quantity(value))


@lru_cache(maxsize=256)
def _gpu_text(value: str) -> Decimal | None:
    # The same few strings ("1", "8") on every request: parsed once (a Decimal is immutable).
    return _within_gpus(quantity(value))


def _within_gpus(q: Decimal | None) -> Decimal | None:
    # adjusted() is the exponent of the leading digit; abs() of a huge exponent would overflow.
    return q if q is not None and q.adjusted() < 10 and abs(q) <= MAX_GPUS else None


@dataclass(slots=True)
class ContainerGpus:
    """GPU resources of one container: ``nvidia.com/gpu`` request and limit as written
    (read-only by convention, like ``PodTemplate``).

    ``request``/``limit`` are the raw values (None when absent); ``request_n``/``limit_n`` the
    parsed numbers (None when absent or unparsable). Kubernetes defaults a missing request of an
    extended resource to its limit, so ``effective`` is the limit, else the request. ``sidecar``
    is True for a native sidecar: an init container with ``restartPolicy: Always`` (KEP-753), which
    runs for the life of the pod.
    """

    name: str
    index: int
    kind: Literal["containers", "initContainers"]
    request: Any
    limit: Any
    request_n: Decimal | None
    limit_n: Decimal | None
    sidecar: bool = False

    @property
    def effective(self) -> Decimal:
        """GPUs this container holds on its node (limit, else request, else 0)."""
        if self.limit_n is not None:
            return self.limit_n
        return self.request_n if self.request_n is not None else _ZERO


_ZERO = Decimal(0)


def _containers(spec: dict) -> Iterator[tuple[str, int, dict]]:
    for kind in ("containers", "initContainers"):
        items = spec.get(kind)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield kind, i, c


def _pod_spec(template: Any) -> dict:
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def is_sidecar(kind: str, container: dict) -> bool:
    """True for a native sidecar (KEP-753, GA in Kubernetes 1.29): an init container whose
    ``restartPolicy`` is ``Always`` (component-helpers ``resource/helpers.go``
    ``isRestartableInitContainer``)."""
    return kind == "initContainers" and container.get("restartPolicy") == "Always"


def _read_gpus(spec: dict) -> tuple[ContainerGpus, ...]:
    out = []
    for kind, i, c in _containers(spec):
        sidecar = is_sidecar(kind, c)
        res = c.get("resources")
        if not isinstance(res, dict):
            out.append(ContainerGpus(c.get("name") or f"#{i}", i, kind, None, None, None, None, sidecar))
            continue
        req, lim = res.get("requests"), res.get("limits")
        r = req.get(labels.GPU_RESOURCE) if isinstance(req, dict) else None
        l = lim.get(labels.GPU_RESOURCE) if isinstance(lim, dict) else None
        out.append(ContainerGpus(c.get("name") or f"#{i}", i, kind, r, l,
                                 None if r is None else gpu_quantity(r), None if l is None else gpu_quantity(l),
                                 sidecar))
    return tuple(out)


def pod_request(containers: Iterator[tuple[str, bool, Decimal]] | list[tuple[str, bool, Decimal]]) -> Decimal:
    """What a pod holds of one resource on its node, from ``(list name, sidecar, amount)`` per
    container in spec order (``containers`` first, then ``initContainers``).

    Kubernetes' formula with native sidecars (KEP-753 "Resources calculation for scheduling and
    pod admission"; component-helpers ``resource/helpers.go`` ``aggregateContainerResourcesByFn``,
    used by ``PodRequests``): the larger of

    - the sum of the regular containers plus every sidecar (they all run together), and
    - for each init container i, its amount plus the sidecars declared before it (a classic init
      container runs beside the sidecars already started; a sidecar counts with the ones before).
    """
    main = sidecars = init = _ZERO
    for kind, sidecar, amount in containers:
        if kind == "containers":
            main += amount
        elif sidecar:
            sidecars += amount
            init = max(init, sidecars)
        else:
            init = max(init, amount + sidecars)
    return max(main + sidecars, init)


def _whole(value: Decimal) -> int:
    """A device count as a whole number: a fraction counts as the next whole device."""
    return int(value) if value == value.to_integral_value() else int(value) + 1


def _gpus_per_pod(gpus: tuple[ContainerGpus, ...]) -> int:
    """``nvidia.com/gpu`` one pod holds: ``pod_request`` over the containers, rounded up."""
    return _whole(pod_request([(g.kind, g.sidecar, g.effective) for g in gpus]))


MIG_PREFIX = "nvidia.com/mig-"
"""NVIDIA MIG slice resources (``nvidia.com/mig-1g.10gb`` ...) as the GPU operator's ``mixed``
strategy advertises them: a slice of a GPU, never a whole ``nvidia.com/gpu``."""


def _mig_per_pod(spec: dict) -> dict[str, int]:
    """MIG slices one pod holds, by resource name (``pod_request`` per resource; limit, else
    request, as for ``nvidia.com/gpu``); empty when the pod asks for none."""
    per: dict[str, list[tuple[str, bool, Decimal]]] = {}
    for kind, _, c in _containers(spec):
        res = c.get("resources")
        if type(res) is not dict:
            continue
        names: dict[str, Decimal] = {}
        for which in ("requests", "limits"):  # limits last: the limit wins
            values = res.get(which)
            if type(values) is not dict:
                continue
            for name, raw in values.items():
                if type(name) is str and name.startswith(MIG_PREFIX):
                    q = gpu_quantity(raw)
                    if q is not None and q >= 0:
                        names[name] = q
        for name, q in names.items():
            per.setdefault(name, []).append((kind, is_sidecar(kind, c), q))
    out: dict[str, int] = {}
    for name, items in per.items():
        total = pod_request(items)
        if total > 0:
            out[name] = _whole(total)
    return out


@dataclass(slots=True)
class PodTemplate:
    """One pod template of a workload; build it with ``PodTemplate.of``. Read-only by
    convention (not ``frozen``: a frozen dataclass costs ~1 us more to build, per template, per
    review).

    - ``role``: head / worker / submitter / job.
    - ``group``: the Ray group name (``groupName``), ``head``, ``submitter`` or ``job``.
    - ``path``: where the template is in the object, e.g. ``("spec", "template")``.
    - ``group_path``: where the enclosing group spec is (RayJob/RayCluster), else ``path[:-1]``.
    - ``replicas``: pods created from it at a time (worker: ``worker_group_pods``; Job:
      ``job_pods``).
    - ``min_replicas``: the fewest pods Kueue may admit it with (Job: ``job_min_pods``, Kueue
      partial admission), else ``replicas``.
    - ``template``: the template dict itself (a live reference into the object).
    - ``ray_start_params``: the group's ``rayStartParams`` (strings), empty for non-Ray.
    - ``spec``: the pod spec (``template.spec``), or an empty dict.
    - ``container_gpus``: ``nvidia.com/gpu`` request and limit of every container (init
      containers included).
    - ``gpus_per_pod``: ``nvidia.com/gpu`` one pod holds (``pod_request``: KEP-753, native
      sidecars included), rounded up.
    - ``mig_per_pod``: MIG slices one pod holds by resource (``nvidia.com/mig-1g.10gb``: 2).
    """

    role: Role
    group: str
    path: Path
    group_path: Path
    replicas: int
    template: dict
    ray_start_params: dict
    spec: dict
    container_gpus: tuple[ContainerGpus, ...]
    gpus_per_pod: int
    mig_per_pod: dict[str, int]
    min_replicas: int

    @classmethod
    def of(cls, role: Role, group: str, path: Path, group_path: Path, replicas: int, template: dict,
           ray_start_params: dict, min_replicas: int | None = None) -> "PodTemplate":
        """The pod template ``template`` (at ``path``), its GPU demand read once;
        ``min_replicas`` defaults to ``replicas``."""
        spec = _pod_spec(template)
        gpus = _read_gpus(spec)
        return cls(role, group, path, group_path, replicas, template, ray_start_params, spec, gpus,
                   _gpus_per_pod(gpus), _mig_per_pod(spec), replicas if min_replicas is None else min_replicas)

    def containers(self) -> Iterator[tuple[str, int, dict]]:
        """Yield ``(list name, index, container)`` for containers, then initContainers."""
        return _containers(self.spec)

    def gpus(self) -> tuple[ContainerGpus, ...]:
        """Same as ``container_gpus``."""
        return self.container_gpus

    @property
    def ray_num_gpus(self) -> Decimal | None:
        """``rayStartParams["num-gpus"]`` as a number, None if absent, unparsable or beyond
        ``MAX_GPUS`` (read like an ``nvidia.com/gpu`` count, so ``"1e999999999"`` is never
        expanded)."""
        raw = self.ray_start_params.get("num-gpus")
        # ``ray start --num-gpus`` is an integer option (python/ray/scripts/scripts.py): a whole
        # number, never negative, no quantity suffix ("1m" would be 0.001).
        if type(raw) is not str or not _WHOLE.match(raw):
            return None
        return gpu_quantity(raw)


class WorkloadAdapter(Protocol):
    """What admission needs to know about one workload kind."""

    kind: str
    api_version: str

    def pod_templates(self, obj: dict) -> list[PodTemplate]:
        """Every pod template of ``obj`` with its role, in a stable order (head first)."""
        ...

    def suspend_path(self, obj: dict) -> Path:
        """Where ``suspend`` lives (``spec.suspend`` for RayJob, RayCluster and Job)."""
        ...

    def queued(self, obj: dict) -> bool:
        """True when Kueue queues ``obj`` (so taugate gives it a LocalQueue and suspends it)."""
        ...

    def malformed(self, obj: dict) -> list[tuple[str, str]]:
        """``(field path, problem)`` for every field admission reads or writes that does not
        have the type its API gives it (the API server checks the schema only after mutating
        webhooks have run, so they see objects exactly as a client sent them)."""
        ...

    def templates_mutable(self, old: dict) -> bool:
        """True when the API server accepts changes to the pod templates' labels in an UPDATE of
        the stored object ``old`` (a patch under an immutable field fails the whole UPDATE)."""
        ...


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


INT32_MAX = 2**31 - 1


def worker_group_pods(group: dict) -> int:
    """Pods of one Ray worker group that admission must hold GPUs for: the larger of

    - what KubeRay creates: clamp(replicas, minReplicas, maxReplicas) x numOfHosts, maxReplicas
      when minReplicas > maxReplicas, 0 for a suspended group (ray-operator v1.5
      ``controllers/ray/utils/util.go`` ``GetWorkerGroupDesiredReplicas``), and
    - what Kueue reserves: replicas x numOfHosts (kueue v0.17
      ``pkg/controller/jobs/raycluster/common.go`` ``BuildPodSets``).

    Missing fields take the RayCluster CRD defaults the API server applies before admission
    (replicas 0, minReplicas 0, maxReplicas 2147483647, numOfHosts 1), so an object read offline
    counts as the stored one will."""
    replicas = _int(group.get("replicas"), 0)
    lo, hi = _int(group.get("minReplicas"), 0), _int(group.get("maxReplicas"), INT32_MAX)
    hosts = max(_int(group.get("numOfHosts"), 1), 1)
    if group.get("suspend") is True:
        kuberay = 0
    elif lo > hi:
        kuberay = hi
    else:
        kuberay = min(max(replicas, lo), hi)
    return max(kuberay, replicas) * hosts


def job_pods(spec: dict) -> int:
    """Pods a batch/v1 Job runs at a time: min(parallelism, completions), parallelism defaulting
    to 1 (Kubernetes Job controller; kueue v0.17 ``pkg/controller/jobs/job/job_controller.go``
    ``Job.podsCount``, the PodSet count Kueue reserves)."""
    pods = _int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if type(completions) is int and completions < pods:
        pods = completions
    return max(pods, 0)


JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
"""Kueue's partial-admission annotation on a batch/v1 Job (PartialAdmission, beta, on by default
since Kueue 0.5)."""


def job_min_pods(obj: dict, pods: int) -> int:
    """The fewest pods Kueue may admit a Job with: its ``kueue.x-k8s.io/job-min-parallelism``
    annotation when it is a whole number in 1..pods-1 (kueue v0.17
    ``pkg/controller/jobs/job/job_controller.go`` ``Job.minPodsCount``, checked by
    ``job_webhook.go`` ``validatePartialAdmissionCreate``), else ``pods``."""
    notes = _dict(_dict(obj.get("metadata")).get("annotations"))
    raw = notes.get(JOB_MIN_PARALLELISM)
    if type(raw) is str and raw.strip().lstrip("+-").isdigit():
        value = int(raw)
        if 0 < value < pods:
            return value
    return pods


def _ray_cluster_templates(spec: dict, prefix: Path) -> list[PodTemplate]:
    out: list[PodTemplate] = []
    head = spec.get("headGroupSpec")
    if type(head) is dict and type(head.get("template")) is dict:
        params = head.get("rayStartParams")
        out.append(PodTemplate.of("head", "head", prefix + ("headGroupSpec", "template"),
                                  prefix + ("headGroupSpec",), 1, head["template"],
                                  params if type(params) is dict else {}))
    groups = spec.get("workerGroupSpecs")
    for i, group in enumerate(groups if type(groups) is list else ()):
        if type(group) is not dict or type(group.get("template")) is not dict:
            continue
        params = group.get("rayStartParams")
        gpath = prefix + ("workerGroupSpecs", i)
        out.append(PodTemplate.of("worker", str(group.get("groupName") or f"group-{i}"), gpath + ("template",),
                                  gpath, worker_group_pods(group), group["template"],
                                  params if type(params) is dict else {}))
    return out


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

INT32_MAX = 2**31 - 1
"""The largest int32: replicas, parallelism and the like are ``*int32`` in the Go API types."""


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


_WHOLE = re.compile(r"^[0-9]+$")

# A non-negative Kubernetes quantity (apimachinery resource.Quantity grammar): a decimal number,
# then a binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent.
_QUANTITY = re.compile(r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


@lru_cache(maxsize=1024)
def _quantity_text(raw: str) -> bool:
    """True when ``raw`` matches the quantity grammar; the same few strings ("1", "8Gi")
    recur on every request, so the answers are remembered."""
    return _QUANTITY.match(raw) is not None


class _Shape:
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


def _ray_cluster_shape(shape: _Shape, spec: Any, prefix: Path) -> None:
    if not shape.obj(spec, prefix, required=True):
        return
    head = spec.get("headGroupSpec")
    if shape.obj(head, prefix + ("headGroupSpec",), required=True):
        shape.string_map(head.get("rayStartParams"), prefix + ("headGroupSpec", "rayStartParams"))
        shape.pod_template(head.get("template"), prefix + ("headGroupSpec", "template"))
    groups = spec.get("workerGroupSpecs")
    if shape.array(groups, prefix + ("workerGroupSpecs",)):
        for i, g in enumerate(groups):
            gpath = prefix + ("workerGroupSpecs", i)
            if not shape.obj(g, gpath, required=True):
                continue
            name = g.get("groupName")
            if name is not None and type(name) is not str:
                shape.scalar(name, gpath + ("groupName",), str, "a string")
            for key in ("replicas", "minReplicas", "maxReplicas"):  # *int32 in KubeRay's WorkerGroupSpec
                value = g.get(key)
                if value is not None and not (type(value) is int and 0 <= value <= INT32_MAX):
                    shape.scalar(value, gpath + (key,), int, f"a whole number from 0 to {INT32_MAX} (int32)", 0, INT32_MAX)
            hosts = g.get("numOfHosts")
            if hosts is not None and not (type(hosts) is int and 1 <= hosts <= INT32_MAX):
                shape.scalar(hosts, gpath + ("numOfHosts",), int, f"a whole number from 1 to {INT32_MAX} (int32)", 1,
                             INT32_MAX)
            shape.string_map(g.get("rayStartParams"), gpath + ("rayStartParams",))
            shape.pod_template(g.get("template"), gpath + ("template",))


class RayClusterAdapter:
    """KubeRay ``ray.io/v1`` RayCluster."""

    kind = "RayCluster"
    api_version = "ray.io/v1"

    def queued(self, obj: dict) -> bool:
        return True

    def pod_templates(self, obj: dict) -> list[PodTemplate]:
        return _ray_cluster_templates(_dict(obj.get("spec")), ("spec",))

    def suspend_path(self, obj: dict) -> Path:
        return ("spec", "suspend")

    def templates_mutable(self, old: dict) -> bool:
        """Always: the RayCluster CRD has no immutable field (KubeRay reconciles changes)."""
        return True

    def malformed(self, obj: dict) -> list[tuple[str, str]]:
        shape = _Shape()
        shape.meta(obj.get("metadata"), ("metadata",))
        _ray_cluster_shape(shape, obj.get("spec"), ("spec",))
        if isinstance(obj.get("spec"), dict):
            shape.scalar(obj["spec"].get("suspend"), ("spec", "suspend"), bool, "true or false")
        return shape.problems


class RayJobAdapter:
    """KubeRay ``ray.io/v1`` RayJob: the RayCluster spec plus the submitter pod template."""

    kind = "RayJob"
    api_version = "ray.io/v1"

    def queued(self, obj: dict) -> bool:
        """False for a RayJob that runs on an existing RayCluster (``clusterSelector``, no
        ``rayClusterSpec``): KubeRay forbids suspending one ("the ClusterSelector mode doesn't
        support the suspend operation") and Kueue does not manage it ("a kueue managed job should
        not use an existing cluster"); the RayCluster it runs on was queued itself."""
        spec = _dict(obj.get("spec"))
        return spec.get("rayClusterSpec") is not None or not spec.get("clusterSelector")

    def malformed(self, obj: dict) -> list[tuple[str, str]]:
        """KubeRay: a RayJob needs ``rayClusterSpec`` or ``clusterSelector``."""
        shape = _Shape()
        shape.meta(obj.get("metadata"), ("metadata",))
        spec = obj.get("spec")
        if shape.obj(spec, ("spec",), required=True):
            if spec.get("rayClusterSpec") is None and not spec.get("clusterSelector"):
                shape.bad(("spec", "rayClusterSpec"), "is missing; a RayJob needs rayClusterSpec (or clusterSelector, "
                                                      "which Kueue does not queue)")
            elif spec.get("rayClusterSpec") is not None:
                _ray_cluster_shape(shape, spec["rayClusterSpec"], ("spec", "rayClusterSpec"))
            shape.string_map(spec.get("clusterSelector"), ("spec", "clusterSelector"))
            if spec.get("submitterPodTemplate") is not None:
                shape.pod_template(spec["submitterPodTemplate"], ("spec", "submitterPodTemplate"))
            for key in ("suspend", "shutdownAfterJobFinishes"):
                shape.scalar(spec.get(key), ("spec", key), bool, "true or false")
        return shape.problems

    def pod_templates(self, obj: dict) -> list[PodTemplate]:
        spec = _dict(obj.get("spec"))
        out = _ray_cluster_templates(_dict(spec.get("rayClusterSpec")), ("spec", "rayClusterSpec"))
        if isinstance(spec.get("submitterPodTemplate"), dict):
            out.append(PodTemplate.of("submitter", "submitter", ("spec", "submitterPodTemplate"),
                                   ("spec",), 1, spec["submitterPodTemplate"], {}))
        return out

    def suspend_path(self, obj: dict) -> Path:
        return ("spec", "suspend")

    def templates_mutable(self, old: dict) -> bool:
        """Always: the RayJob CRD has no immutable field."""
        return True


class JobAdapter:
    """Kubernetes ``batch/v1`` Job: one pod template, ``job_pods`` pods at a time (fewer, down to
    ``job_min_pods``, under Kueue's partial admission)."""

    kind = "Job"
    api_version = "batch/v1"

    def queued(self, obj: dict) -> bool:
        return True

    def pod_templates(self, obj: dict) -> list[PodTemplate]:
        spec = _dict(obj.get("spec"))
        if not isinstance(spec.get("template"), dict):
            return []
        pods = job_pods(spec)
        return [PodTemplate.of("job", "job", ("spec", "template"), ("spec",), pods, spec["template"], {},
                               job_min_pods(obj, pods))]

    def suspend_path(self, obj: dict) -> Path:
        return ("spec", "suspend")

    def templates_mutable(self, old: dict) -> bool:
        """A Job's pod template is immutable unless the stored Job is suspended, has never
        started (no ``status.startTime``) and has no active pod. Kubernetes v1.37
        ``pkg/apis/batch/validation/validation.go`` ``validatePodTemplateUpdate`` (template
        labels, annotations, node selector, tolerations, scheduling gates mutable only with
        ``AllowMutableSchedulingDirectives``), set in ``pkg/registry/batch/job/strategy.go``
        ``validationOptionsForJob`` to suspended && never started, or, with the
        MutableSchedulingDirectivesForSuspendedJobs gate, ``shouldAllowMutablePodTemplate``
        (suspended, never started or JobSuspended, no active pod): this is true only where both
        agree. Kueue's unsuspend (suspend true -> false with the flavor's node selectors) is
        judged on the stored, suspended Job, so it may carry template changes."""
        spec, status = _dict(old.get("spec")), _dict(old.get("status"))
        return spec.get("suspend") is True and not status.get("startTime") and not status.get("active")

    def malformed(self, obj: dict) -> list[tuple[str, str]]:
        """Kubernetes: a Job needs ``spec.template``."""
        shape = _Shape()
        shape.meta(obj.get("metadata"), ("metadata",))
        spec = obj.get("spec")
        if shape.obj(spec, ("spec",), required=True):
            for key in ("parallelism", "completions"):  # *int32 in batch/v1 JobSpec
                shape.scalar(spec.get(key), ("spec", key), int, f"a whole number from 0 to {INT32_MAX} (int32)", 0,
                             INT32_MAX)
            shape.scalar(spec.get("suspend"), ("spec", "suspend"), bool, "true or false")
            shape.pod_template(spec.get("template"), ("spec", "template"))
        return shape.problems


ADAPTERS: dict[tuple[str, str], WorkloadAdapter] = {
    (a.api_version.split("/")[0], a.kind): a
    for a in (RayJobAdapter(), RayClusterAdapter(), JobAdapter())
}
"""Adapters by (API group, kind): ``("ray.io", "RayJob")``, ``("batch", "Job")``..."""


def adapter_for(api_version_or_group: str | None, kind: str | None) -> WorkloadAdapter | None:
    """The adapter for an object's ``apiVersion`` (or bare group) and ``kind``; None if taugate
    does not handle that kind."""
    if not isinstance(api_version_or_group, str) or not isinstance(kind, str):
        return None
    return ADAPTERS.get((api_version_or_group.split("/")[0], kind))
