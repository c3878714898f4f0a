"""GPU workloads of kinds taugate does not manage, in a workspace (``taugate.unmanaged`` holds the
table and says why): refused or warned by ``Settings.unmanaged_gpu_workloads``. Only a CREATE, or
an UPDATE that adds GPUs to an object that had none, is judged, so an UPDATE never fails for an
object admitted before (the garbage collector, a scale, a status writer).
"""

from __future__ import annotations

from taugate import devices, labels
from taugate.access import as_dict
from taugate.demand import ACCESS_POLICY
from taugate.fieldpath import field_path
from taugate.kinds import KINDS, WorkloadKind, group_of, kind_for
from taugate.kinds import pod as pod_kind
from taugate.pods import PodTemplate, asks_for_gpus
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.unmanaged import unmanaged_kind_for
from taugate.webhook import mutation
from taugate.webhook.decision import Decision, Violation

POLICY = "unmanaged-kind"
"""The ``Violation.policy`` of a GPU workload of a kind taugate does not manage."""


def unmanaged_pod(request: dict, obj: dict, settings: Settings) -> dict | None:
    """The controller ownerReference of a Pod whose controller is of a kind taugate does not
    manage (not a workload kind), when the Pod is not a governed workload's child
    (``mutation.is_child``); else None. A Pod claiming a workload-kind owner it was not created by
    is a top-level Pod (queued and placed), not an unmanaged one."""
    ref = mutation.controller_ref(obj)
    if ref is None or mutation.is_child(request, obj, settings):
        return None
    owner = mutation.owner_group_kind(ref)
    return None if owner in mutation.WORKLOAD_OWNER_KINDS else ref


def left_alone(request: dict, obj: dict, kind: WorkloadKind, templates: list[PodTemplate], child: bool,
               settings: Settings) -> bool:
    """True when admission passes ``obj`` unchanged and unjudged: a CPU-only object of a kind
    governed only when it asks for GPUs, unless taugate admitted the stored object (its run-id is
    restored on UPDATE like any other); or a Pod whose controller is of a kind taugate does not
    manage (``verdict`` judges it instead)."""
    if child:
        return False
    if not kind.governs(templates) and not _admitted(request.get("oldObject")):
        return True
    return kind is pod_kind.KIND and unmanaged_pod(request, obj, settings) is not None


def _admitted(old: object) -> bool:
    """The stored object (on UPDATE) carries a run-id taugate gave it."""
    meta = old.get("metadata") if isinstance(old, dict) else None
    found = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(found, dict) and mutation.valid_run_id(found.get(labels.RUN_ID))


def gpus_added(request: dict, kind: WorkloadKind, templates: list[PodTemplate]) -> Decision | None:
    """The denial of an UPDATE that gives GPUs to an object of a kind governed only when it asks
    for them (``kind.governs``) that was admitted without GPUs, hence without a queue, placement
    or run-id; None otherwise. Kueue keeps the queue-name label of a running Deployment or
    StatefulSet immutable (kueue v0.17 ``deployment_webhook.go`` ``ValidateUpdate``), so such an
    object cannot be queued in place: it has to be created again."""
    old = request.get("oldObject")
    # Cheapest first: every UPDATE passes here, and almost all are of governed, admitted objects.
    if request.get("operation") != "UPDATE" or not isinstance(old, dict) or not kind.governs(templates):
        return None
    if _admitted(old) or kind.malformed(old) or kind.governs(kind.pod_templates(old)):
        return None
    return Decision.deny([Violation("gpus-added-on-update", field_path(templates[0].path) or "spec",
        f"gives GPUs ({_gpus(templates)}) to a {kind.kind} that was created without any, so it was admitted with "
        f"no queue, placement or run-id, and Kueue does not queue a running {kind.kind} in place; allowed: a GPU "
        f"{kind.kind} created with its GPUs; fix: delete it and create it again with the GPUs (kubectl replace "
        f"--force -f FILE)")], obj=request.get("object"))


