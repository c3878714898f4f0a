"""The ValidatingAdmissionPolicy that keeps taugate's core invariant inside the API server (CEL,
ValidatingAdmissionPolicy GA in Kubernetes 1.30, KEP-3488): in a workspace namespace, a workload
that asks for GPU device resources is created only as taugate admits it (run-id, admission record
bound to it, the namespace's workspace and LocalQueue, the node selector of its workload profile),
and no pod template reaches devices unasked; an update keeps what taugate gave. It sees the object
after every mutating webhook and holds while taugate's webhook is down (ARCHITECTURE.md section 2,
"What runs where"). The operator installs and keeps it (``taugate/controllers/admission_policy.py``).

Every rule is a subset of what taugate's webhook decides, so it never refuses what taugate admits:
GPUs are what a container requests or limits by name (``nvidia.com/gpu`` and
``taugate.devices.device_resources``), not DRA claims (a claim's GPUs need the ResourceClaim, which
CEL cannot read; claims are judged by the validating webhook, which fails closed). The profiles
come from the TauCluster as the policy's parameter, so a profile edit needs no new policy.
"""

from __future__ import annotations

import json
from typing import Any

from taugate import devices, labels
from taugate.kinds import KINDS
from taugate.settings import Settings

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
    """CEL: resource name ``k`` is a GPU device resource (``taugate.devices``, with the platform's own)."""
    named = tuple(dict.fromkeys((*devices.DEFAULT_DEVICE_RESOURCES, *settings.gpu_device_resources)))
    exact = [labels.GPU_RESOURCE] + [r for r in named if not r.endswith("*")]
    prefixes = [r[:-1] for r in named if r.endswith("*")]
    return " || ".join([f"{k} in {_list(exact)}"] + [f"{k}.startsWith({_cel(p)})" for p in prefixes])


def _containers(s: str) -> str:
    return f"((has({s}.containers) ? {s}.containers : []) + (has({s}.initContainers) ? {s}.initContainers : []))"


def _asks_gpus(s: str, settings: Settings) -> str:
    """CEL: pod spec ``s`` requests or limits a GPU device resource (a container's or the pod's)."""
    def in_resources(r: str) -> str:
        return " || ".join(f"(has({r}.{f}) && {r}.{f}.exists(k, {_gpu_resource('k', settings)}))"
                           for f in ("limits", "requests"))
    return (f"{_containers(s)}.exists(c, has(c.resources) && ({in_resources('c.resources')})) || "
            f"(has({s}.resources) && ({in_resources(s + '.resources')}))")


_NO_DEVICES = "^[\\t\\n\\v\\f\\r ]*(?i:void|none)?[\\t\\n\\v\\f\\r ]*$"
"""A device variable's value that asks for no device (``taugate.devices._NO_DEVICES``, after ``strip().lower()``)."""


def _device_access(s: str) -> str:
    """CEL: pod spec ``s`` reaches devices without a request (``taugate.devices.access_problems``:
    a device variable, a privileged container, a hostPath of device nodes)."""
    env = (f"has(c.env) && c.env.exists(e, e.name in {_list(devices.DEVICE_VARIABLES)} && (has(e.valueFrom) || "
           f"(has(e.value) && !e.value.matches({_cel(_NO_DEVICES)}))))")
    privileged = "has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged"
    paths = " || ".join(["v.hostPath.path in ['/', '/dev', '/dev/']"] +
                        [f"v.hostPath.path.startsWith({_cel(p)})" for p in devices.DEVICE_PATHS])
    return (f"{_containers(s)}.exists(c, ({env}) || ({privileged})) || "
            f"(has({s}.volumes) && {s}.volumes.exists(v, has(v.hostPath) && ({paths})))")


def _pod_specs() -> str:
    """CEL: the pod specs of ``object``, by kind (``WorkloadKind.cel_pod_specs``)."""
    out = "[]"
    for k in reversed([k for k in KINDS if k.cel_pod_specs]):
        out = (f"request.kind.group == {_cel(k.group)} && request.kind.kind == {_cel(k.kind)} ? "
               f"{k.cel_pod_specs} : {out}")
    return out


