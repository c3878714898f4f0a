"""The ValidatingAdmissionPolicy that keeps taugate's core invariant inside the API server: no
workload of a registered kind enters a workspace namespace unless taugate's webhook admitted it
(its run-id, signed record, workspace and LocalQueue). CEL, evaluated by kube-apiserver
(ValidatingAdmissionPolicy, GA in Kubernetes 1.30, KEP-3488), so it holds while the webhook is
down or its configurations are deleted; it sees the object after every mutating webhook."""

from __future__ import annotations

import json
from typing import Any

from taugate import labels
from taugate.kinds import resources_by_group_version
from taugate.settings import Settings

NAME = "taugate-admitted-workloads"
RUN_ID_PATTERN = f"^[0-9a-f]{{{labels.RUN_ID_LENGTH}}}$"


def _cel(value: str) -> str:
    return json.dumps(value)  # a JSON string is a CEL string literal


def _label(obj: str, key: str) -> str:
    """CEL: the value of label ``key`` of ``obj`` (``object``, ``oldObject``, ``namespaceObject``), or ''."""
    labels_ = f"{obj}.metadata.labels"
    return f"(has({labels_}) && {_cel(key)} in {labels_} ? {labels_}[{_cel(key)}] : '')"


TRUSTED_CONTROLLERS = "TRUSTED_CONTROLLERS"
"""Where the chart writes the CEL list of ``webhook.trustedControllers`` (``trusted`` of ``policy``)."""


def trusted_list(settings: Settings) -> str:
    """CEL: the list of ``Settings.controller_users``."""
    return "[" + ", ".join(_cel(u) for u in settings.controller_users) + "]"


def _exempt_child(trusted: str) -> str:
    """A trusted controller writing an object it controls (KubeRay's RayCluster of a RayJob, the
    Job controller's Pods): taugate's webhook judges those as children of an admitted run."""
    return (f"request.userInfo.username in {trusted} && has(object.metadata.ownerReferences) && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)")


class Expr(str):
    """A CEL expression among the parts of a message (``_message``); any other part is text."""


def _message(*parts: str) -> str:
    """CEL: the concatenation of ``parts``, text quoted as CEL string literals."""
    return " + ".join(p if isinstance(p, Expr) else _cel(p) for p in parts)


def policy(settings: Settings | None = None, *, trusted: str | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``); ``trusted`` is the CEL
    list of trusted controllers (default: ``trusted_list(settings)``)."""
    settings = settings or Settings()
    rules = [{"apiGroups": [group], "apiVersions": [version], "resources": list(resources),
              "operations": ["CREATE", "UPDATE"]}
             for (group, version), resources in resources_by_group_version().items()]
    run_id, queue, workspace = (Expr(_label("object", labels.RUN_ID)), Expr(_label("object", labels.KUEUE_QUEUE_NAME)),
                                Expr(_label("object", labels.WORKSPACE)))
    old_run_id, old_queue = Expr(_label("oldObject", labels.RUN_ID)), Expr(_label("oldObject", labels.KUEUE_QUEUE_NAME))
    ns_queue = Expr(_label("namespaceObject", labels.KUEUE_QUEUE_NAME))
    ns_workspace = Expr(_label("namespaceObject", labels.WORKSPACE))
    kind = Expr("request.kind.kind")
    name = Expr("(has(object.metadata.name) ? object.metadata.name : object.metadata.generateName + '*')")
    namespace = Expr("request.namespace")
    unavailable = ("; taugate's admission webhook may be unavailable: create it again once taugate answers, "
                   "or ask the platform team (docs/runbook.md)")
    record = f"{_cel(labels.ADMISSION_RECORD)} in object.metadata.annotations"

    def rule(when: str, check: str, *message: str) -> dict[str, str]:
        return {"expression": f"request.operation != {_cel(when)} || ({check})",
                "messageExpression": _message(*message, unavailable), "reason": "Forbidden"}

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": rules,
                "namespaceSelector": {"matchExpressions": [{"key": labels.WORKSPACE, "operator": "Exists"}]},
            },
            "matchConditions": [
                {"name": "not-a-trusted-controllers-child",
                 "expression": f"!({_exempt_child(trusted or trusted_list(settings))})"},
                {"name": "created-or-admitted-before",  # an object from before taugate governed is not judged
                 "expression": f"request.operation == 'CREATE' || {old_run_id} != ''"},
            ],
            "validations": [
                rule("CREATE", f"{run_id}.matches({_cel(RUN_ID_PATTERN)}) && has(object.metadata.annotations) && "
                               f"{record}",
                     "taugate has not admitted ", kind, " ", name, " in workspace namespace ", namespace,
                     f": it has no {labels.RUN_ID} label and {labels.ADMISSION_RECORD} record, which taugate adds "
                     "to every workload it admits"),
                rule("CREATE", f"{ns_queue} != '' && {queue} == {ns_queue}",
                     kind, " ", name, " is not queued in its workspace's LocalQueue: metadata.labels[\"",
                     labels.KUEUE_QUEUE_NAME, "\"] is \"", queue, "\"; allowed: \"", ns_queue,
                     "\" (the label of namespace ", namespace, ")"),
                rule("CREATE", f"{workspace} == {ns_workspace}",
                     kind, " ", name, f" has {labels.WORKSPACE}=\"", workspace, "\" in namespace ", namespace,
                     " of workspace \"", ns_workspace, "\""),
                rule("UPDATE", f"{run_id} == {old_run_id} && ({old_queue} == '' || {queue} == {old_queue})",
                     "this update of ", kind, " ", name, f" changes or removes its {labels.RUN_ID} or "
                     f"{labels.KUEUE_QUEUE_NAME} label, which an admitted workload keeps"),
            ],
        },
    }


def binding() -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that enforces ``policy`` (``Deny``)."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
            "spec": {"policyName": NAME, "validationActions": ["Deny"]}}


def documents(settings: Settings | None = None, *, trusted: str | None = None) -> list[dict[str, Any]]:
    """The policy and its binding."""
    return [policy(settings, trusted=trusted), binding()]
