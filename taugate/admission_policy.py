"""The ValidatingAdmissionPolicy that keeps taugate's core invariant inside the API server (CEL,
ValidatingAdmissionPolicy GA in Kubernetes 1.30, KEP-3488): in a workspace namespace, a workload
that asks for GPUs is created only as taugate admits it (run-id, admission record bound to it, the
namespace's workspace and LocalQueue, the node selector of its workload profile), no pod template
gains device access unasked, a way onto GPU nodes without GPUs or a way past the scheduler, GPUs
are not added to an object created without them, and an update keeps what taugate gave. It sees
the object after every mutating webhook and holds while taugate's webhook is down
(ARCHITECTURE.md section 2, "What runs where", says what stays in the webhook and why). The
operator installs and keeps it (``taugate/controllers/admission_policy.py``).

Every rule is a subset of what taugate's webhook decides, so it never refuses what taugate admits
(but for a toleration or selector of the profiles' GPU nodes where no such node exists yet): GPUs
are what a container requests or limits by name (``nvidia.com/gpu``,
``taugate.devices.device_resources``, a GPU DeviceClass's extended resource), not DRA claims (a
claim's GPUs need the ResourceClaim, which CEL cannot read; claims are judged by the validating
webhook, which fails closed). The profiles come as the policy's parameter, so a profile edit needs
no new policy: the TauProfilePlacement the operator writes from the TauCluster (``parameters``),
not the TauCluster itself, because kube-apiserver converts a custom resource parameter whole on
every evaluation (k8s.io/apiserver pkg/cel/common/valuesschemalesstyped.go ``SchemalessTypedToVal``:
an ``Unstructured`` goes through ``ToUnstructured``, a JSON round trip), which made a TauCluster of
505 profiles cost 190 ms a create (docs/performance.md, "taugate's own API server policy"). Not a
ConfigMap either, though a built-in kind is read lazily: the API server stops a built-in kind's
shared informer when no binding names that kind and never starts it again, so a policy re-bound
after an uninstall or a turn off and on would read a frozen copy (``policy_source.go``
``ensureParamsForPolicyLocked``; kubernetes/kubernetes#130887), while a custom resource gets a new
informer each time.
"""

from __future__ import annotations

import json
import re
from typing import Any

from taugate import devices, labels
from taugate.kinds import KINDS
from taugate.kinds.trainjob import KIND as TRAINJOB
from taugate.models import ProfilePlacement, TauCluster, TauProfilePlacement, TauProfilePlacementSpec
from taugate.profiles import profile_set_hash
from taugate.settings import Settings
from taugate.unmanaged import RELAY_OWNER_KINDS, UNMANAGED_KINDS

NAME = "taugate-admitted-workloads"
RUN_ID_PATTERN = f"^[0-9a-f]{{{labels.RUN_ID_LENGTH}}}$"
UNAVAILABLE = ("; taugate's admission webhook may be unavailable: create it again once taugate answers, "
               "or ask the platform team (docs/runbook.md)")


def _cel(value: str) -> str:
    return json.dumps(value)  # a JSON string is a CEL string literal


