"""Every way a pod can reach a GPU, in one place (docs/gpu-paths.md has the table). Pure: objects
and the cluster state's DRA objects in, counts and problems out.

DRA (KEP-4381, ``resource.k8s.io/v1``): only DeviceClasses the platform names as GPU classes count
(``Settings.gpu_device_classes``).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taugate.access import as_dict, as_list
from taugate.memo import forget_everything

DEFAULT_DEVICE_RESOURCES: tuple[str, ...] = (
    "nvidia.com/mig-*", "nvidia.com/gpu.shared", "amd.com/gpu", "gpu.intel.com/*", "habana.ai/gaudi")
"""By name (a trailing ``*`` is a prefix): NVIDIA MIG slices (the GPU operator's ``mixed``
strategy), time-slicing/MPS with ``renameByDefault`` (k8s-device-plugin ``nvidia.com/gpu.shared``),
the AMD, Intel and Habana device plugins' resources; counted by name as Kueue counts them."""

_device_resources: tuple[str, ...] = DEFAULT_DEVICE_RESOURCES
_judged: dict[str, bool] = {}
"""``is_device_resource``'s answers under ``_device_resources``."""


def configure(extra: Iterable[str]) -> None:
    """Add the platform's own GPU device resources, once at start (as Kueue's DRA mapper is set
    once from its configuration). Every memo starts again: they hold results of the old table."""
    global _device_resources
    _device_resources = tuple(dict.fromkeys((*DEFAULT_DEVICE_RESOURCES, *extra)))
    _judged.clear()
    forget_everything()


def device_resources() -> tuple[str, ...]:
    return _device_resources


def is_device_resource(name: str) -> bool:
    """True for a GPU device resource counted by name (not ``nvidia.com/gpu`` itself). Each name's
    answer is kept until ``configure`` changes the table (a state rebuild asks it for every
    allocatable resource of every Node: a few names, tens of thousands of times)."""
    known = _judged.get(name)
    if known is None:
        known = _judged[name] = any(name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1]))
                                    for pattern in _device_resources)
        if len(_judged) > 4096:  # names come from objects: never an unbounded table
            _judged.clear()
    return known


