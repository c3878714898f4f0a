"""What the evidence of a run holds beside its events, on the whole stack (``tests/e2e/stack``):
a completed GPU Job's pod log tail, read by the recorder through the API server when the pod
ended (kwok serves the stack's simulated container log as a kubelet would), and what repeating
the run takes: the admitted object, its image, the workload profile as the TauCluster's status
resolved it and the profile-set hash, and the digest its pod ran (the ``imageID`` of the pod's
container status, which kwok reports on the stack as a kubelet does). The record is read from
the object store, as an auditor would, and ``taugate evidence verify`` passes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from taugate.labels import WORKLOAD_PROFILE
from tests.e2e.controlplane import LOOPBACK
from tests.e2e.stack import KWOK_NODE_ANNOTATION, KWOK_POD_LOG, kwok_image_id, unhealthy_gpu_nodes
from tests.e2e.workloads import RUN_ID
from tests.paths import REPO

WORKSPACE = "vision"
JOB = "log-tail-step"
IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def _job() -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": WORKSPACE},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "train", "image": IMAGE, "command": ["python", "-c", "print('ok')"],
                "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                              "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]}}}}


def _taugate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taugate.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, **env})


def _complete(job: dict) -> bool:
    return any(c["type"] == "Complete" and c["status"] == "True" for c in (job.get("status") or {}).get("conditions")
               or [])


def test_a_completed_gpu_jobs_evidence_holds_its_pods_log_tail_its_image_and_its_resolved_profile(whole_stack):
    cp, plat = whole_stack.cp, whole_stack.platform
    cp.kubectl("apply", "-f", "-", input=json.dumps(_job()))
    stored = cp.get_json("job", JOB, "-n", WORKSPACE)["metadata"]["labels"]
    run_id = stored[RUN_ID]
    whole_stack.wait_for("the Job to complete (kwok completes its pod)",
                         lambda: _complete(cp.get_json("job", JOB, "-n", WORKSPACE)), 180)
    (pod,) = cp.get_json("pods", "-n", WORKSPACE, "-l", f"batch.kubernetes.io/job-name={JOB}")["items"]
    name = pod["metadata"]["name"]
    # kubectl logs goes API server -> the Node's kubelet endpoint (kwok's server) -> kwok's log file
    assert cp.kubectl("logs", name, "-n", WORKSPACE, "-c", "train").stdout == KWOK_POD_LOG

    env = plat.evidence_env()
    root = f"--evidence-root={plat.evidence_root}"

    def record() -> dict | None:
        shown = _taugate("evidence", "show", run_id, root, "--json", env=env)
        doc = json.loads(shown.stdout) if shown.returncode == 0 and shown.stdout else None
        return doc if doc and doc.get("logs") else None

    doc = whole_stack.wait_for("the pod's log tail in the run's evidence", record, 180)
    (tail,) = doc["logs"]
    assert (tail["pod"], tail["podUid"], tail["container"], tail["restartCount"]) == (
        name, pod["metadata"]["uid"], "train", 0), tail
    assert tail["node"] == pod["spec"]["nodeName"] and tail["exitCode"] == 0 and tail["reason"] == "Completed", tail
    assert tail["text"] == KWOK_POD_LOG and tail["lines"] == 3 and tail["truncated"] is False, tail
    assert tail["sha256"] == hashlib.sha256(KWOK_POD_LOG.encode()).hexdigest()
    assert tail["limits"] == {"lines": 100, "bytes": 16384}  # the chart's defaults (RecorderConfig's)

    # What repeating the run takes: the object as admitted, its image, the profile and its set hash.
    admitted = doc["admittedObject"]
    assert admitted["metadata"]["name"] == JOB and "status" not in admitted
    assert admitted["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert doc["images"] == [{"template": "spec.template", "group": "job", "container": "train", "image": IMAGE}]
    # the digest the pod ran, as its container status names it
    (status,) = cp.get_json("pod", name, "-n", WORKSPACE)["status"]["containerStatuses"]
    assert status["imageID"] == kwok_image_id(IMAGE)
    assert doc["imageDigests"] == {IMAGE: status["imageID"]}, doc.get("imageDigests")
    profile, set_hash = doc["profile"], doc["profileSetHash"]
    # the profile the webhook placed the Job with, and the set hash of its signed admission record
    assert profile == stored[WORKLOAD_PROFILE] and doc["admission"]["trusted"] is True, (profile, stored)
    assert set_hash and set_hash == doc["admission"]["profileSetHash"], (set_hash, doc["admission"])
    resolved = doc["resolvedProfile"]
    cluster = cp.get_json("taucluster", "cluster")["status"]["workloadProfiles"]
    assert resolved["name"] == profile and resolved["matchesAdmission"] is True, resolved
    assert resolved["profileSetHash"] == set_hash == cluster["profileSetHash"]
    assert resolved["profile"] == next(p for p in cluster["profiles"] if p["name"] == profile)
    assert resolved["profile"]["defaultLocalQueue"] and resolved["profile"]["gpusPerWorker"] >= 1, resolved

    pub = plat.signing_key.with_suffix(".pub.pem")
    verified = _taugate("evidence", "verify", run_id, root, f"--public-key={pub}", env=env)
    assert verified.returncode == 0 and "hash chain intact" in verified.stdout, verified.stdout + verified.stderr
    text = _taugate("evidence", "show", run_id, root, env=env)
    assert text.returncode == 0, text.stdout + text.stderr
    print("taugate evidence show of the Job:", text.stdout, sep="\n")
    for part in ("Log tails:", f"pod {name} container train restart 0", "    | epoch 3/3",
                 "To repeat this run:", f"profile: {profile}  profileSetHash: {set_hash}",
                 f"spec.template train: {IMAGE}  ({kwok_image_id(IMAGE)})", "object (as admitted):"):
        assert part in text.stdout, part


def _ready_and_untainted(node: dict) -> bool:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    return ready and not any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints") or [])


def test_a_kwok_node_that_was_not_ready_for_a_moment_still_names_the_kubelet_kubectl_logs_reaches(whole_stack):
    # On a loaded machine kwok renews a Lease late and the node-lifecycle controller marks its
    # Node Ready Unknown; kwok then runs node-initialize again (Stack.advertise_kwok_kubelet).
    cp = whole_stack.cp
    name = next(n["metadata"]["name"] for n in cp.get_json("nodes")["items"]
                if (n["metadata"].get("annotations") or {}).items() >= KWOK_NODE_ANNOTATION.items()
                and not n["spec"].get("unschedulable") and n["metadata"]["name"] not in unhealthy_gpu_nodes())
    before = cp.get_json("node", name)["status"]
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status."}
    cp.kubectl("patch", "node", name, "--subresource=status", "--type=strategic", "-p",
               json.dumps({"status": {"conditions": [unknown]}}))
    after = whole_stack.wait_for(f"kwok to make {name} Ready again and the taints to go",
                                 lambda: (n := cp.get_json("node", name)) and _ready_and_untainted(n) and n, 120)
    addresses = after["status"].get("addresses") or []
    assert {"type": "InternalIP", "address": LOOPBACK} in addresses, addresses
    assert after["status"]["daemonEndpoints"] == before["daemonEndpoints"] == {
        "kubeletEndpoint": {"Port": whole_stack.kwok_port}}, after["status"]