def _judged_users(settings: Settings) -> str:
    """CEL matchCondition: not taugate's operator, and not a trusted controller's update or child
    (KubeRay's RayCluster of a RayJob, the Job controller's Pods, Kueue's unsuspend): the webhook
    judges those as children or trusts them (``webhook.mutation.is_child``)."""
    child = ("has(object.metadata.ownerReferences) && "
             "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)")
    return (f"request.userInfo.username != {_cel(settings.service_account)} && "
            f"!(request.userInfo.username in {_list(settings.controller_users)} && "
            f"(request.operation == 'UPDATE' || ({child})))")


def policy(settings: Settings | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``), its parameter the
    TauCluster ``cluster``."""
    settings = settings or Settings()
    groups: dict[tuple[str, str], list[str]] = {}
    for k in KINDS:
        if k.cel_pod_specs:
            groups.setdefault((k.group, k.version), []).append(k.resource)
    rules = [{"apiGroups": [g], "apiVersions": [v], "resources": r, "operations": ["CREATE", "UPDATE"]}
             for (g, v), r in groups.items()]
    run_id, queue, workspace, profile = (Expr(_label("object", key)) for key in (
        labels.RUN_ID, labels.KUEUE_QUEUE_NAME, labels.WORKSPACE, labels.WORKLOAD_PROFILE))
    old_run_id, old_queue = Expr(_label("oldObject", labels.RUN_ID)), Expr(_label("oldObject", labels.KUEUE_QUEUE_NAME))
    record, old_record = Expr(_annotation("object", labels.ADMISSION_RECORD)), \
        Expr(_annotation("oldObject", labels.ADMISSION_RECORD))
    ns_queue, ns_workspace = (Expr(_label("namespaceObject", key))
                              for key in (labels.KUEUE_QUEUE_NAME, labels.WORKSPACE))
    kind, namespace = Expr("request.kind.kind"), Expr("request.namespace")
    name = Expr("(has(object.metadata.name) ? object.metadata.name : object.metadata.generateName)")
    gpu = "variables.gpuSpecs.size() > 0"
    # The record is JSON with sorted keys and no spaces (taugate/record.py encode): CEL cannot parse
    # it or check its HMAC (the recorder does), but can check what it is bound to.
    bound = (f"{record}.contains('\"kind\":\"' + request.kind.kind + '\"') && "
             f"{record}.contains('\"namespace\":\"' + request.namespace + '\"') && "
             f"({record}.contains('\"name\":\"' + object.metadata.name + '\"') || "
             f"(has(object.metadata.generateName) && "
             f"{record}.contains('\"generateName\":\"' + object.metadata.generateName + '\"'))) && "
             f"{record}.contains('\"runId\":\"' + {run_id} + '\"')")
    one = "variables.profile.size() == 1"
    selector = f"{one} && has(variables.profile[0].nodeSelector) ? variables.profile[0].nodeSelector : {{}}"
    gpu_class = f"{one} && has(variables.profile[0].gpuClass) ? variables.profile[0].gpuClass : ''"
    placed = (f"variables.gpuSpecs.all(s, variables.selector.all(k, has(s.nodeSelector) && k in s.nodeSelector && "
              f"s.nodeSelector[k] == variables.selector[k]) && (variables.gpuClass == '' || (has(s.nodeSelector) && "
              f"{_cel(settings.gpu_class_label)} in s.nodeSelector && "
              f"s.nodeSelector[{_cel(settings.gpu_class_label)}] == variables.gpuClass)))")

    def rule(when: str, check: str, *message: str) -> dict[str, str]:
        return {"expression": f"!({when}) || ({check})", "messageExpression": _message(*message, UNAVAILABLE),
                "reason": "Forbidden"}

    create, update = "request.operation == 'CREATE'", "request.operation == 'UPDATE'"
    validations = [
        rule(f"{create} && {gpu}", f"{run_id}.matches({_cel(RUN_ID_PATTERN)}) && {bound}",
             "taugate has not admitted ", kind, " ", name, " in workspace namespace ", namespace,
             f": it asks for GPUs but has no {labels.RUN_ID} label and {labels.ADMISSION_RECORD} record made for "
             "it, which taugate adds to every GPU workload it admits"),
        rule(f"{create} && {gpu}", f"{ns_queue} != '' && {queue} == {ns_queue}",
             kind, " ", name, " asks for GPUs but is not queued in its workspace's LocalQueue: metadata.labels[\"",
             labels.KUEUE_QUEUE_NAME, "\"] is \"", queue, "\"; allowed: \"", ns_queue, "\" (the label of namespace ",
             namespace, ")"),
        rule(f"{create} && {gpu}", f"{workspace} == {ns_workspace}",
             kind, " ", name, f" has {labels.WORKSPACE}=\"", workspace, "\" in namespace ", namespace,
             " of workspace \"", ns_workspace, "\""),
        rule(gpu, "variables.profile.size() == 1",
             kind, " ", name, " asks for GPUs under workload profile \"", profile,
             "\" (label ", labels.WORKLOAD_PROFILE, "), which TauCluster cluster does not have"),
        rule(gpu, placed,
             kind, " ", name, " is not placed as workload profile \"", profile, "\" says: every pod template that "
             "asks for GPUs needs the profile's nodeSelector and ", settings.gpu_class_label, "=\"",
             Expr("variables.gpuClass"), "\" in spec.nodeSelector (kubectl get taucluster cluster -o yaml)"),
        rule(f"{update} && {old_run_id} != ''",
             f"{run_id} == {old_run_id} && {record} == {old_record} && ({old_queue} == '' || {queue} == {old_queue})",
             "this update of ", kind, " ", name, f" changes or removes its {labels.RUN_ID} or "
             f"{labels.KUEUE_QUEUE_NAME} label or its {labels.ADMISSION_RECORD} record, which an admitted workload "
             "keeps"),
    ]
    validations.insert(0, rule(create, "!variables.specs.exists(s, (has(s.nodeName) && s.nodeName != '') || "
                                       "(has(s.priorityClassName) && s.priorityClassName.startsWith('system-')))",
                               kind, " ", name, " names a nodeName or a system- priorityClassName in a pod template, "
                               "which bypass the scheduler, the profile's placement and Kueue (taugate refuses both "
                               "in a workspace)"))
    if settings.device_access == "deny":
        validations.insert(0, rule(create, "!variables.specs.exists(s, " + _device_access("s") + ")",
                                   kind, " ", name, " reaches GPUs without asking for them (a device variable such "
                                   "as NVIDIA_VISIBLE_DEVICES, a privileged container or a hostPath of /dev), which "
                                   "taugate refuses in a workspace"))
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster"},
            "matchConstraints": {
                "resourceRules": rules,
                "namespaceSelector": {"matchExpressions": [{"key": labels.WORKSPACE, "operator": "Exists"}]},
            },
            "matchConditions": [
                {"name": "judged-user", "expression": _judged_users(settings)},
                {"name": "created-or-admitted-before",  # an object from before taugate governed is not judged
                 "expression": f"{create} || {old_run_id} != ''"},
            ],
            "variables": [
                {"name": "specs", "expression": _pod_specs()},
                {"name": "gpuSpecs", "expression": "variables.specs.filter(s, " + _asks_gpus("s", settings) + ")"},
                {"name": "profile", "expression": "has(params.spec.workloadProfiles) ? "
                                                  f"params.spec.workloadProfiles.filter(p, p.name == {profile}) : []"},
                {"name": "selector", "expression": selector},
                {"name": "gpuClass", "expression": gpu_class},
            ],
            "validations": validations,
        },
    }


def binding() -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that enforces ``policy`` (``Deny``) with the TauCluster
    ``cluster``; without it, every request the policy judges is refused (fail closed)."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
            "spec": {"policyName": NAME, "validationActions": ["Deny"],
                     "paramRef": {"name": "cluster", "parameterNotFoundAction": "Deny"}}}


def documents(settings: Settings | None = None) -> list[dict[str, Any]]:
    """The policy and its binding."""
    return [policy(settings), binding()]
