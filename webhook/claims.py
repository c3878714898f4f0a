"""ResourceClaims and ResourceClaimTemplates written in a workspace, judged as the GPU requests they
are (``verdict``), and debug containers added to a workspace Pod, judged for device access
(``debug_verdict``). A ResourceClaim asking for GPUs is refused (Kueue does not count its devices)
unless kube-controller-manager's resource-claim controller or kube-scheduler (KEP-5004 extended
resources) made it for a Pod. Only a CREATE is judged: the specs are immutable (k8s.io/api
resource/v1). Pure.
"""

from __future__ import annotations

from typing import Any

from taugate import devices
from taugate.access import as_dict
from taugate.demand import DRA_POLICY, dra_off, ephemeral_problems
from taugate.settings import RESOURCE_CLAIM_CREATORS, Settings
from taugate.snapshot import ClusterState
from taugate.webhook import mutation
from taugate.webhook.decision import Decision, Violation

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def _made_for_a_pod(request: dict, obj: dict, settings: Settings) -> bool:
    user = (request.get("userInfo") or {}).get("username")
    ref = mutation.controller_ref(obj)
    return (ref is not None and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1"
            and (user in RESOURCE_CLAIM_CREATORS or user in settings.controller_users))


def _most_gpus_per_pod(state: ClusterState, namespace: str) -> int:
    """The most GPUs one pod may hold under any profile that applies in the workspace (any lane)."""
    most = 0
    for (ns, _), profiles in state.applicable.items():
        if ns == namespace:
            for p in profiles:
                most = max(most, p.max_gpus_per_pod or p.gpus_per_worker)
    return most


def verdict(request: dict, state: ClusterState, settings: Settings) -> Decision | None:
    """The validating webhook's answer for a ResourceClaim or ResourceClaimTemplate in a workspace,
    or None when ``request`` is not one (then the usual validation decides)."""
    gvk = request.get("kind") or {}
    if gvk.get("group") != GROUP or gvk.get("kind") not in KINDS:
        return None
    obj = request.get("object")
    if (request.get("subResource") or request.get("operation") != "CREATE"
            or not isinstance(obj, dict)
            or (request.get("userInfo") or {}).get("username") == settings.service_account):
        return None
    namespace = request.get("namespace")
    ws = state.workspace_for(namespace) if isinstance(namespace, str) else None
    if ws is None or _made_for_a_pod(request, obj, settings):
        return None
    template = gvk.get("kind") == "ResourceClaimTemplate"
    spec: Any = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    base = "spec.spec" if template else "spec"
    if template:
        spec = spec.get("spec") if isinstance(spec.get("spec"), dict) else {}
    count = devices.claim_devices(spec, settings.gpu_device_classes, state.device_classes)
    what = f"{gvk.get('kind')} {as_dict(obj.get('metadata')).get('name')!r}"
    found = [Violation(DRA_POLICY, f"{base}.{rel}", f"{text}; allowed: GPUs asked as `exactly: {{deviceClassName, "
                       "count}` in a ResourceClaimTemplate, which Kueue counts against the queue; fix: change it")
             for rel, text in count.problems]
    gpus = f"{count.gpus} GPU(s) of DeviceClass {', '.join(count.classes)}"
    if count.classes and not template:
        found.append(Violation(DRA_POLICY, f"{base}.devices", f"{what} asks for {gpus}; Kueue does not count the "
            "devices of a ResourceClaim, so a pod using it would skip the workspace's GPU quota; allowed: GPUs "
            "through a ResourceClaimTemplate, one claim per pod; fix: make it a ResourceClaimTemplate"))
    elif count.classes and settings.dra_gpu_workloads == "deny":
        found.append(Violation(DRA_POLICY, f"{base}.devices", dra_off(f"{what} asks for {gpus}")))
    elif count.classes:
        most = _most_gpus_per_pod(state, ws.target_namespace)
        if count.gpus > most:
            found.append(Violation(DRA_POLICY, f"{base}.devices", f"{what} asks for {gpus} for one pod; allowed: "
                f"at most {most}, the most GPUs one pod holds under this workspace's workload profiles; fix: ask "
                f"for {most} or fewer, and more pods for more GPUs"))
    return Decision.deny(found, obj=obj) if found else None


def debug_verdict(request: dict, state: ClusterState, settings: Settings) -> Decision:
    """The validating webhook's answer for an UPDATE of a Pod's ``ephemeralcontainers`` subresource
    (``kubectl debug``): refused when an added debug container reaches devices without asking
    (``taugate.demand.ephemeral_problems``) in a workspace; allowed otherwise."""
    obj, old = request.get("object"), request.get("oldObject")
    namespace = request.get("namespace")
    if (not isinstance(obj, dict) or request.get("operation") != "UPDATE"
            or (request.get("userInfo") or {}).get("username") == settings.service_account
            or not isinstance(namespace, str) or state.workspace_for(namespace) is None):
        return Decision.allow(obj)
    found = ephemeral_problems(obj, old if isinstance(old, dict) else None, settings)
    return Decision.deny(found, obj=obj) if found else Decision.allow(obj)
