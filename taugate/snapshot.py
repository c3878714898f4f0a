"""Cluster state: what admission knows about the cluster, as plain precomputed data.

Built once (from a snapshot file, or from watches in a cluster) and then only read: per-request
work never scans nodes or queues. A snapshot file is multi-document YAML (or a ``kind: List``);
kinds cluster state does not read are ignored.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from pathlib import Path as _Path
from typing import Any

from pydantic import ValidationError

from taugate import labels
from taugate.devices import GpuNodes, is_device_resource
from taugate.files import InputError, load_documents, read_limited
from taugate.memo import Memo
from taugate.models import ResolvedProfile, TauCluster, TauWorkspace
from taugate.pods import quantity
from taugate.profiles import is_applicable, profile_set_hash, resolve_profile
from taugate.settings import Settings
from taugate.state_objects import state_object_problem
from taugate.structure import first_problem, json_problem, json_type


class SnapshotError(ValueError):
    """The message is one line naming the problem."""


@dataclass(frozen=True)
class GpuClassSummary:
    """Nodes of one GPU class. ``products``: the GPU Feature Discovery ``nvidia.com/gpu.product``
    values seen; ``problems``: an unhealthy node's failing condition types."""

    name: str
    max_gpus_per_node: int
    max_healthy_gpus_per_node: int
    nodes: int
    healthy_nodes: int
    unhealthy_nodes: int
    healthy_gpus: int
    products: tuple[str, ...]
    problems: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def as_input(self) -> dict[str, Any]:
        return {"name": self.name, "maxGpusPerNode": self.max_gpus_per_node,
                "maxHealthyGpusPerNode": self.max_healthy_gpus_per_node, "nodes": self.nodes,
                "healthyNodes": self.healthy_nodes, "unhealthyNodes": self.unhealthy_nodes,
                "healthyGpus": self.healthy_gpus, "products": list(self.products),
                "problems": {k: list(v) for k, v in self.problems.items()}}


@dataclass(frozen=True)
class MigSummary:
    """Nodes offering one MIG slice resource (the NVIDIA GPU operator's ``mixed`` strategy)."""

    name: str
    max_per_node: int
    max_healthy_per_node: int
    nodes: int
    healthy_nodes: int

    def as_input(self) -> dict[str, Any]:
        return {"name": self.name, "maxPerNode": self.max_per_node,
                "maxHealthyPerNode": self.max_healthy_per_node, "nodes": self.nodes,
                "healthyNodes": self.healthy_nodes}


@dataclass(frozen=True)
class FlavorQuota:
    """One ResourceFlavor's quota for one resource in a ClusterQueue, in resource units (GPUs for
    ``nvidia.com/gpu``). ``borrowing_limit`` None: unlimited within the cohort."""

    flavor: str
    resource: str
    nominal: Decimal
    borrowing_limit: Decimal | None
    usage: Decimal
    cohort: str | None

    def as_input(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "resource": self.resource, "nominal": _num(self.nominal),
                "borrowingLimit": None if self.borrowing_limit is None else _num(self.borrowing_limit),
                "usage": _num(self.usage), "cohort": self.cohort}


def _num(d: Decimal) -> int | float:
    return int(d) if d == d.to_integral_value() else float(d)


