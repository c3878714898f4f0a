"""The API server's own policy (taugate/admission_policy.py, installed by the operator under the
chart's RBAC) on kube-apiserver, with taugate's webhook stopped and its configurations in place
(the workload route's failurePolicy is Ignore): a GPU workload taugate did not admit, a copy moved
to another queue, a hand-edited placement, an edit that drops the run-id, GPUs given to a CPU
Deployment and a bare GPU ReplicaSet are refused, each with its message; what taugate admitted keeps
working (Kueue's unsuspend, the Job controller's pods, a researcher's label on one of them), a
CPU workload goes on, namespaces that are not workspaces are not judged. Deleted by hand, the
policy is put back by the operator. Its parameter is the TauProfilePlacement the operator writes
from the TauCluster; after its binding was gone for a while, the policy reads a profile added
since."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import yaml

from taugate import admission_policy
from taugate.models import TauCluster
from tests.e2e.workloads import GPU_CLASS_SELECTOR, QUEUE, RUN_ID, WORKSPACE, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
POLICY = "ValidatingAdmissionPolicy 'taugate-admitted-workloads' with binding 'taugate-admitted-workloads' denied"
GPU_JOB = yaml.safe_load((REPO / "policies" / "gpu-per-pod-fits-node" / "samples" /
                          "example_allowed_job_single_gpu.yaml").read_text())
CPU_DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "notebook"},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "notebook"}}, "template": {
                      "metadata": {"labels": {"app": "notebook"}}, "spec": {"containers": [
                          {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}}}}
GPU_REPLICASET = {**CPU_DEPLOYMENT, "kind": "ReplicaSet", "metadata": {"name": "bare"}, "spec": {
    **CPU_DEPLOYMENT["spec"], "template": {**CPU_DEPLOYMENT["spec"]["template"], "spec": {"containers": [
        {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
CPU_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}}}}


def _stored(cp) -> dict | None:
    out = cp.kubectl("get", "validatingadmissionpolicy", "taugate-admitted-workloads", "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _refused(cp, *args: str, input: str | None = None) -> str:
    out = cp.kubectl(*args, input=input, check=False)
    assert out.returncode != 0, out.stdout
    assert POLICY in out.stderr, out.stderr
    assert "taugate's admission webhook may be unavailable" in out.stderr
    return out.stderr


def test_with_taugate_down_the_api_server_refuses_what_taugate_did_not_admit_and_the_rest_goes_on(platform):
    cp = platform.cp
    rendered = list(yaml.safe_load_all(subprocess.run([sys.executable, "-m", "taugate.cli", "policy", "render-cel"],
                                                      capture_output=True, text=True, check=True, cwd=REPO).stdout))
    stored = platform.wait_for("the operator to install the policy", lambda: _stored(cp), 60)
    # render-cel runs here with default settings; the operator with the chart's (its own service account)
    for part in ("validations", "variables", "paramKind"):  # the API server adds defaults to the others
        assert stored["spec"][part] == rendered[0]["spec"][part], part
    assert "system:serviceaccount:taugate-system:taugate-operator" in stored["spec"]["matchConditions"][0]["expression"]
    cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(GPU_JOB, name="admitted-before")))
    admitted = cp.get_json("job", "admitted-before", "-n", WORKSPACE)
    assert admitted["metadata"]["labels"][RUN_ID] and admitted["spec"]["suspend"] is True  # queued
    cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(CPU_DEPLOYMENT)))
    cp.kubectl("create", "namespace", "no-workspace-here")
    platform.stop_webhook()
    try:
        err = _refused(cp, "apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="while-down")))
        assert f"taugate has not admitted RayJob while-down in workspace namespace {WORKSPACE}: it asks for GPUs " \
               f"but has no {RUN_ID} label" in err
        # A copy of the admitted Job (its run-id and record too) moved to another LocalQueue.
        copy = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "admitted-before-2", "namespace": WORKSPACE,
                             "labels": {**admitted["metadata"]["labels"], QUEUE: "nlp-queue"},
                             "annotations": admitted["metadata"]["annotations"]},
                "spec": {k: v for k, v in admitted["spec"].items() if k != "selector"}}
        copy["spec"]["template"]["metadata"]["labels"] = {RUN_ID: admitted["metadata"]["labels"][RUN_ID]}
        err = _refused(cp, "create", "-f", "-", input=json.dumps(copy))
        assert "taugate has not admitted Job admitted-before-2" in err  # the record names another Job
        # The admitted Job moved to another LocalQueue (the API server prints the first failed rule).
        err = _refused(cp, "label", "job", "admitted-before", "-n", WORKSPACE, f"{QUEUE}=nlp-queue", "--overwrite")
        assert f"this update of Job admitted-before changes or removes its {RUN_ID}, {QUEUE} or" in err
        # A hand edit of the placement, and one that drops the run-id, are refused.
        err = _refused(cp, "patch", "job", "admitted-before", "-n", WORKSPACE, "--type=json", "-p", json.dumps(
            [{"op": "remove", "path": "/spec/template/spec/nodeSelector/" + GPU_CLASS_SELECTOR.replace("/", "~1")}]))
        assert "Job admitted-before is not placed as workload profile" in err
        err = _refused(cp, "label", "job", "admitted-before", "-n", WORKSPACE, f"{RUN_ID}-")
        assert f"this update of Job admitted-before changes or removes its {RUN_ID}" in err
        # An edit that keeps them passes, and so does Kueue-style unsuspend; the Job controller,
        # a trusted controller, creates the admitted Job's pods.
        cp.kubectl("label", "job", "admitted-before", "-n", WORKSPACE, "note=kept")
        cp.kubectl("patch", "job", "admitted-before", "-n", WORKSPACE, "--type=merge", "-p",
                   json.dumps({"spec": {"suspend": False}}))
        pods = platform.wait_for("the Job controller to create the pods", lambda: cp.get_json(
            "pods", "-n", WORKSPACE, "-l", "job-name=admitted-before")["items"], 60)
        assert pods[0]["metadata"]["labels"][RUN_ID] == admitted["metadata"]["labels"][RUN_ID]
        # A researcher's edit of a child (a label on a pod) is its parent's business: it passes.
        cp.kubectl("label", "pod", pods[0]["metadata"]["name"], "-n", WORKSPACE, "debug=true")
        # GPUs given to a CPU Deployment taugate left alone, or asked by a bare ReplicaSet, are refused.
        err = _refused(cp, "set", "resources", "deployment", "notebook", "-n", WORKSPACE, "--limits=nvidia.com/gpu=1")
        assert "this update gives GPUs to Deployment notebook, which was created without any" in err
        err = _refused(cp, "create", "-f", "-", input=json.dumps(into_workspace(GPU_REPLICASET)))
        assert "ReplicaSet bare asks for GPUs but taugate does not manage that kind" in err
        # A CPU workload goes on (no GPUs: nothing to queue), and outside workspaces nothing is judged.
        cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(CPU_JOB, name="cpu-while-down")))
        cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, namespace="no-workspace-here",
                                                                       name="not-judged")))
        # Deleted by hand, the policy comes back: the operator keeps it.
        cp.kubectl("delete", "validatingadmissionpolicy", "taugate-admitted-workloads")
        platform.wait_for("the operator to put the policy back", lambda: _stored(cp), 60)
    finally:
        platform.start_webhook()
        for name in ("admitted-before", "cpu-while-down"):
            cp.kubectl("delete", "job", name, "-n", WORKSPACE, "--ignore-not-found", "--cascade=foreground")
        cp.kubectl("delete", "deployment", "notebook", "-n", WORKSPACE, "--ignore-not-found")
        cp.kubectl("delete", "namespace", "no-workspace-here", "--wait=false")
    # taugate answers again: the same RayJob is admitted.
    created = json.loads(cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                    input=json.dumps(into_workspace(EXAMPLE, name="back"))).stdout)
    assert created["metadata"]["labels"][QUEUE] == "vision-queue"


SMALL_JOB = {**CPU_JOB, "metadata": {"name": "small"}, "spec": {**CPU_JOB["spec"], "template": {"spec": {
    "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "resources": {
        "requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}
"""A CPU Job taugate admits with its webhook up (the policy library asks for cpu and memory)."""
PROFILE = "tau.azure.com/workload-profile"


def _placement(cp) -> dict | None:
    out = cp.kubectl("get", "profileplacements.tau.azure.com", "taugate-admitted-workloads", "-o", "json",
                     check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _dry_run(cp, obj: dict):
    return cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)


def test_the_policy_reads_the_profiles_the_operator_writes_and_sees_a_new_one_after_its_binding_came_back(platform):
    cp = platform.cp
    # The operator wrote the parameter from the TauCluster, under the chart's RBAC.
    stored = platform.wait_for("the operator to write the policy's parameter", lambda: _placement(cp), 60)
    cluster = TauCluster.model_validate(cp.get_json("clusters.tau.azure.com", "cluster"))
    assert stored["spec"] == admission_policy.parameters(cluster)["spec"]
    assert stored["spec"]["profiles"]["h100-1gpu"]["gpuClass"] == "h100"
    binding = cp.get_json("validatingadmissionpolicybinding", "taugate-admitted-workloads")
    assert binding["spec"]["paramRef"] == {"name": "taugate-admitted-workloads", "parameterNotFoundAction": "Deny"}
    # Deleted by hand (or by an uninstall's cleanup hook), it is put back in seconds (the operator
    # watches it; its resync is 300 s).
    cp.kubectl("delete", "profileplacements.tau.azure.com", "taugate-admitted-workloads")
    platform.wait_for("the operator to put the parameter back", lambda: _placement(cp), 30)
    # No binding for a while, as after an uninstall or the policy turned off and on: the API server
    # stops following the parameter's kind (k8s.io/apiserver policy_source.go), and starts again
    # once the operator puts the binding back.
    assert platform.operator is not None
    platform.operator.stop()
    try:
        cp.kubectl("delete", "validatingadmissionpolicybinding", "taugate-admitted-workloads")
        assert _dry_run(cp, into_workspace(SMALL_JOB)).returncode == 0  # judged with no binding
    finally:
        platform.start_operator()
    platform.wait_for("the operator to put the binding back", lambda: cp.kubectl(
        "get", "validatingadmissionpolicybinding", "taugate-admitted-workloads", check=False).returncode == 0, 60)
    # A profile added now: a GPU Job under it is admitted only once the policy reads it as well
    # (a policy reading a frozen copy would refuse it as a profile the TauCluster does not have).
    added = {**copy.deepcopy(next(p for p in cluster.wire()["spec"]["workloadProfiles"] if p["name"] == "h100-1gpu")),
             "name": "e2e-added", "nodeSelector": {"e2e": "added"}}
    cp.kubectl("patch", "clusters.tau.azure.com", "cluster", "--type=json", "-p",
               json.dumps([{"op": "add", "path": "/spec/workloadProfiles/-", "value": added}]))
    try:
        job = into_workspace(GPU_JOB, name="under-a-new-profile")
        job["metadata"]["labels"] = {PROFILE: "e2e-added"}
        out = platform.wait_for("a GPU Job under the new profile to be admitted", lambda: (
            lambda r: r if r.returncode == 0 else None)(_dry_run(cp, job)), 90)
        assert json.loads(out.stdout)["spec"]["template"]["spec"]["nodeSelector"]["e2e"] == "added"
        assert "e2e-added" in _placement(cp)["spec"]["profiles"]
    finally:
        profiles = cp.get_json("clusters.tau.azure.com", "cluster")["spec"]["workloadProfiles"]
        index = next(i for i, p in enumerate(profiles) if p["name"] == "e2e-added")
        cp.kubectl("patch", "clusters.tau.azure.com", "cluster", "--type=json", "-p",
                   json.dumps([{"op": "remove", "path": f"/spec/workloadProfiles/{index}"}]))
    platform.wait_for("the operator to drop the profile from the parameter",
                      lambda: "e2e-added" not in (_placement(cp) or {"spec": {"profiles": {"e2e-added": {}}}})[
                          "spec"]["profiles"], 60)
