"""Pod templates and their GPU demand: the arithmetic every workload kind shares.

A workload kind (``taugate.kinds``) turns a raw object into its ``PodTemplate``s, each with its
role, replica count and GPU demand, so that mutation, validation and the policy input never walk
kind-specific paths themselves.

GPUs per pod follow Kubernetes' pod request formula with native sidecars (KEP-753,
``pod_request``), for ``nvidia.com/gpu`` and for every other GPU device resource
(``taugate.devices.is_device_resource``: MIG slices, shared GPUs, other vendors' GPUs). GPUs
asked through Dynamic Resource Allocation depend on the cluster's DeviceClasses and claim
templates, so they are added per request (``PodTemplate.dra_gpus``, ``taugate.devices``).
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
"""What a pod template's pods do: a Ray head, worker (a Ray worker group, a Kubeflow ``Worker``,
LeaderWorkerSet workers), submitter, a Job's pods, a bare Pod itself (``pod``), the template of a
Deployment or StatefulSet (``replicas`` identical pods: ``replica``), a JobSet replicated job's, a
Kubeflow ``Master``, a LeaderWorkerSet leader, a Kubeflow TrainJob's training nodes (``node``:
``spec.trainer.numNodes`` pods). Every role but ``head`` and ``submitter`` trains or serves
(``WORKER_ROLES``)."""

WORKER_ROLES: frozenset[str] = frozenset({"worker", "job", "pod", "replica", "replicated-job", "master", "leader",
                                          "node"})
"""Roles whose pods do the work a workload profile sizes (``workerCount`` x ``gpusPerWorker``):
all but the Ray head, which coordinates, and the RayJob submitter."""
ContainerList = Literal["containers", "initContainers"]
"""The two container lists of a pod spec that hold resources."""

_CONTAINER_LISTS: tuple[ContainerList, ...] = ("containers", "initContainers")

_parse_quantity: Callable[[str | float], Decimal] = _kubernetes_quantity.parse_quantity
"""The Kubernetes client's quantity parser (``kubernetes.utils.quantity.parse_quantity``, which
ships without type annotations): a quantity string or number to a Decimal; raises ValueError
(also TypeError, decimal.InvalidOperation) on anything else."""


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
    """True for a native sidecar (KEP-753, GA in Kubernetes 1.29): an init container whose
    ``restartPolicy`` is ``Always`` (component-helpers ``resource/helpers.go``
    ``isRestartableInitContainer``)."""
    return kind == "initContainers" and container.get("restartPolicy") == "Always"


def _read_resources(spec: dict[str, Any]) -> tuple[tuple[ContainerGpus, ...], dict[str, int]]:
    """One pass over a pod spec's containers (``containers``, then ``initContainers``): the
    ``nvidia.com/gpu`` request and limit of each, and the other GPU device resources one pod holds
    by resource (``pod_request`` per resource; limit, else request, as for ``nvidia.com/gpu``;
    empty when the pod asks for none)."""
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
"""Pod specs whose GPU demand is remembered (``pod_resources``); the memo starts again when full."""

_resources_memo: Memo[bytes, tuple[tuple[ContainerGpus, ...], int, dict[str, int]]] = Memo(RESOURCES_MEMO_SIZE)


def pod_resources(spec: dict[str, Any],
                  spec_json: bytes | None) -> tuple[tuple[ContainerGpus, ...], int, dict[str, int]]:
    """``(container_gpus, gpus_per_pod, mig_per_pod)`` of a pod spec (``_read_resources``, then
    ``_gpus_per_pod``). A pod spec's demand depends on nothing but its JSON text ``spec_json``
    (orjson's bytes of ``spec``; None when orjson cannot write it), and the same few pod specs
    come in every review of a sweep of one job shape, so it is remembered by those bytes
    (``RESOURCES_MEMO_SIZE`` specs). What is remembered holds no reference into any object
    (quantities as written are strings or numbers): read it, never change it."""
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


@dataclass(slots=True)
class PodTemplate:
    """One pod template of a workload; build it with ``PodTemplate.of``. Read-only by
    convention (not ``frozen``: a frozen dataclass costs ~1 us more to build, per template, per
    review).

    - ``role``: head / worker / submitter / job / pod / replica / replicated-job / master / leader
      (``Role``).
    - ``group``: the Ray group name (``groupName``), ``head``, ``submitter`` or ``job``; a JobSet
      replicated job's name; a Kubeflow replica type (``Master``, ``Worker``); ``leader`` or
      ``worker`` of a LeaderWorkerSet.
    - ``path``: where the template is in the object, e.g. ``("spec", "template")``.
    - ``group_path``: where the enclosing group spec is, the object holding the template's
      ``replicas`` (a Ray worker group, a JobSet replicated job, a Kubeflow replica spec, a
      LeaderWorkerSet's ``spec``); a Job's spec.
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
    - ``mig_per_pod``: the GPU device resources other than ``nvidia.com/gpu`` one pod holds, by
      resource (``nvidia.com/mig-1g.10gb``: 2, ``amd.com/gpu``: 1; ``taugate.devices``), which
      Kueue counts by name.
    - ``resources_at``: where the containers' resources are written when not in the template
      itself (a TrainJob's ``spec.trainer.resourcesPerNode``, which the trainer copies into its
      runtime's ``node`` container), else None; ``resources_path`` gives the field.
    - ``spec_json``: the pod spec's JSON text (orjson), None when orjson cannot write it: what the
      GPU demand and the template's policy input are remembered by (``pod_resources``).
    - ``dra_gpus``: GPUs its pods get through Dynamic Resource Allocation (claim templates, DRA
      extended resources), included in ``gpus_per_pod``; set per request from the cluster state
      (``taugate.devices``), 0 as read from the spec alone.
    - ``device_access``: how its pods reach devices without asking for them, when the platform
      governs that instead of refusing it (``Settings.device_access``); empty as read.
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
        """The pod template ``template`` (at ``path``), its GPU demand read once;
        ``min_replicas`` defaults to ``replicas``. ``spec``: the pod spec the pods get, when it is
        not ``template``'s own (a TrainJob's, assembled from its runtime patches and
        ``spec.trainer``; mutation still writes into ``template``); ``resources_at``: see the
        class docstring."""
        spec = _pod_spec(template) if spec is None else spec
        spec_json = json_bytes(spec)
        gpus, per_pod, mig = pod_resources(spec, spec_json)
        return cls(role, group, path, group_path, replicas, template, ray_start_params, spec, gpus,
                   per_pod, mig, replicas if min_replicas is None else min_replicas, resources_at, spec_json)

    def blueprint(self) -> PodTemplate:
        """This template without its references into the object, to be remembered and ``rebound``
        to another object: ``template`` and ``spec`` empty, ``ray_start_params`` its keys only
        (``rebound`` reads whether there are any)."""
        return PodTemplate(self.role, self.group, self.path, self.group_path, self.replicas, {}, dict.fromkeys(
            self.ray_start_params, ""), {}, self.container_gpus, self.gpus_per_pod, self.mig_per_pod,
            self.min_replicas, self.resources_at, self.spec_json)

    def rebound(self, obj: dict[str, Any]) -> PodTemplate:
        """A ``blueprint`` made the template of ``obj``, an object whose ``spec`` has the JSON text
        of the one it was read from (so everything but the references is the same): ``template``
        is ``obj`` at ``path``, ``spec`` its pod spec and ``ray_start_params`` the group's
        ``rayStartParams`` (at ``group_path``, where Ray kinds keep them; empty when the blueprint's
        were). Raises ``KeyError``/``IndexError``/``TypeError`` when ``obj`` has no template at
        ``path`` (a spec with other JSON text)."""
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
        """Where the resources of container ``index`` of list ``kind`` are written:
        ``resources_at`` when set, else ``path.spec.<kind>[index].resources``."""
        if self.resources_at is not None:
            return self.resources_at
        return self.path + ("spec", kind, index, "resources")

    def containers(self) -> Iterator[tuple[ContainerList, int, dict[str, Any]]]:
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



def as_int(value: Any, default: int) -> int:
    """``value`` when it is an integer (a boolean is not), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


INT32_MAX = 2**31 - 1
"""The largest int32: replicas, parallelism and the like are ``*int32`` in the Go API types."""

_WHOLE = re.compile(r"^[0-9]+$")


def asks_for_gpus(templates: list[PodTemplate]) -> bool:
    """True when a pod template holds a GPU: ``nvidia.com/gpu`` or another GPU device resource in
    any container or init container (``gpus_per_pod``/``mig_per_pod``, KEP-753 arithmetic), GPUs
    through DRA (in ``gpus_per_pod``), or device access the platform governs (``device_access``)."""
    return any(t.gpus_per_pod > 0 or t.mig_per_pod or t.device_access for t in templates)


def replicated_template(obj: dict[str, Any], group: str) -> list[PodTemplate]:
    """The one pod template of an object that runs ``spec.replicas`` copies of ``spec.template``
    (an ``apps/v1`` Deployment, StatefulSet, ReplicaSet or DaemonSet, a core/v1
    ReplicationController): role ``replica``, group ``group``, ``spec.replicas`` pods, default 1
    (the API server's default); empty when ``spec.template`` is not an object."""
    spec = as_dict(obj.get("spec"))
    if not isinstance(spec.get("template"), dict):
        return []
    replicas = max(as_int(spec.get("replicas"), 1), 0)
    return [PodTemplate.of("replica", group, ("spec", "template"), ("spec",), replicas, spec["template"], {})]

