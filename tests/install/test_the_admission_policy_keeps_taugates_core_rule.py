"""The ValidatingAdmissionPolicy of webhook/backstop.py, as the chart installs it, judged with a CEL
engine on objects taugate really admits (``taugate admit`` of the project's examples): what taugate
admitted passes; what it did not (no run-id and record, another queue or workspace, an update
dropping the run-id) is refused with a message naming the object; a trusted controller's child is
not judged. tests/e2e/test_the_api_server_keeps_taugates_rule_while_taugate_is_down.py proves the
same on kube-apiserver."""

from __future__ import annotations

import copy

import cel
import yaml

from taugate import labels
from taugate.cli import main
from taugate.kinds import KINDS
from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from taugate.webhook import backstop
from tests.install.chart import find, objects
from tests.paths import REPO

STATE = load_snapshot(REPO / "examples" / "cluster.yaml", Settings())


def _namespace(name: str) -> dict:
    """The workspace namespace as taugate's operator labels it (controllers/taugrid/workspace.py)."""
    ws = STATE.workspace_for(name)
    assert ws is not None
    return {"metadata": {"name": name, "labels": {labels.WORKSPACE: ws.metadata.name,
                                                  labels.KUEUE_QUEUE_NAME: ws.local_queue(STATE.default_queue)}}}


def _admitted(capsys, example: str) -> dict:
    assert main(["admit", "-f", str(REPO / example), "--cluster",
                 str(REPO / "examples" / "cluster.yaml")]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def _request(obj: dict, *, operation: str = "CREATE", old: dict | None = None,
             user: str = "alice@contoso.com") -> dict:
    namespace = obj["metadata"].get("namespace") or "vision"
    return {"request": {"operation": operation, "kind": {"kind": obj["kind"]}, "namespace": namespace,
                        "userInfo": {"username": user, "groups": []}},
            "object": obj, "oldObject": old, "namespaceObject": _namespace(namespace)}


def _judged(context: dict) -> bool:
    """Whether the policy applies to the request (its matchConditions, all true)."""
    return all(cel.compile(c["expression"]).execute(context) for c in backstop.policy()["spec"]["matchConditions"])


def _refusals(context: dict) -> list[str]:
    """The messages of the validations the request fails, as the API server prints them."""
    return [cel.compile(v["messageExpression"]).execute(context)
            for v in backstop.policy()["spec"]["validations"] if not cel.compile(v["expression"]).execute(context)]


def test_every_registered_kind_is_judged_on_create_and_update_in_workspace_namespaces_only():
    spec = backstop.policy()["spec"]
    matched = {(group, r) for rule in spec["matchConstraints"]["resourceRules"]
               for group in rule["apiGroups"] for r in rule["resources"]
               if rule["operations"] == ["CREATE", "UPDATE"]}
    assert matched == {(k.group, k.resource) for k in KINDS}
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchExpressions": [{"key": labels.WORKSPACE, "operator": "Exists"}]}
    assert spec["failurePolicy"] == "Fail" and backstop.binding()["spec"]["validationActions"] == ["Deny"]


def test_what_taugate_admitted_passes_and_the_same_object_without_taugate_is_refused(capsys):
    for example in ("examples/rayjob-image-classifier.yaml",
                    "policies/gpu-per-pod-fits-node/samples/example_allowed_job_single_gpu.yaml",
                    "policies/head-without-gpu/samples/example_allowed_raycluster_cpu_head.yaml"):
        admitted = _admitted(capsys, example)
        assert _judged(_request(admitted)) and _refusals(_request(admitted)) == []
    raw = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
    raw["metadata"]["namespace"] = "vision"
    refusals = _refusals(_request(raw))
    assert refusals[0].startswith(f"taugate has not admitted RayJob {raw['metadata']['name']} in workspace "
                                  f"namespace vision: it has no {labels.RUN_ID} label and "
                                  f"{labels.ADMISSION_RECORD} record")
    assert all("taugate's admission webhook may be unavailable" in r for r in refusals)


def test_an_admitted_object_copied_to_another_queue_or_workspace_is_refused(capsys):
    admitted = _admitted(capsys, "examples/rayjob-image-classifier.yaml")
    other_queue = copy.deepcopy(admitted)
    other_queue["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] = "nlp-queue"
    assert _refusals(_request(other_queue)) == [
        f'RayJob {admitted["metadata"]["name"]} is not queued in its workspace\'s LocalQueue: '
        f'metadata.labels["{labels.KUEUE_QUEUE_NAME}"] is "nlp-queue"; allowed: "vision-queue" (the label of '
        "namespace vision); taugate's admission webhook may be unavailable: create it again once taugate "
        "answers, or ask the platform team (docs/runbook.md)"]
    unqueued = copy.deepcopy(admitted)
    del unqueued["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]
    assert len(_refusals(_request(unqueued))) == 1
    other_workspace = copy.deepcopy(admitted)
    other_workspace["metadata"]["labels"][labels.WORKSPACE] = "nlp"
    assert 'has tau.azure.com/workspace="nlp" in namespace vision of workspace "vision"' in \
        _refusals(_request(other_workspace))[0]


def test_an_update_keeps_the_run_id_and_queue_and_kueues_own_updates_pass(capsys):
    stored = _admitted(capsys, "examples/rayjob-image-classifier.yaml")
    unsuspended = copy.deepcopy(stored)
    unsuspended["spec"]["suspend"] = False  # what Kueue does once the Workload is admitted
    kueue = "system:serviceaccount:kueue-system:kueue-controller-manager"
    assert _refusals(_request(unsuspended, operation="UPDATE", old=stored, user=kueue)) == []
    unlabelled = copy.deepcopy(stored)
    del unlabelled["metadata"]["labels"][labels.RUN_ID]
    assert _refusals(_request(unlabelled, operation="UPDATE", old=stored))[0].startswith(
        f"this update of RayJob {stored['metadata']['name']} changes or removes its {labels.RUN_ID}")
    # An object stored before taugate governed the namespace (no run-id) is not judged on update.
    before = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
    assert not _judged(_request(before, operation="UPDATE", old=before))


def test_a_trusted_controllers_child_is_not_judged_and_anyone_elses_object_is():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-x7k2p", "namespace": "vision", "labels": {labels.RUN_ID: "0" * 24},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u",
                             "controller": True}]}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    for user in Settings().controller_users:
        assert not _judged(_request(pod, user=user))
    assert _judged(_request(pod))  # a researcher writing an owner reference is judged as a root
    orphan = copy.deepcopy(pod)
    orphan["metadata"]["ownerReferences"][0]["controller"] = False
    assert _judged(_request(orphan, user="system:serviceaccount:kube-system:job-controller"))