def _list(values: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(_cel(v) for v in values) + "]"


def _label(obj: str, key: str) -> str:
    """CEL: the value of label ``key`` of ``obj`` (``object``, ``oldObject``, ``namespaceObject``), or ''."""
    labels_ = f"{obj}.metadata.labels"
    return f"(has({labels_}) && {_cel(key)} in {labels_} ? {labels_}[{_cel(key)}] : '')"


def _annotation(obj: str, key: str) -> str:
    notes = f"{obj}.metadata.annotations"
    return f"(has({notes}) && {_cel(key)} in {notes} ? {notes}[{_cel(key)}] : '')"


class Expr(str):
    """A CEL expression among the parts of a message (``_message``); any other part is text."""


def _message(*parts: str) -> str:
    return " + ".join(p if isinstance(p, Expr) else _cel(p) for p in parts)


def _gpu_resource(k: str, settings: Settings) -> str:
    """CEL: resource name ``k`` is a GPU device resource (``taugate.devices``, with the platform's own),
    or the extended resource of a GPU DeviceClass (``devices.DRA_CLASS_PREFIX``, KEP-5004)."""
    named = tuple(dict.fromkeys((*devices.DEFAULT_DEVICE_RESOURCES, *settings.gpu_device_resources)))
    exact = ([labels.GPU_RESOURCE] + [r for r in named if not r.endswith("*")] +
             [devices.DRA_CLASS_PREFIX + c for c in settings.gpu_device_classes])
    prefixes = [r[:-1] for r in named if r.endswith("*")]
    return " || ".join([f"{k} in {_list(exact)}"] + [f"{k}.startsWith({_cel(p)})" for p in prefixes])


def _containers(s: str) -> str:
    return f"((has({s}.containers) ? {s}.containers : []) + (has({s}.initContainers) ? {s}.initContainers : []))"


ZERO = "^[+-]?[0.]+([eE].*|[a-zA-Z]*)$"
"""A quantity that is zero however it is spelt (``0``, ``0.0``, ``0m``, ``+0``): asks for nothing,
as the webhook counts it (``taugate.pods``: zero GPUs is a CPU pod)."""


def _asks_gpus(s: str, settings: Settings) -> str:
    """CEL: pod spec ``s`` requests or limits more than zero of a GPU device resource (a
    container's or the pod's)."""
    def in_resources(r: str) -> str:
        return " || ".join(f"(has({r}.{f}) && {r}.{f}.exists(k, ({_gpu_resource('k', settings)}) && "
                           f"!string({r}.{f}[k]).matches({_cel(ZERO)})))"
                           for f in ("limits", "requests"))
    return (f"{_containers(s)}.exists(c, has(c.resources) && ({in_resources('c.resources')})) || "
            f"(has({s}.resources) && ({in_resources(s + '.resources')}))")


_NO_DEVICES = "^[\\t\\n\\v\\f\\r ]*(?i:void|none)?[\\t\\n\\v\\f\\r ]*$"
"""A device variable's value that asks for no device (``taugate.devices._NO_DEVICES``, after ``strip().lower()``)."""


def _device_access(s: str) -> str:
    """CEL: pod spec ``s`` reaches devices without a request (``taugate.devices.access_problems``:
    a device variable, a privileged container, a hostPath of device nodes or not in normal form)."""
    env = (f"has(c.env) && c.env.exists(e, e.name in {_list(devices.DEVICE_VARIABLES)} && (has(e.valueFrom) || "
           f"(has(e.value) && !e.value.matches({_cel(_NO_DEVICES)}))))")
    privileged = "has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged"
    paths = " || ".join(["v.hostPath.path in ['/', '/dev', '/dev/']",
                         f"v.hostPath.path.matches({_cel(devices.NOT_NORMAL_PATH)})"] +
                        [f"v.hostPath.path.startsWith({_cel(p)})" for p in devices.DEVICE_PATHS])
    return (f"{_containers(s)}.exists(c, ({env}) || ({privileged})) || "
            f"(has({s}.volumes) && {s}.volumes.exists(v, has(v.hostPath) && ({paths})))")


def _cdi(t: str) -> str:
    """CEL: pod template ``t`` carries a CDI device annotation (``devices.CDI_ANNOTATION_PREFIX``)."""
    notes = f"{t}.metadata.annotations"
    return (f"has({t}.metadata) && has({notes}) && "
            f"{notes}.exists(k, k.startsWith({_cel(devices.CDI_ANNOTATION_PREFIX)}))")


def _is_kind(group: str, kind: str) -> str:
    return f"(request.kind.group == {_cel(group)} && request.kind.kind == {_cel(kind)})"


def _judged_kinds() -> list[tuple[str, str, str, str, str]]:
    """``(group, version, resource, kind, CEL templates)`` of every kind the policy judges: the
    workload kinds, then the unmanaged ones (``taugate.unmanaged``)."""
    return ([(k.group, k.version, k.resource, k.kind, k.cel_pod_templates) for k in KINDS if k.cel_pod_templates] +
            [(u.group, u.version, u.resource, u.kind, u.cel_pod_templates) for u in UNMANAGED_KINDS])


_OBJECT = re.compile(r"\bobject\b")


def _pod_templates(root: str) -> str:
    """CEL: the pod templates of ``root`` (``object`` or ``oldObject``), by kind."""
    out = "[]"
    for group, _, _, kind, templates in reversed(_judged_kinds()):
        out = f"{_is_kind(group, kind)} ? {_OBJECT.sub(root, templates)} : {out}"
    return out


def _owner_kind(r: str) -> str:
    """CEL: ownerReference ``r`` names a workload kind or a relay kind (``webhook.mutation.controller_owner``)."""
    owners = sorted({(k.group, k.kind) for k in KINDS} | RELAY_OWNER_KINDS)
    return " || ".join(f"({r}.kind == {_cel(kind)} && " +
                       (f"{r}.apiVersion.startsWith({_cel(group + '/')}))" if group else f"{r}.apiVersion == 'v1')")
                       for group, kind in owners)


def _controller(obj: str, also: str = "true") -> str:
    """CEL: ``obj`` has a controller ownerReference ``r`` of a workload or relay kind for which
    ``also`` (over ``r``) holds."""
    return (f"has({obj}.metadata.ownerReferences) && {obj}.metadata.ownerReferences.exists(r, "
            f"has(r.controller) && r.controller && ({_owner_kind('r')}) && ({also}))")


def _judged_users(settings: Settings) -> str:
    """CEL matchCondition: not taugate's operator, and not a trusted controller's update or child
    (KubeRay's RayCluster of a RayJob, the Job controller's Pods, Kueue's unsuspend): the webhook
    judges those as children or trusts them (``webhook.mutation.is_child``)."""
    return (f"request.userInfo.username != {_cel(settings.service_account)} && "
            f"!(request.userInfo.username in {_list(settings.controller_users)} && "
            f"(request.operation == 'UPDATE' || ({_controller('object')})))")


def _child_update() -> str:
    """CEL: an UPDATE of a child (``webhook.mutation.is_child``): the stored object has the same
    controller owner of a workload or relay kind and no workspace label (the webhook restores it on
    a top-level workload, so it cannot be shed)."""
    same = ("oldObject.metadata.ownerReferences.exists(o, has(o.controller) && o.controller && has(o.uid) && "
            "has(r.uid) && o.uid == r.uid)")
    return (f"request.operation == 'UPDATE' && has(oldObject.metadata.ownerReferences) && "
            f"!(has(oldObject.metadata.labels) && {_cel(labels.WORKSPACE)} in oldObject.metadata.labels) && "
            f"{_controller('object', same)}")


def _bypass(s: str) -> str:
    """CEL: pod spec ``s`` names a ``nodeName`` or a ``system-`` priority class (``webhook.pod_rules``)."""
    return (f"(has({s}.nodeName) && {s}.nodeName != '') || "
            f"(has({s}.priorityClassName) && {s}.priorityClassName.startsWith('system-'))")


def _listed(field: str) -> str:
    """CEL: the parameter's ``spec.<field>`` list (empty when absent)."""
    return f"(has(params.spec.{field}) ? params.spec.{field} : [])"


def _gpu_nodes(s: str, settings: Settings) -> str:
    """CEL: pod spec ``s`` puts itself on GPU nodes (``devices.gpu_node_problems``, without the node
    list): a toleration of every taint (no key, ``Exists``) or of a taint key a workload profile
    tolerates for its GPU pods, or a node selector on the GPU class label naming a profile's GPU
    class, or on a GPU Feature Discovery label other than ``false``."""
    label = _cel(settings.gpu_class_label)
    tolerates = (f"has({s}.tolerations) && {s}.tolerations.exists(x, ((!has(x.key) || x.key == '') && "
                 f"has(x.operator) && x.operator == 'Exists') || (has(x.key) && x.key in {_listed('tolerationKeys')}))")
    selects = (f"has({s}.nodeSelector) && (({label} in {s}.nodeSelector && "
               f"{s}.nodeSelector[{label}] in {_listed('gpuClasses')}) "
               f"|| {s}.nodeSelector.exists(k, k in {_list(devices.GPU_NODE_LABELS)} && "
               f"{s}.nodeSelector[k] != 'false'))")
    return f"({tolerates}) || ({selects})"


def parameters(cluster: TauCluster) -> dict[str, Any]:
    """The policy's parameter: the TauProfilePlacement ``NAME`` holding what the policy reads of
    the TauCluster's workload profiles (pure; the operator writes it before the TauCluster's
    status, ``controllers/admission_policy.py``): each profile's nodeSelector and GPU class, the
    taint keys they tolerate and their GPU classes. A profile name given twice is left out, so a
    workload under it is refused as under a profile the TauCluster does not have (the CRD refuses
    such a TauCluster: its profiles are a list keyed by name)."""
    profiles = cluster.spec.workload_profiles
    names = [p.name for p in profiles]
    spec = TauProfilePlacementSpec(
        profiles={p.name: ProfilePlacement(node_selector=dict(p.node_selector), gpu_class=p.gpu_class or None)
                  for p in profiles if names.count(p.name) == 1},
        toleration_keys=sorted({t.key for p in profiles for t in p.tolerations if t.key}),
        gpu_classes=sorted({p.gpu_class for p in profiles if p.gpu_class}),
        profile_set_hash=profile_set_hash(profiles))
    placement = TauProfilePlacement(spec=spec)
    placement.metadata.name = NAME
    placement.metadata.labels = {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    return placement.model_dump(by_alias=True, exclude_none=True, mode="json")


def policy(settings: Settings | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``), its parameter the
    TauProfilePlacement of ``parameters``."""
    settings = settings or Settings()
    groups: dict[tuple[str, str], list[str]] = {}
    for group, version, resource, _, _ in _judged_kinds():
        groups.setdefault((group, version), []).append(resource)
    rules = [{"apiGroups": [g], "apiVersions": [v], "resources": r, "operations": ["CREATE", "UPDATE"]}
             for (g, v), r in groups.items()]
    run_id, queue, workspace, profile = (Expr(_label("object", key)) for key in (
        labels.RUN_ID, labels.KUEUE_QUEUE_NAME, labels.WORKSPACE, labels.WORKLOAD_PROFILE))
    old_run_id, old_queue, old_profile = (Expr(_label("oldObject", key)) for key in (
        labels.RUN_ID, labels.KUEUE_QUEUE_NAME, labels.WORKLOAD_PROFILE))
    record, old_record = Expr(_annotation("object", labels.ADMISSION_RECORD)), \
        Expr(_annotation("oldObject", labels.ADMISSION_RECORD))
    ns_queue, ns_workspace = (Expr(_label("namespaceObject", key))
                              for key in (labels.KUEUE_QUEUE_NAME, labels.WORKSPACE))
    kind, namespace = Expr("request.kind.kind"), Expr("request.namespace")
    name = Expr("(has(object.metadata.name) ? object.metadata.name : object.metadata.generateName)")
    # The record is JSON with sorted keys and no spaces (taugate/record.py encode): CEL cannot parse
    # it or check its HMAC (the recorder does), but can check what it is bound to.
    bound = (f"{record}.contains('\"kind\":\"' + request.kind.kind + '\"') && "
             f"{record}.contains('\"namespace\":\"' + request.namespace + '\"') && "
             f"({record}.contains('\"name\":\"' + object.metadata.name + '\"') || "
             f"(has(object.metadata.generateName) && "
             f"{record}.contains('\"generateName\":\"' + object.metadata.generateName + '\"'))) && "
             f"{record}.contains('\"runId\":\"' + {run_id} + '\"')")
    one = "variables.profileKnown"
    placement = f"params.spec.profiles[{profile}]"
    placed = (f"variables.gpuSpecs.all(s, variables.selector.all(k, has(s.nodeSelector) && k in s.nodeSelector && "
              f"s.nodeSelector[k] == variables.selector[k]) && (variables.gpuClass == '' || (has(s.nodeSelector) && "
              f"{_cel(settings.gpu_class_label)} in s.nodeSelector && "
              f"s.nodeSelector[{_cel(settings.gpu_class_label)}] == variables.gpuClass)))")
    # What a GPU template's placement and size are made of: judged again on UPDATE only when they
    # change, so an image, a label or a finalizer after a profile moved in the TauCluster is never
    # refused for what the stored object already had (as the webhook excuses it).
    placements = "variables.gpuSpecs.map(s, has(s.nodeSelector) ? s.nodeSelector : {})"
    sizes = f"variables.gpuSpecs.map(s, {_containers('s')}.map(c, has(c.resources) ? c.resources : {{}}))"
    reshaped = " || ".join(f"{e} != {e.replace('variables.gpuSpecs', 'variables.oldGpuSpecs')}"
                           for e in (placements, sizes))

    def rule(when: str, check: str, *message: str) -> dict[str, str]:
        return {"expression": f"!({when}) || ({check})", "messageExpression": _message(*message, UNAVAILABLE),
                "reason": "Forbidden"}

    def new_in(bad: str) -> str:
        """CEL: ``bad`` (over pod spec ``s``) holds of no template, or, on UPDATE, of a stored one."""
        return f"!variables.specs.exists(s, {bad}) || variables.oldSpecs.exists(s, {bad})"

    create, update = "request.operation == 'CREATE'", "request.operation == 'UPDATE'"
    managed, gpu, judged = "variables.managed", "variables.gpuSpecs.size() > 0", "!variables.childUntouched"
    asks = _asks_gpus("s", settings)
    edited = f"({create} || variables.specs != variables.oldSpecs)"
    resized = f"{update} && {old_run_id} != '' && ({reshaped})"
    placing = f"{judged} && {managed} && {gpu} && ({create} || ({resized}))"
    cdi = _cdi("t")
    validations = []
    if settings.device_access == "deny":
        validations.append(rule(
            f"{judged} && {edited}",
            f"({new_in(_device_access('s'))}) && (!variables.templates.exists(t, {cdi}) || "
            f"variables.oldTemplates.exists(t, {cdi}))",
            kind, " ", name, " reaches GPUs without asking for them (a device variable such as NVIDIA_VISIBLE_DEVICES, "
            "a privileged container, a hostPath of /dev or not in normal form, or a cdi.k8s.io/ annotation), which "
            "taugate refuses in a workspace"))
    claims = "(has(s.resourceClaims) && s.resourceClaims.size() > 0)"  # GPUs through DRA: the webhook's to count
    cpu_on_gpu_nodes = new_in(f"!({asks}) && !{claims} && ({_gpu_nodes('s', settings)})")
    validations += [
        rule(f"{judged} && {edited}", new_in(_bypass("s")),
             kind, " ", name, " names a nodeName or a system- priorityClassName in a pod template, which bypass the "
             "scheduler, the profile's placement and Kueue (taugate refuses both in a workspace)"),
        rule(f"{judged} && {edited}", cpu_on_gpu_nodes,
             kind, " ", name, " has a pod template that asks for no GPU but tolerates the GPU nodes' taints or selects "
             "GPU nodes (a workload profile's toleration key, a key-less Exists, the GPU class or a GPU Feature "
             "Discovery label), where a CUDA image's own NVIDIA_VISIBLE_DEVICES reaches GPUs no request counts"),
        rule(f"{create} && {managed} && {gpu}", f"{run_id}.matches({_cel(RUN_ID_PATTERN)}) && {bound}",
             "taugate has not admitted ", kind, " ", name, " in workspace namespace ", namespace,
             f": it asks for GPUs but has no {labels.RUN_ID} label and {labels.ADMISSION_RECORD} record made for "
             "it, which taugate adds to every GPU workload it admits"),
        rule(f"{create} && {managed} && {gpu}", f"{ns_queue} != '' && {queue} == {ns_queue}",
             kind, " ", name, " asks for GPUs but is not queued in its workspace's LocalQueue: metadata.labels[\"",
             labels.KUEUE_QUEUE_NAME, "\"] is \"", queue, "\"; allowed: \"", ns_queue, "\" (the label of namespace ",
             namespace, ")"),
        rule(f"{create} && {managed} && {gpu}", f"{workspace} == {ns_workspace}",
             kind, " ", name, f" has {labels.WORKSPACE}=\"", workspace, "\" in namespace ", namespace,
             " of workspace \"", ns_workspace, "\""),
        rule(f"{create} && {_is_kind(TRAINJOB.group, TRAINJOB.kind)}",
             "has(object.spec.trainer) && has(object.spec.trainer.numNodes) && "
             "has(object.spec.trainer.resourcesPerNode)",
             "TrainJob ", name, " does not state its size (spec.trainer.numNodes and spec.trainer.resourcesPerNode), "
             "which taugate needs in a workspace to count its GPUs"),
        rule(placing, one,
             kind, " ", name, " asks for GPUs under workload profile \"", profile,
             "\" (label ", labels.WORKLOAD_PROFILE, "), which TauCluster cluster does not have"),
        rule(f"{placing} && {one}", placed,
             kind, " ", name, " is not placed as workload profile \"", profile, "\" says: every pod template that "
             "asks for GPUs needs the profile's nodeSelector and ", settings.gpu_class_label, "=\"",
             Expr("variables.gpuClass"), "\" in spec.nodeSelector (kubectl get taucluster cluster -o yaml)"),
        rule(f"{judged} && {update} && {managed} && {old_run_id} != ''",
             f"{run_id} == {old_run_id} && {record} == {old_record} && ({old_queue} == '' || {queue} == {old_queue}) "
             f"&& ({old_profile} == '' || {profile} == {old_profile})",
             "this update of ", kind, " ", name, f" changes or removes its {labels.RUN_ID}, "
             f"{labels.KUEUE_QUEUE_NAME} or {labels.WORKLOAD_PROFILE} label or its {labels.ADMISSION_RECORD} "
             "record, which an admitted workload keeps"),
        rule(f"{judged} && {update} && {managed} && {old_run_id} == '' && {gpu}", "variables.oldGpuSpecs.size() > 0",
             "this update gives GPUs to ", kind, " ", name, ", which was created without any, so with no queue, "
             "placement or run-id; fix: delete it and create it again with the GPUs (kubectl replace --force -f FILE)"),
        rule(f"{update} && {_is_kind('', 'Pod')} && has(oldObject.spec.schedulingGates)",
             "oldObject.spec.schedulingGates.all(g, !g.name.startsWith('kueue.x-k8s.io/') || "
             "(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(n, n.name == g.name)))",
             "this update removes Kueue's scheduling gate from Pod ", name, ", which Kueue lifts when it admits the "
             "pod (taugate refuses anyone else's removal)"),
    ]
    if settings.unmanaged_gpu_workloads == "deny":
        kept = "variables.oldGpuSpecs.size() > 0 && variables.specs == variables.oldSpecs"
        validations.append(rule(f"{judged} && !{managed} && {gpu}", f"{update} && {kept}",
                                kind, " ", name, " asks for GPUs but taugate does not manage that kind: its pods "
                                "would skip the workspace's queue, placement and run-id; fix: run it as one of the "
                                "managed kinds (a Deployment, not a bare ReplicaSet)"))
    untouched = f"({_child_update()}) && variables.specs == variables.oldSpecs"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": f"{labels.GROUP}/{labels.VERSION}", "kind": "TauProfilePlacement"},
            "matchConstraints": {
                "resourceRules": rules,
                "namespaceSelector": {"matchExpressions": [{"key": labels.WORKSPACE, "operator": "Exists"}]},
            },
            "matchConditions": [{"name": "judged-user", "expression": _judged_users(settings)}],
            "variables": [
                {"name": "managed", "expression": "!(" + " || ".join(_is_kind(u.group, u.kind)
                                                                    for u in UNMANAGED_KINDS) + ")"},
                {"name": "templates", "expression": _pod_templates("object")},
                {"name": "specs", "expression": "variables.templates.map(t, t.spec)"},
                {"name": "gpuSpecs", "expression": f"variables.specs.filter(s, {asks})"},
                {"name": "oldTemplates", "expression": f"{update} ? ({_pod_templates('oldObject')}) : []"},
                {"name": "oldSpecs", "expression": "variables.oldTemplates.map(t, t.spec)"},
                {"name": "oldGpuSpecs", "expression": f"variables.oldSpecs.filter(s, {asks})"},
                # An update of a child that leaves its pod templates alone is its parent's business
                # (a label, the garbage collector orphaning it); one that edits them is judged as a
                # top-level workload, as the webhook judges it (webhook.mutation.is_child).
                {"name": "childUntouched", "expression": untouched},
                {"name": "profileKnown",
                 "expression": f"has(params.spec.profiles) && {profile} in params.spec.profiles"},
                {"name": "selector", "expression": f"variables.profileKnown && has({placement}.nodeSelector) ? "
                                                   f"{placement}.nodeSelector : {{}}"},
                {"name": "gpuClass", "expression": f"variables.profileKnown && has({placement}.gpuClass) ? "
                                                   f"{placement}.gpuClass : ''"},
            ],
            "validations": validations,
        },
    }


def binding() -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that enforces ``policy`` (``Deny``) with the
    TauProfilePlacement of ``parameters``; without it, every request the policy judges is refused
    (fail closed)."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
            "spec": {"policyName": NAME, "validationActions": ["Deny"],
                     "paramRef": {"name": NAME, "parameterNotFoundAction": "Deny"}}}


def documents(settings: Settings | None = None) -> list[dict[str, Any]]:
    """The policy and its binding."""
    return [policy(settings), binding()]
