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


def _exempt_child(settings: Settings) -> str:
    """A trusted controller writing an object it controls (KubeRay's RayCluster of a RayJob, the
    Job controller's Pods): taugate's webhook judges those as children of an admitted run."""
    users = "[" + ", ".join(_cel(u) for u in settings.controller_users) + "]"
    return (f"request.userInfo.username in {users} && has(object.metadata.ownerReferences) && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)")


def policy(settings: Settings | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``)."""
    settings = settings or Settings()
    rules = [{"apiGroups": [group], "apiVersions": [version], "resources": list(resources),
              "operations": ["CREATE", "UPDATE"]}
             for (group, version), resources in resources_by_group_version().items()]
    run_id, queue, workspace = (_label("object", labels.RUN_ID), _label("object", labels.KUEUE_QUEUE_NAME),
                                _label("object", labels.WORKSPACE))
    ns_queue, ns_workspace = _label("namespaceObject", labels.KUEUE_QUEUE_NAME), _label("namespaceObject",
                                                                                         labels.WORKSPACE)
    what = ("request.kind.kind + ' ' + (has(object.metadata.name) ? object.metadata.name : "
            "object.metadata.generateName + '*')")
    unavailable = ("taugate's admission webhook may be unavailable: create it again once taugate answers, "
                   "or ask the platform team (docs/runbook.md)")
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
                {"name": "not-a-trusted-controllers-child", "expression": f"!({_exempt_child(settings)})"},
                {"name": "created-or-admitted-before",  # an object from before taugate governed is not judged
                 "expression": f"request.operation == 'CREATE' || {_label('oldObject', labels.RUN_ID)} != ''"},
            ],
            "validations": [
                {"expression": f"request.operation != 'CREATE' || ({run_id}.matches({_cel(RUN_ID_PATTERN)}) && "
                               f"has(object.metadata.annotations) && "
                               f"{_cel(labels.ADMISSION_RECORD)} in object.metadata.annotations)",
                 "messageExpression": f"'taugate has not admitted ' + {what} + ' in workspace namespace ' + "
                                      f"request.namespace + ': it has no {labels.RUN_ID} label and "
                                      f"{labels.ADMISSION_RECORD} record, which taugate adds to every workload "
                                      f"it admits; {unavailable}'",
                 "reason": "Forbidden"},
                {"expression": f"request.operation != 'CREATE' || ({queue} == {ns_queue} && {ns_queue} != '')",
                 "messageExpression": f"{what} + ' is not queued in its workspace\\'s LocalQueue: "
                                      f"metadata.labels[\"{labels.KUEUE_QUEUE_NAME}\"] is \"' + {queue} + "
                                      f"'\"; allowed: \"' + {ns_queue} + '\" (the label of namespace ' + "
                                      f"request.namespace + '); {unavailable}'",
                 "reason": "Forbidden"},
                {"expression": f"request.operation != 'CREATE' || {workspace} == {ns_workspace}",
                 "messageExpression": f"{what} + ' names workspace \"' + {workspace} + '\" in namespace ' + "
                                      f"request.namespace + ' of workspace \"' + {ns_workspace} + '\"; {unavailable}'",
                 "reason": "Forbidden"},
                {"expression": f"request.operation != 'UPDATE' || ({run_id} == {_label('oldObject', labels.RUN_ID)} "
                               f"&& ({_label('oldObject', labels.KUEUE_QUEUE_NAME)} == '' || "
                               f"{queue} == {_label('oldObject', labels.KUEUE_QUEUE_NAME)}))",
                 "messageExpression": f"'this update of ' + {what} + ' changes or removes its {labels.RUN_ID} or "
                                      f"{labels.KUEUE_QUEUE_NAME} label, which an admitted workload keeps; "
                                      f"{unavailable}'",
                 "reason": "Forbidden"},
            ],
        },
    }


def binding() -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that enforces ``policy`` (``Deny``)."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}},
            "spec": {"policyName": NAME, "validationActions": ["Deny"]}}


def documents(settings: Settings | None = None) -> list[dict[str, Any]]:
    """The policy and its binding."""
    return [policy(settings), binding()]