def test_the_chart_installs_the_policy_and_its_binding_unless_turned_off_and_render_cel_prints_them(capsys):
    rendered = objects()
    policy = find(rendered, "ValidatingAdmissionPolicy", backstop.NAME)
    binding = find(rendered, "ValidatingAdmissionPolicyBinding", backstop.NAME)
    assert len(policy) == len(binding) == 1
    assert policy[0]["spec"] == backstop.policy()["spec"] and binding[0]["spec"] == backstop.binding()["spec"]
    assert policy[0]["metadata"]["labels"]["app.kubernetes.io/component"] == "admission-policy"
    # The chart's webhook.trustedControllers are the policy's, as they are the webhook's.
    ours = ["system:serviceaccount:ray:kuberay", "system:serviceaccount:kube-system:job-controller"]
    custom = find(objects({"webhook": {"trustedControllers": ours}}), "ValidatingAdmissionPolicy")[0]
    assert custom["spec"] == backstop.policy(Settings(controller_users=tuple(ours)))["spec"]
    off = objects({"admissionPolicy": {"enabled": False}})
    assert not find(off, "ValidatingAdmissionPolicy") and not find(off, "ValidatingAdmissionPolicyBinding")
    assert main(["policy", "render-cel"]) == 0
    assert [d for d in yaml.safe_load_all(capsys.readouterr().out) if d] == backstop.documents(Settings())