DRA_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""The implicit extended resource of every DeviceClass (k8s.io/api resource/v1
``ResourceDeviceClassPrefix``, KEP-5004)."""


# --- Dynamic Resource Allocation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimCount:
    """The GPU devices one ResourceClaim(Template) spec asks for (``firstAvailable`` alternatives at
    their largest); ``problems``: what Kueue cannot count (kueue v0.17 ``pkg/dra/claims.go``
    ``countDevicesPerClass``) or a DeviceClass that does not exist."""

    gpus: int
    classes: tuple[str, ...]
    problems: tuple[tuple[str, str], ...]


def _count(raw: Any) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 1


def claim_devices(spec: Any, gpu_classes: Iterable[str], known_classes: Iterable[str]) -> ClaimCount:
    """What a ResourceClaimSpec asks of the GPU DeviceClasses, among those that exist.

    A request is ``exactly`` or ``firstAvailable`` (the largest subrequest counts), k8s.io/api
    ``resource/v1`` ``DeviceRequest``. Kueue (v0.17 ``pkg/dra/claims.go`` ``countDevicesPerClass``)
    counts only ``exactly`` requests in ``ExactCount`` mode without CEL selectors or admin access,
    in a claim without constraints or config; on a GPU request anything else is a problem (Kueue
    would leave the workload inadmissible), as is a DeviceClass that does not exist."""
    gpu, known = frozenset(gpu_classes), frozenset(known_classes)
    devices = as_dict(as_dict(spec).get("devices"))
    requests = as_list(devices.get("requests"))
    total, classes, problems = 0, [], []
    for i, req in enumerate(requests):
        if not isinstance(req, dict):
            continue
        at = f"devices.requests[{i}]"
        exactly = req.get("exactly")
        subs = as_list(req.get("firstAvailable"))
        options = [(f"{at}.exactly", exactly)] if isinstance(exactly, dict) else []
        options += [(f"{at}.firstAvailable[{j}]", s) for j, s in enumerate(subs) if isinstance(s, dict)]
        largest = 0
        for where, option in options:
            cls = option.get("deviceClassName")
            if not isinstance(cls, str) or not cls:
                continue
            if cls not in known:
                problems.append((f"{where}.deviceClassName", f"names DeviceClass {cls!r}, which does not exist "
                                 f"(DeviceClasses here: {', '.join(sorted(known)) or 'none'})"))
                continue
            if cls not in gpu:
                continue
            classes.append(cls)
            if option.get("allocationMode") == "All":
                problems.append((f"{where}.allocationMode", "is \"All\" on GPU DeviceClass "
                                 f"{cls!r}: every matching GPU of a node, a number no queue can count"))
                continue
            largest = max(largest, _count(option.get("count")))
            if where.endswith("exactly") and option.get("selectors"):
                problems.append((f"{where}.selectors", f"selects GPUs of {cls!r} with CEL, which Kueue cannot "
                                 "count (\"CEL selectors are not supported\")"))
            if where.endswith("exactly") and option.get("adminAccess"):
                problems.append((f"{where}.adminAccess", "asks admin access to GPUs (every device of the node, "
                                 "in use or not)"))
            if not where.endswith("exactly"):
                problems.append((where, f"offers GPUs of {cls!r} as a firstAvailable alternative, which Kueue "
                                 "cannot count (\"FirstAvailable device selection is not supported\")"))
        total += largest
    if classes:
        for key in ("constraints", "config"):
            if devices.get(key):
                problems.append((f"devices.{key}", f"is set on a claim for GPUs, which Kueue cannot count "
                                 f"(\"device {key} ... not supported\")"))
    return ClaimCount(total, tuple(dict.fromkeys(classes)), tuple(problems))


def pod_claims(pod_spec: dict[str, Any]) -> Iterator[tuple[int, str, str]]:
    """``(index, "template" or "claim", name)`` per entry of ``resourceClaims`` (core/v1
    ``PodResourceClaim``)."""
    for i, c in enumerate(as_list(pod_spec.get("resourceClaims"))):
        if not isinstance(c, dict):
            continue
        if isinstance(c.get("resourceClaimTemplateName"), str):
            yield i, "template", c["resourceClaimTemplateName"]
        elif isinstance(c.get("resourceClaimName"), str):
            yield i, "claim", c["resourceClaimName"]


def asks_through_dra(pod_spec: dict[str, Any]) -> bool:
    """Read without the cluster's DRA objects: a claim or template named, or a
    ``deviceclass.resource.kubernetes.io/`` extended resource."""
    if any(True for _ in pod_claims(pod_spec)):
        return True
    for lst in ("containers", "initContainers"):
        for c in as_list(pod_spec.get(lst)):
            res = as_dict(as_dict(c).get("resources"))
            for part in ("requests", "limits"):
                if any(isinstance(k, str) and k.startswith(DRA_CLASS_PREFIX) for k in as_dict(res.get(part))):
                    return True
    return False


def extended_class(name: str, extended_names: dict[str, str]) -> str | None:
    """The DeviceClass a container resource ``name`` is allocated from through DRA (KEP-5004), or
    None."""
    if name.startswith(DRA_CLASS_PREFIX):
        return name[len(DRA_CLASS_PREFIX):]
    return extended_names.get(name)


# --- Device access without a request ---------------------------------------------------------

DEVICE_VARIABLES: tuple[str, ...] = (
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES",
    "AMD_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES")
"""Variables a container runtime hook reads to hand devices to a container, whatever the pod
requests (NVIDIA Container Toolkit: in any container unless the node sets
``accept-nvidia-visible-devices-envvar-when-unprivileged = false``). ``CUDA_VISIBLE_DEVICES`` and
``ROCR_VISIBLE_DEVICES`` only choose among devices the container already has, so they are left alone."""

_NO_DEVICES = frozenset({"", "void", "none"})

DEVICE_PATHS: tuple[str, ...] = ("/dev/nvidia", "/dev/dri", "/dev/kfd", "/dev/accel", "/dev/vfio")
"""Host device nodes of GPUs: a hostPath volume of one, or of ``/dev`` or ``/`` above them, is
device access."""

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
"""Pod annotations the container runtime (containerd, CRI-O) reads as CDI device requests."""

_LISTS = ("containers", "initContainers", "ephemeralContainers")


NOT_NORMAL_PATH = r"//|/\.\.?(/|$)"
"""A hostPath with an empty, ``.`` or ``..`` step: refused as it is written (its device nodes could
hide behind it, and the API server's own policy, in CEL, cannot normalise a path to see)."""
_NOT_NORMAL = re.compile(NOT_NORMAL_PATH)

SPACE = " \t\n\v\f\r"
"""What is trimmed from a device variable's value: ASCII whitespace only, as the API server's
policy trims it (RE2 ``\\s``), so both read every value alike."""


def _normal(path: str) -> str:
    return "/" + posixpath.normpath(path).lstrip("/")


def _device_path(path: Any) -> bool:
    if not isinstance(path, str) or not path.startswith("/"):
        return False
    norm = _normal(path)
    return norm in ("/", "/dev") or any(norm == p or norm.startswith(p) for p in DEVICE_PATHS)


def access_problems(pod_spec: dict[str, Any], annotations: Any = None) -> list[tuple[tuple[str | int, ...], str]]:
    """``(path below the pod template, what)`` per way ``pod_spec`` reaches a device unasked."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    for lst in _LISTS:
        for i, c in enumerate(as_list(pod_spec.get(lst))):
            if not isinstance(c, dict):
                continue
            name = c.get("name") if isinstance(c.get("name"), str) else f"#{i}"
            for j, e in enumerate(as_list(c.get("env"))):
                if not isinstance(e, dict) or e.get("name") not in DEVICE_VARIABLES:
                    continue
                value = e.get("value")
                if "valueFrom" not in e and (value is None or str(value).strip(SPACE).lower() in _NO_DEVICES):
                    continue
                shown = json.dumps(value) if "valueFrom" not in e else "from valueFrom"
                out.append(((lst, i, "env", j), f"container {name} sets {e['name']}={shown}, which makes the "
                            "container runtime hand it GPUs that no request counts"))
            ctx = c.get("securityContext")
            if isinstance(ctx, dict) and ctx.get("privileged") is True:
                out.append(((lst, i, "securityContext", "privileged"), f"container {name} is privileged, so it "
                            "sees every device of its node, every GPU included"))
    for i, v in enumerate(as_list(pod_spec.get("volumes"))):
        host = v.get("hostPath") if isinstance(v, dict) else None
        path = host.get("path") if isinstance(host, dict) else None
        if isinstance(path, str) and _NOT_NORMAL.search(path):
            out.append((("volumes", i, "hostPath", "path"), f"mounts the host's {json.dumps(path)}, a path with an "
                        f"empty, . or .. step, which can hide GPU device nodes; write it as "
                        f"{json.dumps(_normal(path))}"))
        elif _device_path(path):
            out.append((("volumes", i, "hostPath", "path"), f"mounts the host's {path} (GPU device "
                        "nodes), which hands the pod GPUs that no request counts"))
    if isinstance(annotations, dict):
        for key in sorted(k for k in annotations if isinstance(k, str) and k.startswith(CDI_ANNOTATION_PREFIX)):
            out.append((("metadata", "annotations", key), "asks the container runtime for CDI devices directly, "
                        "past the scheduler and every quota"))
    return out


# --- GPU nodes without a GPU request ---------------------------------------------------------

Taint = tuple[str, str, str]

GPU_NODE_LABELS: tuple[str, ...] = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count")
"""Labels NVIDIA GPU Feature Discovery puts on GPU nodes."""

_KEEPING_OUT = ("NoSchedule", "NoExecute")

SYSTEM_TAINT_PREFIXES: tuple[str, ...] = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/",
                                          "ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler")
"""Taints any node carries for a while (not-ready, unreachable, being scaled down): not what fences
a GPU pool, and tolerated by every pod (the DefaultTolerationSeconds admission plugin), so a GPU
node carrying only these counts as unfenced."""


@dataclass(frozen=True, slots=True)
class GpuNodes:
    """What keeps pods off the cluster's GPU nodes: each one's ``NoSchedule``/``NoExecute`` taints
    but the system ones, and per GPU-selecting label the values GPU nodes carry."""

    taint_sets: frozenset[tuple[Taint, ...]] = frozenset()
    labels: tuple[tuple[str, frozenset[str]], ...] = ()

    @staticmethod
    def of(gpu_nodes: Iterable[dict[str, Any]], class_label: str) -> GpuNodes:
        taint_sets: set[tuple[Taint, ...]] = set()
        values: dict[str, set[str]] = {}
        for node in gpu_nodes:
            taints = tuple(sorted((str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
                                  for t in as_list(as_dict(node.get("spec")).get("taints"))
                                  if isinstance(t, dict) and t.get("effect") in _KEEPING_OUT
                                  and not str(t.get("key", "")).startswith(SYSTEM_TAINT_PREFIXES)))
            if taints:
                taint_sets.add(taints)
            node_labels = as_dict(as_dict(node.get("metadata")).get("labels"))
            for key in (class_label, *GPU_NODE_LABELS):
                if isinstance(node_labels.get(key), str):
                    values.setdefault(key, set()).add(node_labels[key])
        return GpuNodes(frozenset(taint_sets), tuple((k, frozenset(v)) for k, v in sorted(values.items())))


def tolerates(toleration: Any, taint: Taint) -> bool:
    """As the scheduler decides (k8s.io/api ``core/v1/toleration.go`` ``ToleratesTaint``), with
    KEP-5471's ``Lt``/``Gt`` as if their feature gate were on (the wider reading)."""
    if not isinstance(toleration, dict):
        return False
    key, value, effect = taint
    if toleration.get("effect") and toleration.get("effect") != effect:
        return False
    if toleration.get("key") and toleration.get("key") != key:
        return False
    op, wanted = toleration.get("operator") or "Equal", toleration.get("value") or ""
    if op == "Exists":
        return True
    if op == "Equal":
        return wanted == value
    if op in ("Lt", "Gt") and isinstance(wanted, str):
        try:
            mine, theirs = int(wanted, 10), int(value, 10)
        except ValueError:
            return False
        return theirs < mine if op == "Lt" else theirs > mine
    return False


def _shown(taints: tuple[Taint, ...]) -> str:
    return ", ".join(f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in taints)


def gpu_node_problems(pod_spec: dict[str, Any], gpu_nodes: GpuNodes) -> list[tuple[tuple[str | int, ...], str]]:
    """How a pod asking for no GPU would reach GPU nodes by its own hand (tolerations of every
    fencing taint, a GPU node label selected), ``(path below the pod spec, what)``. There the runtime
    hands it GPUs no request counts: a CUDA image sets ``NVIDIA_VISIBLE_DEVICES=all`` in its own
    environment, which no admission can see."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    tolerations = as_list(pod_spec.get("tolerations"))
    for taints in sorted(gpu_nodes.taint_sets):
        if all(any(tolerates(t, taint) for t in tolerations) for taint in taints):
            out.append((("tolerations",), f"its tolerations tolerate the taints of GPU nodes ({_shown(taints)}) "
                        "although it asks for no GPU"))
            break
    chosen = dict(gpu_nodes.labels)
    for key, value in sorted(as_dict(pod_spec.get("nodeSelector")).items()):
        if key in chosen and value in chosen[key]:
            out.append((("nodeSelector", key), f"its nodeSelector {key}={value} chooses GPU nodes although it asks "
                        "for no GPU"))
    required = as_dict(as_dict(as_dict(pod_spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    for i, term in enumerate(as_list(required.get("nodeSelectorTerms"))):
        for j, expr in enumerate(as_list(as_dict(term).get("matchExpressions"))):
            expr = as_dict(expr)
            label, op = expr.get("key"), expr.get("operator")
            if not isinstance(label, str) or label not in chosen:
                continue
            values = [v for v in as_list(expr.get("values")) if v in chosen[label]]
            if op == "Exists" or (op == "In" and values):
                what = f"{label} {op}" + (f" {values}" if values else "")
                out.append((("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                             "nodeSelectorTerms", i, "matchExpressions", j),
                            f"its required node affinity ({what}) chooses GPU nodes although it asks for no GPU"))
    return out
