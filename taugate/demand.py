"""A workload's GPU demand in its cluster (ARCHITECTURE.md section 2, docs/gpu-paths.md): DRA GPUs
and governed device access folded into the templates, every way past that model a ``Violation``.
``govern`` runs before anything else decides (a CPU-only Pod with ``NVIDIA_VISIBLE_DEVICES`` is not
left alone). GPUs in a ResourceClaim (not a template) are refused: Kueue leaves such a workload
inadmissible (kueue v0.17 ``pkg/controller/core/workload_controller.go``: "DynamicResourceAllocation
feature does not support use of resource claims").
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from taugate import devices, labels
from taugate.fieldpath import field_path
from taugate.kinds import WorkloadKind
from taugate.memo import Memo
from taugate.pods import ContainerList, PodTemplate, gpu_quantity, is_sidecar, pod_request
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.violation import Violation

DRA_POLICY = "gpu-dra"
"""The ``Violation.policy`` of a GPU asked through DRA in a way taugate cannot govern."""
ACCESS_POLICY = "gpu-device-access"
"""The ``Violation.policy`` of device access without a request."""
NODE_POLICY = "cpu-pod-on-gpu-node"
"""The ``Violation.policy`` of a pod without GPUs that reaches GPU nodes by its own hand."""

_WAY = ("ask for whole GPUs as nvidia.com/gpu in resources.limits (docs/gpu-paths.md lists every way this "
        "platform takes)")


def govern(templates: list[PodTemplate], namespace: str, state: ClusterState,
           settings: Settings) -> tuple[list[PodTemplate], list[Violation]]:
    """``templates`` with their DRA GPUs (``PodTemplate.dra_gpus``) and governed device access
    folded in, and the violations: a missing claim, claim template or DeviceClass; DRA GPUs while
    ``Settings.dra_gpu_workloads`` is ``deny``; GPUs in a ResourceClaim; what Kueue cannot count
    (``devices.claim_devices``); device access without a request unless ``Settings.device_access``
    is ``govern``; a template without GPUs that reaches GPU nodes (``devices.gpu_node_problems``).
    Templates with nothing of either are returned as they are."""
    out: list[PodTemplate] = []
    found: list[Violation] = []
    for t in templates:
        access = _access(t, settings, found)
        gpus = _claims(t, namespace, state, settings, found) + _extended(t, state, settings, found)
        if gpus or access:
            t = dataclasses.replace(t, gpus_per_pod=t.gpus_per_pod + gpus, dra_gpus=gpus, device_access=access)
        if not (t.gpus_per_pod or t.mig_per_pod or t.device_access or _writes_gpus(t)):
            _gpu_nodes(t, state, found)
        out.append(t)
    return out, found


def _writes_gpus(t: PodTemplate) -> bool:
    """Whether a container writes an ``nvidia.com/gpu`` amount that is not a plain zero: one that is
    no usable number (``1e30``) is a GPU request refused for its amount, not a CPU pod (read from
    the template's ``container_gpus``, as counted)."""
    return any((c.request is not None and c.request_n != 0) or (c.limit is not None and c.limit_n != 0)
               for c in t.container_gpus)


def _gpu_nodes(t: PodTemplate, state: ClusterState, found: list[Violation]) -> None:
    for rel, what in devices.gpu_node_problems(t.spec, state.gpu_nodes):
        found.append(Violation(NODE_POLICY, field_path(t.path + ("spec", *rel)),
            f"pod template {t.group}: {what}; on a GPU node the container runtime hands a pod GPUs that no request "
            f"counts (a CUDA image sets NVIDIA_VISIBLE_DEVICES=all itself), outside the queue and every quota; "
            f"allowed: GPU node tolerations and selectors only on pods that ask for GPUs (taugate adds your "
            f"profile's to them); fix: remove it, or {_WAY}"))


def stored(kind: WorkloadKind, old: dict[str, Any] | None, namespace: str, state: ClusterState,
           settings: Settings) -> tuple[list[Violation], list[PodTemplate], list[Violation]]:
    """The stored object's structure problems, pod templates and refused paths to a GPU (an
    UPDATE's ``old``), its DRA GPUs folded in as for the new object, so the two are judged alike."""
    if old is None:
        return [], [], []
    malformed, templates = kind.read(old)
    if malformed:
        return malformed, templates, []
    return [], *govern(templates, namespace, state, settings)


SPEC_MEMO_SIZE = 1024
"""Pod specs whose device facts are remembered (``_spec_facts``); the memo starts again when full."""

_Facts = tuple[tuple[tuple[tuple[str | int, ...], str], ...], dict[str, tuple[int, tuple[ContainerList, int, str]]]]
_facts_memo: Memo[bytes, _Facts] = Memo(SPEC_MEMO_SIZE)


def _spec_facts(t: PodTemplate) -> _Facts:
    """What ``govern`` reads of a pod spec, a pure function of its JSON text (``PodTemplate.spec_json``),
    remembered by it as a pod spec's GPU demand is (``taugate.pods.pod_resources``): its device access
    (``devices.access_problems``, annotations aside) and, per extended resource name (one with a
    ``/``), what one pod holds (the pod request formula, rounded up) and where it is first written
    (container list, index, ``requests`` or ``limits``). Read it, never change it."""
    hit = _facts_memo.get(t.spec_json) if t.spec_json is not None else None
    if hit is not None:
        return hit
    per: dict[str, list[tuple[str, bool, Decimal]]] = {}
    where: dict[str, tuple[ContainerList, int, str]] = {}
    for kind, i, c in t.containers():
        res = found if isinstance(found := c.get("resources"), dict) else {}
        amounts: dict[str, Any] = {}
        for part in ("requests", "limits"):  # limits last: the limit wins
            values = res.get(part)
            for name, raw in (values.items() if isinstance(values, dict) else ()):
                if isinstance(name, str) and "/" in name:
                    amounts[name] = raw
                    where.setdefault(name, (kind, i, part))
        for name, raw in amounts.items():
            q = gpu_quantity(raw)
            per.setdefault(name, []).append((kind, is_sidecar(kind, c), q if q is not None and q >= 0 else Decimal(0)))
    extended = {}
    for name, items in per.items():
        n = pod_request(items)
        extended[name] = (int(n) if n == n.to_integral_value() else int(n) + 1, where[name])
    facts: _Facts = (tuple(devices.access_problems(t.spec)), extended)
    if t.spec_json is not None:
        _facts_memo.put(t.spec_json, facts)
    return facts


def _access(t: PodTemplate, settings: Settings, found: list[Violation]) -> tuple[str, ...]:
    meta = t.template.get("metadata") if isinstance(t.template, dict) else None
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    problems = [*_spec_facts(t)[0], *(devices.access_problems({}, notes) if notes else ())]
    if settings.device_access == "govern":
        return tuple(what for _, what in problems)
    for rel, what in problems:
        where = t.path + rel if rel[0] == "metadata" else t.path + ("spec", *rel)
        found.append(Violation(ACCESS_POLICY, field_path(where),
            f"{what}; allowed in a workspace: GPUs asked for in resources (queued and counted), never device "
            f"access past them (the Pod Security Standards' baseline forbids privileged containers and host "
            f"paths too); fix: remove it and {_WAY}"))
    return ()


def _claims(t: PodTemplate, namespace: str, state: ClusterState, settings: Settings,
            found: list[Violation]) -> int:
    total = 0
    for i, how, name in devices.pod_claims(t.spec):
        ref = "resourceClaimTemplateName" if how == "template" else "resourceClaimName"
        where = field_path(t.path + ("spec", "resourceClaims", i, ref))
        what = "ResourceClaimTemplate" if how == "template" else "ResourceClaim"
        spec = state.claim_spec(how, namespace, name)
        if spec is None:
            found.append(Violation(DRA_POLICY, where,
                f"names {what} {name!r}, which does not exist in namespace {namespace!r}, so taugate cannot tell "
                f"which devices it asks for; allowed: a {what} of this namespace; fix: create the {what} first "
                f"(kubectl apply it before the workload), or remove the claim"))
            continue
        count = devices.claim_devices(spec, settings.gpu_device_classes, state.device_classes)
        for rel, text in count.problems:
            found.append(Violation(DRA_POLICY, where,
                f"names {what} {name!r}, whose {rel} {text}; allowed: GPUs asked as `exactly: {{deviceClassName, "
                f"count}}` in a ResourceClaimTemplate, which Kueue counts against the queue; fix: change the "
                f"{what}, or {_WAY}"))
        if not count.classes:
            continue
        gpus = f"{count.gpus} GPU(s) of DeviceClass {', '.join(count.classes)}"
        if how == "claim":
            found.append(Violation(DRA_POLICY, where,
                f"names ResourceClaim {name!r}, which asks for {gpus}; Kueue does not count the devices of a "
                f"ResourceClaim (\"DynamicResourceAllocation feature does not support use of resource claims\"), "
                f"so they would skip the workspace's GPU quota; allowed: GPUs through a ResourceClaimTemplate; fix: "
                f"name a ResourceClaimTemplate (resourceClaimTemplateName) with the same devices"))
        elif settings.dra_gpu_workloads == "deny":
            found.append(Violation(DRA_POLICY, where, dra_off(f"ResourceClaimTemplate {name!r} asks for {gpus}")))
        elif not count.problems:
            total += count.gpus
    return total


def dra_off(what: str) -> str:
    return (f"{what} through Dynamic Resource Allocation, which this platform does not queue (Kueue counts DRA "
            f"devices only with its DynamicResourceAllocation gate and deviceClassMappings); fix: {_WAY}, or ask "
            f"the platform team to turn on Kueue's DRA support and set the Helm value gpu.draWorkloads: queue")


def _extended(t: PodTemplate, state: ClusterState, settings: Settings, found: list[Violation]) -> int:
    """GPUs one pod of ``t`` asks as DRA extended resources (KEP-5004), by the pod request formula."""
    total = 0
    for name, (count, (kind, i, part)) in sorted(_spec_facts(t)[1].items()):
        cls = devices.extended_class(name, state.extended_names)
        if cls is None or cls not in settings.gpu_device_classes and cls in state.device_classes:
            continue
        at = field_path(t.resources_path(kind, i) + (part, name))
        if cls not in state.device_classes:
            found.append(Violation(DRA_POLICY, at, f"asks for {name}, the extended resource of DeviceClass "
                                   f"{cls!r}, which does not exist; fix: name an existing DeviceClass, or {_WAY}"))
        elif name == labels.GPU_RESOURCE:
            continue  # a GPU class's extendedResourceName nvidia.com/gpu: counted as nvidia.com/gpu already
        elif settings.dra_gpu_workloads == "deny":
            found.append(Violation(DRA_POLICY, at, dra_off(f"asks for {count} GPU(s) of DeviceClass {cls!r} "
                                                            f"as the extended resource {name}")))
        else:
            total += count
    return total


def ephemeral_problems(obj: dict[str, Any], old: dict[str, Any] | None, settings: Settings) -> list[Violation]:
    """Device access by the ephemeral containers an UPDATE of a Pod's ``ephemeralcontainers``
    subresource adds (``kubectl debug``: a privileged debug container sees every GPU of the node), as
    ``govern`` judges any container; the ones the stored Pod already had are excused."""
    if settings.device_access == "govern":
        return []
    spec = found if isinstance(found := obj.get("spec"), dict) else {}
    old_spec = found if isinstance(old, dict) and isinstance(found := old.get("spec"), dict) else {}
    only = {"ephemeralContainers": spec.get("ephemeralContainers")}
    before = {rel for rel, _ in devices.access_problems({"ephemeralContainers": old_spec.get("ephemeralContainers")})}
    return [Violation(ACCESS_POLICY, field_path(("spec", *rel)), f"{what}; allowed in a workspace: a debug container "
                      f"without device access; fix: remove it (kubectl debug without --profile=sysadmin)")
            for rel, what in devices.access_problems(only) if rel not in before]