def _device_access(templates: list[PodTemplate], old_templates: list[PodTemplate] | None,
                   settings: Settings) -> list[Violation]:
    """Device access without a request (``devices.access_problems``) in an unmanaged kind's pod
    template that the stored object did not have, with ``gpu.deviceAccess: deny``: its pods are
    children, judged by nobody, so a bare DaemonSet with ``NVIDIA_VISIBLE_DEVICES=all`` would reach
    every GPU node's GPUs."""
    if settings.device_access != "deny":
        return []

    def problems(ts: list[PodTemplate]) -> list[tuple[tuple[str | int, ...], str]]:
        return [(rel if rel[0] == "metadata" else ("spec", *rel), what) for t in ts for rel, what in
                devices.access_problems(t.spec, as_dict(t.template.get("metadata")).get("annotations"))]

    before = {rel for rel, _ in problems(old_templates or [])}
    return [Violation(ACCESS_POLICY, field_path(templates[0].path + rel), f"{what}; allowed in a workspace: GPUs "
                      f"asked for in resources of a managed kind; fix: remove it")
            for rel, what in problems(templates) if rel not in before]


def _managed_kinds() -> str:
    return ", ".join(f"{k.kind} ({k.api_version})" for k in KINDS)


def _gpus(templates: list[PodTemplate]) -> str:
    t = templates[0]
    mig = ", ".join(f"{n} {name}" for name, n in sorted(t.mig_per_pod.items()))
    per_pod = f"{t.gpus_per_pod} nvidia.com/gpu" if t.gpus_per_pod else mig
    return f"{per_pod} per pod x {t.replicas} pod(s)"


def _judged(request: dict, templates: list[PodTemplate], old_templates: list[PodTemplate] | None) -> bool:
    """A CREATE asking for GPUs, or an UPDATE that adds GPUs to an object that had none."""
    if not asks_for_gpus(templates):
        return False
    return request.get("operation") == "CREATE" or (old_templates is not None and not asks_for_gpus(old_templates))


def verdict(request: dict, state: ClusterState, settings: Settings) -> Decision | None:
    """The answer for an unmanaged GPU workload in a workspace (``deny``: 403 naming the managed
    kinds and the fix; ``warn``: allowed with a warning), or None when ``request`` is not one."""
    if request.get("subResource") or request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    obj, old = request.get("object"), request.get("oldObject")
    if not isinstance(obj, dict) or ((request.get("userInfo") or {}).get("username")) == settings.service_account:
        return None
    meta = as_dict(obj.get("metadata"))
    namespace = request.get("namespace") or meta.get("namespace")
    if not isinstance(namespace, str) or state.workspace_for(namespace) is None:
        return None
    gvk = request.get("kind") or {}
    group = gvk.get("group") if isinstance(gvk.get("group"), str) else group_of(str(obj.get("apiVersion") or ""))
    name = gvk.get("kind") or obj.get("kind")
    unmanaged = unmanaged_kind_for(group, name)
    if unmanaged is not None:
        if mutation.is_child(request, obj, settings):
            return None
        templates = unmanaged.pod_templates(obj)
        old_templates = unmanaged.pod_templates(old) if isinstance(old, dict) else None
        reached = _device_access(templates, old_templates, settings)
        if reached:
            return Decision.deny(reached, obj=obj)
        what, where = f"a {unmanaged.kind}", field_path(("spec", "template"))
        instead = " (a Deployment, not a bare ReplicaSet)" if unmanaged.parent else ""
        fix = f"run it as one of the managed kinds{instead}, which are queued and placed by the workspace's profile"
    elif kind_for(group, name) is pod_kind.KIND:
        ref = unmanaged_pod(request, obj, settings)
        if ref is None:
            return None
        templates = pod_kind.KIND.pod_templates(obj)
        old_templates = pod_kind.KIND.pod_templates(old) if isinstance(old, dict) else None
        what, where = f"a Pod controlled by {ref.get('kind')} {ref.get('name')!r}", "metadata.ownerReferences"
        fix = f"create the GPU workload as one of the managed kinds instead of a {ref.get('kind')}"
    else:
        return None
    if not _judged(request, templates, old_templates):
        return None
    text = (f"{what} asks for GPUs ({_gpus(templates)}) but taugate does not manage that kind: its pods would "
            f"skip the workspace's queue, placement and run-id; allowed: GPU workloads of the managed kinds "
            f"{_managed_kinds()}; fix: {fix}, or ask the platform team to allow unmanaged GPU workloads with a "
            f"warning (Helm value webhook.unmanagedGpuWorkloads: warn)")
    violation = Violation(POLICY, where, text, "warn" if settings.unmanaged_gpu_workloads == "warn" else "deny")
    if violation.action == "warn":
        return Decision.allow(obj, [violation.render()])
    return Decision.deny([violation], obj=obj)
