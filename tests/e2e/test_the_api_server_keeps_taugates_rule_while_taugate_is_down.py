"""The chart's ValidatingAdmissionPolicy (webhook/backstop.py) on kube-apiserver: with taugate's
webhook configurations deleted, the API server itself refuses a workload taugate did not admit, a
copy moved to another queue and an edit that drops the run-id, each with its message; what taugate
admitted before keeps working: its updates (Kueue's unsuspend) and its children, created by
Kubernetes' Job controller; namespaces that are not workspaces are not judged."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.e2e.platform import webhook_configurations
from tests.e2e.workloads import QUEUE, RUN_ID, WORKSPACE, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
POLICY = "ValidatingAdmissionPolicy 'taugate-admitted-workloads' with binding 'taugate-admitted-workloads' denied"
JOB = yaml.safe_load((REPO / "policies" / "workers-match-profile" / "samples" / "example_allowed_cpu_job.yaml")
                     .read_text())


def _refused(cp, *args: str, input: str | None = None) -> str:
    out = cp.kubectl(*args, input=input, check=False)
    assert out.returncode != 0, out.stdout
    assert POLICY in out.stderr, out.stderr
    return out.stderr


def test_with_the_configurations_deleted_the_api_server_refuses_what_taugate_did_not_admit(platform):
    cp = platform.cp
    rendered = list(yaml.safe_load_all(subprocess.run([sys.executable, "-m", "taugate.cli", "policy", "render-cel"],
                                                      capture_output=True, text=True, check=True, cwd=REPO).stdout))
    stored = cp.get_json("validatingadmissionpolicy", "taugate-admitted-workloads")
    assert stored["spec"]["validations"] == rendered[0]["spec"]["validations"]
    assert stored["spec"]["matchConditions"] == rendered[0]["spec"]["matchConditions"]
    job = into_workspace(JOB, name="admitted-before")
    cp.kubectl("apply", "-f", "-", input=json.dumps(job))
    admitted = cp.get_json("job", "admitted-before", "-n", WORKSPACE)
    assert admitted["metadata"]["labels"][RUN_ID] and admitted["spec"]["suspend"] is True  # queued
    try:
        cp.kubectl("delete", "mutatingwebhookconfiguration/taugate", "validatingwebhookconfiguration/taugate")
        platform.wait_for("the API server to stop calling taugate", lambda: POLICY in cp.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="probe")),
            check=False).stderr, 60)
        err = _refused(cp, "apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="while-down")))
        assert f"taugate has not admitted RayJob while-down in workspace namespace {WORKSPACE}: it has no " \
               f"{RUN_ID} label" in err
        # A copy of the admitted Job (its run-id and record too) moved to another LocalQueue.
        copy = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "copied", "namespace": WORKSPACE,
                             "labels": {**admitted["metadata"]["labels"], QUEUE: "nlp-queue"},
                             "annotations": admitted["metadata"]["annotations"]},
                "spec": {k: v for k, v in admitted["spec"].items() if k != "selector"}}
        copy["spec"]["template"]["metadata"]["labels"] = {RUN_ID: admitted["metadata"]["labels"][RUN_ID]}
        err = _refused(cp, "create", "-f", "-", input=json.dumps(copy))
        assert f'Job copied is not queued in its workspace\'s LocalQueue: metadata.labels["{QUEUE}"] is ' \
               '"nlp-queue"; allowed: "vision-queue"' in err
        # An edit that drops the run-id is refused; one that keeps it, and Kueue's unsuspend, are not.
        err = _refused(cp, "label", "job", "admitted-before", "-n", WORKSPACE, f"{RUN_ID}-")
        assert f"this update of Job admitted-before changes or removes its {RUN_ID}" in err
        cp.kubectl("label", "job", "admitted-before", "-n", WORKSPACE, "note=kept")
        cp.kubectl("patch", "job", "admitted-before", "-n", WORKSPACE, "--type=merge", "-p",
                   json.dumps({"spec": {"suspend": False}}))
        # Kubernetes' Job controller creates the admitted Job's pod: a trusted controller's child.
        pods = platform.wait_for("the Job controller to create the pod", lambda: cp.get_json(
            "pods", "-n", WORKSPACE, "-l", "job-name=admitted-before")["items"], 60)
        assert pods[0]["metadata"]["labels"][RUN_ID] == admitted["metadata"]["labels"][RUN_ID]
        # Outside the workspaces nothing is judged.
        cp.kubectl("create", "namespace", "no-workspace-here")
        cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, namespace="no-workspace-here",
                                                                       name="not-judged")))
    finally:
        cp.apply_objects(webhook_configurations(platform.objects, platform.webhook_port,
                                                (platform.cert_dir / "ca.crt").read_bytes()), "--server-side",
                         "--field-manager=helm", "--force-conflicts")
        cp.kubectl("delete", "job", "admitted-before", "-n", WORKSPACE, "--ignore-not-found")
        platform.wait_for("taugate to mutate again", lambda: RUN_ID in (json.loads(cp.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-",
            input=json.dumps(into_workspace(EXAMPLE, name="back"))).stdout)["metadata"].get("labels") or {}), 60)
