"""Pod templates and their GPU demand: the arithmetic every workload kind shares.

GPUs per pod follow Kubernetes' pod request formula with native sidecars (KEP-753). GPUs asked
through Dynamic Resource Allocation depend on the cluster's DeviceClasses and claim templates, so
they are added per request (``PodTemplate.dra_gpus``, ``taugate.devices``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal

import orjson
from kubernetes.utils import quantity as _kubernetes_quantity

from taugate import devices, labels
from taugate.access import as_dict
from taugate.fieldpath import Path
from taugate.memo import Memo

Role = Literal["head", "worker", "submitter", "job", "pod", "replica", "replicated-job", "master", "leader", "node"]
"""What a pod template's pods do. ``replica``: a Deployment's or StatefulSet's template; ``node``: a
TrainJob's ``spec.trainer.numNodes`` pods. Every role but ``head`` and ``submitter`` trains or
serves (``WORKER_ROLES``)."""

WORKER_ROLES: frozenset[str] = frozenset({"worker", "job", "pod", "replica", "replicated-job", "master", "leader",
                                          "node"})
"""Roles whose pods do the work a workload profile sizes (``workerCount`` x ``gpusPerWorker``):
all but the Ray head, which coordinates, and the RayJob submitter."""
ContainerList = Literal["containers", "initContainers"]

_CONTAINER_LISTS: tuple[ContainerList, ...] = ("containers", "initContainers")

_parse_quantity: Callable[[str | float], Decimal] = _kubernetes_quantity.parse_quantity
"""``kubernetes.utils.quantity.parse_quantity`` (untyped upstream); raises ValueError, TypeError or
decimal.InvalidOperation."""


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes resource quantity ("500m", "8G", 2) as a Decimal; None if unparsable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return Decimal(value)
    try:
        q = _parse_quantity(value)
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
    return _within_gpus(quantity(value))


def _within_gpus(q: Decimal | None) -> Decimal | None:
    # adjusted() is the exponent of the leading digit; abs() of a huge exponent would overflow.
    return q if q is not None and q.adjusted() < 10 and abs(q) <= MAX_GPUS else None


@dataclass(slots=True)
class ContainerGpus:
    """``nvidia.com/gpu`` request and limit of one container, raw (None when absent) and parsed
    (``*_n``, None when absent or unparsable). Read-only by convention.

    Kubernetes defaults a missing request of an extended resource to its limit, so ``effective``
    is the limit, else the request. ``sidecar``: an init container with ``restartPolicy: Always``
    (KEP-753), which runs for the life of the pod.
    """

    name: str
    index: int
    kind: ContainerList
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


def _containers(spec: dict[str, Any]) -> Iterator[tuple[ContainerList, int, dict[str, Any]]]:
    for kind in _CONTAINER_LISTS:
        items = spec.get(kind)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield kind, i, c


def _pod_spec(template: Any) -> dict[str, Any]:
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def is_sidecar(kind: str, container: dict[str, Any]) -> bool:
    """A native sidecar (KEP-753, GA in Kubernetes 1.29; component-helpers ``resource/helpers.go``
    ``isRestartableInitContainer``)."""
    return kind == "initContainers" and container.get("restartPolicy") == "Always"


def _read_resources(spec: dict[str, Any]) -> tuple[tuple[ContainerGpus, ...], dict[str, int]]:
    """The ``nvidia.com/gpu`` of each container, and per other GPU device resource what one pod
    holds (``pod_request``; limit, else request)."""
    out = []
    per: dict[str, list[tuple[str, bool, Decimal]]] = {}
    for kind, i, c in _containers(spec):
        sidecar = is_sidecar(kind, c)
        name = c.get("name") or f"#{i}"
        res = c.get("resources")
        if type(res) is not dict:
            out.append(ContainerGpus(name, i, kind, None, None, None, None, sidecar))
            continue
        req, lim = res.get("requests"), res.get("limits")
        r = req.get(labels.GPU_RESOURCE) if type(req) is dict else None
        lm = lim.get(labels.GPU_RESOURCE) if type(lim) is dict else None
        out.append(ContainerGpus(name, i, kind, r, lm, None if r is None else gpu_quantity(r),
                                 None if lm is None else gpu_quantity(lm), sidecar))
        mig: dict[str, Decimal] | None = None
        for values in (req, lim):  # limits last: the limit wins
            if type(values) is not dict:
                continue
            for key, raw in values.items():
                if type(key) is str and devices.is_device_resource(key):
                    q = gpu_quantity(raw)
                    if q is not None and q >= 0:
                        mig = mig or {}
                        mig[key] = q
        for key, q in (mig or {}).items():
            per.setdefault(key, []).append((kind, sidecar, q))
    migs: dict[str, int] = {}
    for key, items in per.items():
        total = pod_request(items)
        if total > 0:
            migs[key] = _whole(total)
    return tuple(out), migs


RESOURCES_MEMO_SIZE = 1024

_resources_memo: Memo[bytes, tuple[tuple[ContainerGpus, ...], int, dict[str, int]]] = Memo(RESOURCES_MEMO_SIZE)


def pod_resources(spec: dict[str, Any],
                  spec_json: bytes | None) -> tuple[tuple[ContainerGpus, ...], int, dict[str, int]]:
    """``(container_gpus, gpus_per_pod, mig_per_pod)`` of a pod spec, remembered by its JSON text
    ``spec_json`` (None: not remembered): a sweep of one job shape sends the same few specs.
    What is remembered holds no reference into any object: read it, never change it."""
    hit = _resources_memo.get(spec_json) if spec_json is not None else None
    if hit is None:
        gpus, mig = _read_resources(spec)
        hit = (gpus, _gpus_per_pod(gpus), mig)
        if spec_json is not None:
            _resources_memo.put(spec_json, hit)
    return hit


def json_bytes(value: Any) -> bytes | None:
    """orjson's JSON text of ``value``, or None when orjson cannot write it (nested past 255
    levels, an integer beyond 64 bits, a key that is not a string)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def pod_request(containers: Iterator[tuple[str, bool, Decimal]] | list[tuple[str, bool, Decimal]]) -> Decimal:
    """What a pod holds of one resource on its node, from ``(list name, sidecar, amount)`` per
    container in spec order.

    Kubernetes' formula with native sidecars (KEP-753; component-helpers ``resource/helpers.go``
    ``aggregateContainerResourcesByFn``, used by ``PodRequests``): the larger of the regular
    containers plus every sidecar, and for each init container its amount plus the sidecars
    declared before it.
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
    """A fraction counts as the next whole device."""
    return int(value) if value == value.to_integral_value() else int(value) + 1


def _gpus_per_pod(gpus: tuple[ContainerGpus, ...]) -> int:
    return _whole(pod_request([(g.kind, g.sidecar, g.effective) for g in gpus]))


@dataclass(slots=True)
class PodTemplate:
    """One pod template of a workload; build it with ``PodTemplate.of``. Read-only by convention
    (not ``frozen``: that costs ~1 us more to build, per template, per review).

    - ``group_path``: the object holding the template's ``replicas`` (a Ray worker group, a JobSet
      replicated job, a Kubeflow replica spec); a Job's spec.
    - ``min_replicas``: the fewest pods Kueue may admit it with (partial admission).
    - ``template``: a live reference into the object.
    - ``gpus_per_pod``: ``nvidia.com/gpu`` one pod holds (``pod_request``), rounded up, DRA
      GPUs (``dra_gpus``, set per request from the cluster state; 0 as read) included.
    - ``mig_per_pod``: the other GPU device resources one pod holds, which Kueue counts by name.
    - ``resources_at``: where the containers' resources are written when not in the template (a
      TrainJob's ``spec.trainer.resourcesPerNode``), else None.
    - ``spec_json``: what the GPU demand and policy input are remembered by (``pod_resources``).
    - ``device_access``: how its pods reach devices without asking for them, when the platform
      governs that (``Settings.device_access``); empty as read.
    """

    role: Role
    group: str
    path: Path
    group_path: Path
    replicas: int
    template: dict[str, Any]
    ray_start_params: dict[str, Any]
    spec: dict[str, Any]
    container_gpus: tuple[ContainerGpus, ...]
    gpus_per_pod: int
    mig_per_pod: dict[str, int]
    min_replicas: int
    resources_at: Path | None = None
    spec_json: bytes | None = None
    dra_gpus: int = 0
    device_access: tuple[str, ...] = ()

    @classmethod
    def of(cls, role: Role, group: str, path: Path, group_path: Path, replicas: int, template: dict[str, Any],
           ray_start_params: dict[str, Any], min_replicas: int | None = None, *, spec: dict[str, Any] | None = None,
           resources_at: Path | None = None) -> PodTemplate:
        """``spec``: the pod spec the pods get when it is not ``template``'s own (a TrainJob's,
        assembled from its runtime patches and ``spec.trainer``; mutation still writes into
        ``template``)."""
        spec = _pod_spec(template) if spec is None else spec
        spec_json = json_bytes(spec)
        gpus, per_pod, mig = pod_resources(spec, spec_json)
        return cls(role, group, path, group_path, replicas, template, ray_start_params, spec, gpus,
                   per_pod, mig, replicas if min_replicas is None else min_replicas, resources_at, spec_json)

    def blueprint(self) -> PodTemplate:
        """This template without its references into the object, to be remembered and
        ``rebound``; ``ray_start_params`` keeps its keys only (``rebound`` reads whether there are any)."""
        return PodTemplate(self.role, self.group, self.path, self.group_path, self.replicas, {}, dict.fromkeys(
            self.ray_start_params, ""), {}, self.container_gpus, self.gpus_per_pod, self.mig_per_pod,
            self.min_replicas, self.resources_at, self.spec_json)

    def rebound(self, obj: dict[str, Any]) -> PodTemplate:
        """A ``blueprint`` made the template of ``obj``, whose ``spec`` has the JSON text of the one
        it was read from. Raises ``KeyError``/``IndexError``/``TypeError`` when ``obj`` has no
        template at ``path``."""
        template: Any = obj
        for step in self.path:
            template = template[step]
        params: Any = {}
        if self.ray_start_params:
            params = obj
            for step in (*self.group_path, "rayStartParams"):
                params = params[step]
        return PodTemplate(self.role, self.group, self.path, self.group_path, self.replicas, template, params,
                           _pod_spec(template), self.container_gpus, self.gpus_per_pod, self.mig_per_pod,
                           self.min_replicas, self.resources_at, self.spec_json)

    def resources_path(self, kind: ContainerList, index: int) -> Path:
        if self.resources_at is not None:
            return self.resources_at
        return self.path + ("spec", kind, index, "resources")

    def containers(self) -> Iterator[tuple[ContainerList, int, dict[str, Any]]]:
        return _containers(self.spec)

    def gpus(self) -> tuple[ContainerGpus, ...]:
        return self.container_gpus

    @property
    def ray_num_gpus(self) -> Decimal | None:
        """``rayStartParams["num-gpus"]``, None if absent, unparsable or beyond ``MAX_GPUS``."""
        raw = self.ray_start_params.get("num-gpus")
        # ``ray start --num-gpus`` is an integer option (python/ray/scripts/scripts.py): no
        # quantity suffix ("1m" would be 0.001)
        if type(raw) is not str or not _WHOLE.match(raw):
            return None
        return gpu_quantity(raw)



def as_int(value: Any, default: int) -> int:
    """``value`` when it is an integer (a boolean is not), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


INT32_MAX = 2**31 - 1
"""The largest int32: replicas, parallelism and the like are ``*int32`` in the Go API types."""

_WHOLE = re.compile(r"^[0-9]+$")


def asks_for_gpus(templates: list[PodTemplate]) -> bool:
    """True when a pod template holds a GPU, by any path taugate counts (device resources, DRA,
    governed device access)."""
    return any(t.gpus_per_pod > 0 or t.mig_per_pod or t.device_access for t in templates)


def replicated_template(obj: dict[str, Any], group: str) -> list[PodTemplate]:
    """The one template of an object running ``spec.replicas`` copies of ``spec.template``
    (Deployment, StatefulSet, ReplicaSet, DaemonSet, ReplicationController); ``replicas`` defaults
    to 1, the API server's default."""
    spec = as_dict(obj.get("spec"))
    if not isinstance(spec.get("template"), dict):
        return []
    replicas = max(as_int(spec.get("replicas"), 1), 0)
    return [PodTemplate.of("replica", group, ("spec", "template"), ("spec",), replicas, spec["template"], {})]