@dataclass(frozen=True)
class ClusterState:
    """Everything admission reads, indexed for O(1) lookups.

    ``profile_set_problem``: None when the profile set is usable, else why it fails closed.
    ``read_claim``: how a state kept from watches reads a claim it does not hold yet; None for a
    snapshot.
    """

    cluster: TauCluster | None
    profiles: dict[str, ResolvedProfile]
    profile_set_hash: str
    profile_set_problem: str | None
    workspaces: dict[str, TauWorkspace]
    local_queues: dict[tuple[str, str], dict[str, Any]]
    cluster_queues: dict[str, dict[str, Any]]
    flavors: dict[str, dict[str, Any]]
    gpu_classes: dict[str, GpuClassSummary]
    queue_quotas: dict[tuple[str, str], tuple[FlavorQuota, ...]]
    default_queue: str = "jobqueue"
    generation: int = 0
    applicable: dict[tuple[str, str], tuple[ResolvedProfile, ...]] = field(default_factory=dict)
    lanes: frozenset[str] = frozenset()
    mig_resources: dict[str, MigSummary] = field(default_factory=dict)
    device_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    claim_templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    read_claim: Callable[[str, str, str], dict[str, Any] | None] | None = field(default=None, compare=False)
    gpu_nodes: GpuNodes = GpuNodes()

    def claim_spec(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim spec of a ResourceClaimTemplate (``kind`` "template") or ResourceClaim
        ("claim"), else read through ``read_claim``: one created a moment ago may not have reached
        the watch yet (``kubectl apply`` of a template and the workload naming it back to back)."""
        known = (self.claim_templates if kind == "template" else self.claims).get((namespace, name))
        if known is not None or self.read_claim is None:
            return known
        return self.read_claim(kind, namespace, name)

    def with_dra_object(self, obj: dict[str, Any], namespace: str) -> ClusterState:
        """This state with one more DRA object: ``taugate admit`` takes its input in order, so a
        claim template before the workload naming it is known to it, as through ``kubectl apply``."""
        found = _Objects()
        meta = given if isinstance(given := obj.get("metadata"), dict) else {}
        found.take({**obj, "metadata": {**meta, "namespace": namespace}}, source="input", strict=False,
                   check_types=False)
        return dataclasses.replace(self, device_classes={**self.device_classes, **found.device_classes},
                                   claim_templates={**self.claim_templates, **found.claim_templates},
                                   claims={**self.claims, **found.claims})

    @cached_property
    def extended_names(self) -> dict[str, str]:
        """DRA extended resource names (a DeviceClass's ``spec.extendedResourceName``) -> class."""
        out: dict[str, str] = {}
        for name, dc in sorted(self.device_classes.items()):
            ext = (dc.get("spec") or {}).get("extendedResourceName")
            if isinstance(ext, str) and ext:
                out.setdefault(ext, name)
        return out

    @cached_property
    def _memos(self) -> dict[str, Memo[Any, Any]]:
        return {}

    def memo(self, name: str, size: int) -> Memo[Any, Any]:
        """This state's memo ``name`` for a pure function of the state: a new state starts with
        none, so nothing outlives the state it was computed from."""
        found = self._memos.get(name)
        if found is None:
            found = self._memos.setdefault(name, Memo(size))
        return found

    @cached_property
    def classes_input(self) -> dict[str, dict[str, Any]]:
        """Built once per state and shared by every request: read it, never change it."""
        return {name: s.as_input() for name, s in self.gpu_classes.items()}

    @cached_property
    def mig_input(self) -> dict[str, dict[str, Any]]:
        return {name: m.as_input() for name, m in self.mig_resources.items()}

    def applicable_profiles(self, ws: TauWorkspace, lane: str) -> tuple[ResolvedProfile, ...]:
        """Precomputed, so a request costs the same with 5 profiles or 300 (a lane no profile
        names matches only profiles without a lane list)."""
        key = (ws.target_namespace, lane if lane in self.lanes else "")
        found = self.applicable.get(key)
        if found is None:
            team = ws.spec.team_ref.name if ws.spec.team_ref else None
            found = tuple(p for p in self.profiles.values()
                          if is_applicable(p, namespace=ws.target_namespace, team=team, lane=key[1]))
        return found

    def workspace_for(self, namespace: str | None) -> TauWorkspace | None:
        return self.workspaces.get(namespace or "")

    def queues_of(self, ws: TauWorkspace) -> list[str]:
        """LocalQueue names a workspace may use: its own queue (ARCHITECTURE.md section 2)."""
        return [ws.local_queue(self.default_queue)]


INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


def rule_matches(rule: Any, node_labels: dict[str, str]) -> bool:
    """Does a TauCluster node label rule select a node? TauGrid's ``match.vmSizes`` against
    ``node.kubernetes.io/instance-type`` (empty matches every node); taugate's ``gpuProducts``
    against ``nvidia.com/gpu.product``. With both set, either match selects."""
    vm_sizes, products = rule.match.vm_sizes, rule.gpu_products
    if not vm_sizes and not products:
        return True
    vm = next((node_labels[k] for k in INSTANCE_TYPE_LABELS if k in node_labels), None)
    product = node_labels.get(labels.GFD_GPU_PRODUCT)
    return bool((vm is not None and vm in vm_sizes) or (product is not None and product in products))


def node_gpu_class(node: dict[str, Any], settings: Settings, rules: Iterable[Any] = ()) -> str | None:
    """Its ``settings.gpu_class_label``, else what the first matching node label rule gives it, so
    the class is known before the operator has labelled the node."""
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    if settings.gpu_class_label in node_labels:
        labelled: str = node_labels[settings.gpu_class_label]
        return labelled
    for rule in rules:
        if settings.gpu_class_label in rule.labels and rule_matches(rule, node_labels):
            ruled: str = rule.labels[settings.gpu_class_label]
            return ruled
    return None


def node_problems(node: dict[str, Any], settings: Settings) -> tuple[str, ...]:
    """Why a node is unhealthy: NPD GPU conditions that are ``True``, and ``NotReady``."""
    out = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        t, s = cond.get("type"), cond.get("status")
        if t == "Ready" and s != "True":
            out.append("NotReady")
        elif t in settings.gpu_health_conditions and s == "True":
            out.append(t)
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        out.append("Unschedulable")
    return tuple(out)


def has_gpus(node: dict[str, Any]) -> bool:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return any(isinstance(k, str) and (k == labels.GPU_RESOURCE or is_device_resource(k))
               and (quantity(v) or Decimal(0)) > 0 for k, v in alloc.items())


def summarise_gpu_classes(nodes: Iterable[dict[str, Any]], settings: Settings,
                          rules: Iterable[Any] = ()) -> dict[str, GpuClassSummary]:
    rules = list(rules)
    acc: dict[str, dict[str, Any]] = {}
    for node in nodes:
        alloc = quantity(((node.get("status") or {}).get("allocatable") or {}).get(labels.GPU_RESOURCE)) or Decimal(0)
        if alloc <= 0:
            continue
        cls = node_gpu_class(node, settings, rules)
        if cls is None:
            continue
        gpus = int(alloc)
        a = acc.setdefault(cls, {"max": 0, "maxh": 0, "n": 0, "h": 0, "hg": 0, "products": set(), "problems": {}})
        a["n"] += 1
        a["max"] = max(a["max"], gpus)
        product = ((node.get("metadata") or {}).get("labels") or {}).get(labels.GFD_GPU_PRODUCT)
        if product:
            a["products"].add(product)
        problems = node_problems(node, settings)
        if problems:
            a["problems"][(node.get("metadata") or {}).get("name", "?")] = problems
        else:
            a["h"] += 1
            a["hg"] += gpus
            a["maxh"] = max(a["maxh"], gpus)
    return {cls: GpuClassSummary(cls, a["max"], a["maxh"], a["n"], a["h"], a["n"] - a["h"], a["hg"],
                                 tuple(sorted(a["products"])), dict(sorted(a["problems"].items())))
            for cls, a in sorted(acc.items())}


def summarise_mig_resources(nodes: Iterable[dict[str, Any]], settings: Settings) -> dict[str, MigSummary]:
    acc: dict[str, list[int]] = {}
    for node in nodes:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        healthy = None
        for name, raw in alloc.items():
            if not (isinstance(name, str) and is_device_resource(name)):
                continue
            n = quantity(raw)
            if n is None or n <= 0:
                continue
            if healthy is None:
                healthy = not node_problems(node, settings)
            a = acc.setdefault(name, [0, 0, 0, 0])
            a[0] = max(a[0], int(n))
            a[2] += 1
            if healthy:
                a[1] = max(a[1], int(n))
                a[3] += 1
    return {name: MigSummary(name, *a) for name, a in sorted(acc.items())}


def cluster_queue_quotas(cq: dict[str, Any]) -> tuple[FlavorQuota, ...]:
    """The cohort is ``spec.cohortName`` (kueue.x-k8s.io/v1beta2) or ``spec.cohort`` (v1beta1,
    in snapshots)."""
    spec, status = cq.get("spec") or {}, cq.get("status") or {}
    cohort = spec.get("cohortName") or spec.get("cohort")
    usage: dict[tuple[str, str], Decimal] = {}
    for fu in status.get("flavorsUsage") or status.get("flavorsReservation") or []:
        for r in fu.get("resources") or []:
            usage[(fu.get("name"), r.get("name"))] = quantity(r.get("total")) or Decimal(0)
    out = []
    for group in spec.get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            for r in fl.get("resources") or []:
                out.append(FlavorQuota(fl.get("name"), r.get("name"), quantity(r.get("nominalQuota")) or Decimal(0),
                                       (quantity(r.get("borrowingLimit")) if r.get("borrowingLimit") is not None
                                        else None),
                                       usage.get((fl.get("name"), r.get("name")), Decimal(0)), cohort))
    return tuple(out)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def build_state(objects: Iterable[dict[str, Any]], settings: Settings | None = None, *, generation: int = 0,
                source: str = "snapshot", strict: bool = False, check_types: bool = False) -> ClusterState:
    """A ``ClusterState`` from plain objects (pure apart from reading the clock).

    A TauCluster without ``status.workloadProfiles`` (an offline snapshot) is resolved here with
    the controller's own function; one whose ``profileSetHash`` differs from its spec's is stale,
    and admission fails closed. ``strict`` (a file, not watches) also refuses a second TauCluster
    or one not named ``cluster``, which watches ignore.
    """
    settings = settings or Settings()
    found = _Objects()
    for obj in objects:
        found.take(obj, source=source, strict=strict, check_types=check_types)
    cluster, lqs, cqs, rfs = found.cluster, found.local_queues, found.cluster_queues, found.flavors
    rules = cluster.spec.nodes.label_rules if cluster and cluster.spec.nodes else []
    gpu_classes = summarise_gpu_classes(found.nodes, settings, rules)
    profiles, set_hash, problem = _profiles(cluster, lqs, cqs, rfs, gpu_classes, found.priority_classes)
    quotas: dict[tuple[str, str], tuple[FlavorQuota, ...]] = {}
    for (ns, n), lq in lqs.items():
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        cq = cqs.get(cq_name) if isinstance(cq_name, str) else None
        if cq is not None:
            quotas[(ns, n)] = cluster_queue_quotas(cq)
    default_queue = cluster.spec.workspace_defaults.default_queue if cluster else "jobqueue"
    lanes = frozenset(lane for p in profiles.values() for lane in p.applicability.lanes)
    # Only a profile that lists the namespace or lists none can apply there (``is_applicable``):
    # 500 workspaces by 300 profiles would be 150,000 checks a rebuild; these are the candidates,
    # in the profiles' order, each still judged by ``is_applicable``.
    order = list(profiles.values())
    anywhere = [i for i, p in enumerate(order) if not p.applicability.namespaces]
    listing: dict[str, list[int]] = {}
    for i, p in enumerate(order):
        for ns in dict.fromkeys(p.applicability.namespaces):
            listing.setdefault(ns, []).append(i)
    applicable = {}
    for ws in found.workspaces.values():
        team = ws.spec.team_ref.name if ws.spec.team_ref else None
        candidates = [order[i] for i in sorted((*anywhere, *listing.get(ws.target_namespace, ())))]
        for lane in (*lanes, ""):
            applicable[(ws.target_namespace, lane)] = tuple(
                p for p in candidates if is_applicable(p, namespace=ws.target_namespace, team=team, lane=lane))
    return ClusterState(cluster, profiles, set_hash, problem, found.workspaces, lqs, cqs, rfs, gpu_classes,
                        quotas, default_queue, generation, applicable, lanes,
                        summarise_mig_resources(found.nodes, settings), found.device_classes,
                        found.claim_templates, found.claims,
                        gpu_nodes=GpuNodes.of((n for n in found.nodes if has_gpus(n)), settings.gpu_class_label))


def _check_types(obj: dict[str, Any], source: str) -> None:
    kind = obj.get("kind")
    meta = found if isinstance(found := obj.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(kind, str) or not isinstance(obj.get("apiVersion"), str):
        raise SnapshotError(f"{source}: an object's kind and apiVersion must be strings (kind is "
                            f"{json_type(kind)}, apiVersion is {json_type(obj.get('apiVersion'))})")
    problem = state_object_problem(obj)
    if problem is None and kind in ("TauCluster", "TauWorkspace"):
        problem = json_problem(obj)
    if problem:
        raise SnapshotError(f"{source}: {kind} {name!r}: {problem}")


@dataclass
class _Objects:

    cluster: TauCluster | None = None
    workspaces: dict[str, TauWorkspace] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    local_queues: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    priority_classes: set[str] = field(default_factory=set)  # WorkloadPriorityClass names
    device_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    claim_templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def take(self, obj: Any, *, source: str, strict: bool, check_types: bool) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError(f"{source}: expected Kubernetes objects, found {type(obj).__name__}")
        kind = obj.get("kind")
        meta = found if isinstance(found := obj.get("metadata"), dict) else {}
        name: Any = meta.get("name")  # a string once types are checked; watched objects always have one
        if check_types:
            _check_types(obj, source)
        try:
            if kind == "TauCluster":
                self._take_cluster(obj, name, source=source, strict=strict, check_types=check_types)
            elif kind == "TauWorkspace":
                self._take_workspace(obj, source=source, check_types=check_types)
        except ValidationError as e:
            raise SnapshotError(f"{source}: {kind} {name!r}: {first_problem(e)}") from None
        if kind == "Node":
            self.nodes.append(obj)
        elif kind == "LocalQueue":
            self.local_queues[(meta.get("namespace") or "default", name)] = obj
        elif kind == "ClusterQueue":
            self.cluster_queues[name] = obj
        elif kind == "ResourceFlavor":
            self.flavors[name] = obj
        elif kind == "WorkloadPriorityClass":
            self.priority_classes.add(name)
        elif kind == "DeviceClass":
            self.device_classes[name] = obj
        elif kind in ("ResourceClaimTemplate", "ResourceClaim"):
            spec = found if isinstance(found := obj.get("spec"), dict) else {}
            if kind == "ResourceClaimTemplate":
                spec = found if isinstance(found := spec.get("spec"), dict) else {}
                self.claim_templates[(meta.get("namespace") or "default", name)] = spec
            else:
                self.claims[(meta.get("namespace") or "default", name)] = spec

    def _take_cluster(self, obj: dict[str, Any], name: Any, *, source: str, strict: bool, check_types: bool) -> None:
        if name != "cluster":
            if strict:
                raise SnapshotError(f"{source}: TauCluster {name!r}: "
                                    "the TauCluster is a singleton named 'cluster'")
            return
        if strict and self.cluster is not None:
            raise SnapshotError(f"{source}: a second TauCluster; a snapshot holds exactly one, named 'cluster'")
        self.cluster = TauCluster.model_validate(obj, strict=check_types or None)

    def _take_workspace(self, obj: dict[str, Any], *, source: str, check_types: bool) -> None:
        ws = TauWorkspace.model_validate(obj, strict=check_types or None)
        other = self.workspaces.get(ws.target_namespace)
        if other is not None:
            raise SnapshotError(f"{source}: TauWorkspaces {other.metadata.name!r} and {ws.metadata.name!r} "
                                f"both target namespace {ws.target_namespace!r}")
        self.workspaces[ws.target_namespace] = ws


def _profiles(cluster: TauCluster | None, lqs: dict[tuple[str, str], dict[str, Any]],
              cqs: dict[str, dict[str, Any]], rfs: dict[str, dict[str, Any]],
              gpu_classes: dict[str, GpuClassSummary],
              priority_classes: set[str]) -> tuple[dict[str, ResolvedProfile], str, str | None]:
    """The resolved profiles, the profile set hash, and why admission must fail closed, or None."""
    if cluster is None:
        return {}, "", "no TauCluster named 'cluster' is known, so no workload profile can be resolved"
    set_hash = profile_set_hash(cluster.spec.workload_profiles)
    status = cluster.status.workload_profiles if cluster.status else None
    if status is None or not status.profiles:
        now = _now()
        return ({p.name: resolve_profile(p, local_queues=lqs, cluster_queues=cqs, flavors=rfs,
                                         gpu_classes=set(gpu_classes), now=now,
                                         workload_priority_classes=priority_classes)
                 for p in cluster.spec.workload_profiles}, set_hash, None)
    problem = None
    if status.profile_set_hash != set_hash:
        problem = (f"the TauCluster profile set is stale: status.workloadProfiles.profileSetHash is "
                   f"{status.profile_set_hash!r} but spec hashes to {set_hash!r}; wait for the taugate "
                   f"operator to reconcile the TauCluster")
    return {p.name: p for p in status.profiles}, set_hash, problem


def read_objects(path: str | _Path) -> list[dict[str, Any]]:
    """Every object in a YAML or JSON file (``-``: standard input), read with ``taugate.files``
    (size bound, duplicate keys refused, aliases bounded); raises ``SnapshotError`` naming the
    file and the problem."""
    name = "standard input" if str(path) == "-" else str(path)
    try:
        docs = load_documents(read_limited(path), name)
    except InputError as e:
        raise SnapshotError(str(e)) from None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise SnapshotError(f"{name}: document {i + 1} is {json_type(doc)}, not a Kubernetes object")
        if str(doc.get("kind") or "").endswith("List") and isinstance(doc.get("items"), list):
            for j, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise SnapshotError(f"{name}: document {i + 1}: items[{j}] is {json_type(item)}, "
                                        "not a Kubernetes object")
                out.append(item)
        else:
            out.append(doc)
    return out


def load_snapshot(path: str | _Path, settings: Settings | None = None) -> ClusterState:
    """Every field cluster state reads is type-checked first, so a wrong type is refused here
    instead of misleading admission later; ``SnapshotError`` names the file, object and field."""
    objects = read_objects(path)
    try:
        state = build_state(objects, settings, source=str(path), strict=True, check_types=True)
    except SnapshotError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError, ArithmeticError) as e:  # a check missing above
        raise SnapshotError(f"{path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if state.cluster is None:
        raise SnapshotError(f"{path}: no TauCluster in the snapshot; it needs the TauCluster 'cluster' with the "
                            f"workload profiles (see examples/cluster.yaml)")
    return state
