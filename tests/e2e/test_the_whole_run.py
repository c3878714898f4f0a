"""A run through the whole stack (``tests/e2e/stack``): the researcher's RayJob applied with
kubectl passes taugate's and Kueue's mutating webhooks, Kueue admits its Workload and unsuspends
it, KubeRay makes the RayCluster and the submitter Job, kube-scheduler binds the pods to kwok's
GPU Nodes, kwok runs them, and taugate's recorder follows the run into a TauRun. The tests run in
file order and share the one stack: each leaves the runs it made in place for the later ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.stack import USERS
from tests.e2e.workloads import QUEUE, RUN_ID
from tests.paths import EXAMPLE_RAYJOB, REPO

WORKSPACE = "vision"
GPU_NODE_PREFIX = {"h100": "aks-h100-", "a100": "aks-a100-"}
CPU_NODES = ("aks-cpu-0", "aks-cpu-1")


def _cond(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _owned_by(objs: list[dict], kind: str, name: str) -> list[dict]:
    return [o for o in objs
            if any(r["kind"] == kind and r["name"] == name for r in o["metadata"].get("ownerReferences") or [])]


def _workload_of(cp, kind: str, name: str) -> dict | None:
    wls = _owned_by(cp.get_json("workloads.kueue.x-k8s.io", "-n", WORKSPACE)["items"], kind, name)
    return wls[0] if wls else None


def _taurun_columns(cp, run_id: str) -> dict[str, str]:
    """The row of ``kubectl get tauruns`` for ``run_id``, as {column: value}."""
    out = cp.kubectl("get", "tauruns", "-n", WORKSPACE).stdout.splitlines()
    header = out[0].split()
    for line in out[1:]:
        cells = line.split()
        if cells and cells[0] == run_id:
            return dict(zip(header, cells, strict=False))
    return {}


def _rayjob(name: str, profile_workers: int | None = None, gpus_per_worker: int | None = None) -> dict:
    """The example image-classifier RayJob named ``name``; ``profile_workers`` x
    ``gpus_per_worker`` reshape its GPU worker group."""
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    obj["metadata"].pop("generateName", None)
    obj["metadata"]["name"] = name
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    if profile_workers is not None:
        group["replicas"] = group["minReplicas"] = group["maxReplicas"] = profile_workers
    if gpus_per_worker is not None:
        res = group["template"]["spec"]["containers"][0]["resources"]
        for k in ("requests", "limits"):
            res[k]["nvidia.com/gpu"] = str(gpus_per_worker)
            res[k]["cpu"] = "8"
            res[k]["memory"] = "64Gi"
    return obj


def _apply(cp, obj: dict, check: bool = True) -> subprocess.CompletedProcess:
    return cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=check)


@pytest.fixture(scope="module")
def classifier(whole_stack) -> dict:
    """The example image-classifier RayJob (4 workers x 1 GPU, a CPU head), applied with
    ``kubectl apply`` in the ``vision`` workspace, as stored."""
    cp = whole_stack.cp
    _apply(cp, _rayjob("resnet-finetune"))
    return cp.get_json("rayjob", "resnet-finetune", "-n", WORKSPACE)


def test_the_applied_rayjob_is_stored_queued_suspended_with_a_run_id_and_an_explicit_submitter(classifier):
    labels = classifier["metadata"]["labels"]
    assert labels[QUEUE] == "vision-queue"
    run_id = labels[RUN_ID]
    assert classifier["spec"]["submitterPodTemplate"]["metadata"]["labels"][RUN_ID] == run_id


def test_kueue_admits_the_rayjob_kuberay_runs_it_and_the_scheduler_puts_gpu_workers_on_h100_nodes_only(
        whole_stack, classifier):
    cp = whole_stack.cp
    run_id = classifier["metadata"]["labels"][RUN_ID]
    wl = whole_stack.wait_for("Kueue to admit the RayJob's Workload", lambda: (
        w := _workload_of(cp, "RayJob", "resnet-finetune")) and _cond(w, "Admitted").get("status") == "True" and w, 180)
    assert wl["status"]["admission"]["clusterQueue"] == "vision-cq"
    flavors = {a["name"]: a.get("flavors") for a in wl["status"]["admission"]["podSetAssignments"]}
    assert flavors["gpu-workers"]["nvidia.com/gpu"] == "h100" and flavors["head"]["cpu"] == "cpu"
    whole_stack.wait_for("Kueue to unsuspend the RayJob",
                         lambda: not cp.get_json("rayjob", "resnet-finetune", "-n", WORKSPACE)["spec"].get("suspend"),
                         60)  # false is omitted
    (cluster,) = whole_stack.wait_for("KubeRay to make the RayCluster", lambda: _owned_by(
        cp.get_json("rayclusters", "-n", WORKSPACE)["items"], "RayJob", "resnet-finetune"), 120)
    assert cluster["metadata"]["labels"][RUN_ID] == run_id

    def pods_bound():
        pods = cp.get_json("pods", "-n", WORKSPACE, "-l", f"{RUN_ID}={run_id}")["items"]
        return pods if len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods) else None
    pods = whole_stack.wait_for("the run's 6 pods (head, 4 workers, submitter) to be bound", pods_bound, 180)
    by_role = {}
    for p in pods:
        role = p["metadata"]["labels"].get("ray.io/node-type") or "submitter"
        by_role.setdefault(role, []).append(p["spec"]["nodeName"])
    assert len(by_role["worker"]) == 4, by_role
    assert all(n.startswith(GPU_NODE_PREFIX["h100"]) for n in by_role["worker"]), by_role
    assert by_role["head"][0] in CPU_NODES and by_role["submitter"][0] in CPU_NODES, by_role
    # KubeRay's submitter Job (K8sJobMode) carries the run-id: taugate labels it from its template.
    (job,) = _owned_by(cp.get_json("jobs", "-n", WORKSPACE)["items"], "RayJob", "resnet-finetune")
    assert job["metadata"]["labels"][RUN_ID] == run_id


def test_kubectl_get_tauruns_shows_the_run_admitted_scheduled_and_gpu_healthy(whole_stack, classifier):
    cp = whole_stack.cp
    run_id = classifier["metadata"]["labels"][RUN_ID]

    def all_true() -> dict[str, str] | None:
        r = _taurun_columns(cp, run_id)
        return r if r and all(r.get(c) == "True" for c in ("ADMITTED", "SCHEDULED", "GPUHEALTHY")) else None

    row = whole_stack.wait_for("the TauRun to show Admitted, Scheduled and GPUHealthy True", all_true, 180)
    assert row["NAME"] == run_id
    run = cp.get_json("taurun", run_id, "-n", WORKSPACE)
    at = {t: _cond(run, t)["lastTransitionTime"] for t in ("Admitted", "Scheduled", "GPUHealthy")}
    print("TauRun conditions of the RayJob, in order:", sorted(at.items(), key=lambda kv: kv[1]))
    assert at["Admitted"] <= at["Scheduled"], at


def test_an_npd_gpu_condition_on_a_run_node_turns_gpu_healthy_false_and_the_healthy_capacity_policy_warns(
        whole_stack, classifier):
    cp = whole_stack.cp
    run_id = classifier["metadata"]["labels"][RUN_ID]
    # 5 workers of 4 GPUs need 3 H100 nodes at once (2 per node): 3 are healthy (aks-h100-3 fails GpuXid).
    probe = _rayjob("capacity-probe", profile_workers=5, gpus_per_worker=4)
    before = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(probe))
    assert "gpu-healthy-capacity" not in before.stderr, before.stderr
    worker = next(p for p in cp.get_json("pods", "-n", WORKSPACE, "-l", f"{RUN_ID}={run_id}")["items"]
                  if p["metadata"]["labels"].get("ray.io/node-type") == "worker")
    node = worker["spec"]["nodeName"]
    ecc = {"type": "GpuEcc", "status": "True", "reason": "GpuEccHasIssues",
           "message": "GpuEcc check failed: DBE on GPU 3"}
    cp.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p",
               json.dumps({"status": {"conditions": [ecc]}}))
    try:
        def gpu_unhealthy() -> dict | None:
            r = cp.get_json("taurun", run_id, "-n", WORKSPACE)
            return r if r and _cond(r, "GPUHealthy").get("status") == "False" else None

        run = whole_stack.wait_for("GPUHealthy False on the TauRun", gpu_unhealthy, 120)
        gpu = _cond(run, "GPUHealthy")
        assert gpu["reason"] == "GpuEcc" and node in gpu["message"], gpu
        assert _taurun_columns(cp, run_id)["GPUHEALTHY"] == "False"
        after = whole_stack.wait_for("the webhook to see the unhealthy node", lambda: (
            p := cp.kubectl("apply", "--dry-run=server", "-f", "-",
                            input=json.dumps(probe))) and "gpu-healthy-capacity" in p.stderr and p, 60)
        assert "Warning:" in after.stderr and "2 of 4 h100 nodes are healthy" in after.stderr, after.stderr
        assert "needs 3 h100 nodes at once" in after.stderr, after.stderr
        # kwok's heartbeats keep the condition (it patches its own condition types only).
        assert _cond(cp.get_json("node", node), "GpuEcc").get("status") == "True"
    finally:
        ecc.update(status="False", reason="GpuEccHasNoIssues", message="ok")
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p",
                   json.dumps({"status": {"conditions": [ecc]}}))


def _gpu_job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": WORKSPACE},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "train", "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                "command": ["python", "-c", "print('ok')"],
                "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                              "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]}}}}


def _taugate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taugate.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, **(env or {})})


def test_a_batch_job_runs_to_completion_and_its_taurun_is_completed_released_and_its_evidence_verifies(whole_stack):
    cp, plat = whole_stack.cp, whole_stack.platform
    _apply(cp, _gpu_job("one-gpu-step"))
    run_id = cp.get_json("job", "one-gpu-step", "-n", WORKSPACE)["metadata"]["labels"][RUN_ID]
    whole_stack.wait_for("the Job to complete (kwok completes its pod)", lambda: _cond(
        cp.get_json("job", "one-gpu-step", "-n", WORKSPACE), "Complete").get("status") == "True", 180)
    run = whole_stack.wait_for("the TauRun to be Completed with quota and GPUs released", lambda: (
        r := cp.get_json("taurun", run_id, "-n", WORKSPACE)) and all(
        _cond(r, t).get("status") == "True" for t in ("Completed", "QuotaReleased", "GPUsReleased")) and r, 180)
    assert _cond(run, "Admitted")["status"] == "True" and _cond(run, "Scheduled")["status"] == "True"
    # The six states in the order the recorder saw them (lastTransitionTime, RFC 3339 seconds):
    # quota and GPUs are released only once the Job has completed, and nothing ran before Kueue
    # admitted it.
    at = {t: _cond(run, t)["lastTransitionTime"] for t in
          ("Admitted", "Scheduled", "GPUHealthy", "Completed", "QuotaReleased", "GPUsReleased")}
    print("TauRun conditions of the batch Job, in order:", sorted(at.items(), key=lambda kv: kv[1]))
    assert at["Admitted"] <= at["Scheduled"] <= at["Completed"] <= at["QuotaReleased"], at
    assert at["Completed"] <= at["GPUsReleased"], at
    # `taugate status` of the completed Job: finished, not "not making progress" (a batch Job that
    # writes no metrics never has Progressing True).
    # Through kubectl's plugin mechanism, as the README says (`kubectl tau status RUN`): kubectl finds
    # the `kubectl-tau` entry point pip installed beside this Python.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    status = subprocess.run([str(cp.binary("kubectl")), "tau", "status", run_id, "-n", WORKSPACE], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PATH": path, "KUBECONFIG": str(cp.kubeconfig)})
    print("kubectl tau status of the completed Job:", status.stdout, sep="\n")
    assert status.returncode == 0, status.stderr
    assert "Succeeded" in status.stdout and "making progress" not in status.stdout
    assert json.loads(_taugate("status", run_id, "-n", WORKSPACE, f"--kubeconfig={cp.kubeconfig}", "-o", "json")
                      .stdout)["diagnosis"]["stage"] in ("ArtifactSaved", "Done")
    # The evidence is in the object store's Object Lock bucket (the chart's operator.evidence.s3),
    # read with the AWS_* variables a platform engineer or an auditor would set.
    pub = plat.signing_key.with_suffix(".pub.pem")
    env = plat.evidence_env()
    assert plat.evidence_root.startswith("s3://"), plat.evidence_root
    verify = ("evidence", "verify", run_id, f"--evidence-root={plat.evidence_root}", f"--public-key={pub}")
    whole_stack.wait_for("the evidence record to verify", lambda: _taugate(*verify, env=env).returncode == 0, 60)
    # The webhook's admission record, signed with the chart's admission key, is kept as trusted.
    shown = _taugate("evidence", "show", run_id, f"--evidence-root={plat.evidence_root}", "--json", env=env)
    admission = json.loads(shown.stdout)["admission"]
    assert admission["trusted"] is True and admission["object"]["name"] == "one-gpu-step", admission
    # Every object of the record is locked until a day from now (GOVERNANCE, the chart's values).
    s3 = plat.object_store.client()
    bucket, _, prefix = plat.evidence_root.removeprefix("s3://").partition("/")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{run_id}/")["Contents"]]
    assert any("/events/" in k for k in keys) and any("/evidence/" in k for k in keys), keys
    for k in keys:
        head = s3.head_object(Bucket=bucket, Key=k)
        assert head["ObjectLockMode"] == "GOVERNANCE", (k, head)
    # The run's objects leave the cluster; the record stays, and verifies from the bucket alone.
    cp.kubectl("delete", "job", "one-gpu-step", "-n", WORKSPACE, "--cascade=foreground", "--wait=true", timeout=120)
    cp.kubectl("delete", "taurun", run_id, "-n", WORKSPACE, "--wait=true", timeout=120)
    assert cp.kubectl("get", "taurun", run_id, "-n", WORKSPACE, "--ignore-not-found", "-o", "name").stdout == ""
    again = _taugate(*verify, env=env)
    assert again.returncode == 0 and "hash chain intact" in again.stdout, again.stdout + again.stderr


def test_a_second_rayjob_over_the_cluster_queue_waits_suspended_and_its_taurun_says_why(whole_stack, classifier):
    cp = whole_stack.cp
    # vision-cq: 24 H100 GPUs nominal (+8 borrowable; the cohort has no H100 to lend). The
    # classifier holds 4; two runs of 2 x 8 GPUs (profile h100-8gpu) make 36.
    try:
        for name in ("big-a", "big-b"):
            _apply(cp, _rayjob(name, profile_workers=2, gpus_per_worker=8))
        whole_stack.wait_for("Kueue to admit big-a", lambda: (w := _workload_of(cp, "RayJob", "big-a")) and _cond(
            w, "Admitted").get("status") == "True", 180)

        def pending_for_quota() -> dict | None:
            w = _workload_of(cp, "RayJob", "big-b")
            reserved = _cond(w, "QuotaReserved") if w else {}
            waits = reserved.get("status") == "False" and "insufficient" in reserved.get("message", "")
            return w if w and waits else None

        wl = whole_stack.wait_for("Kueue to leave big-b pending for quota", pending_for_quota, 180)
        assert "nvidia.com/gpu" in _cond(wl, "QuotaReserved")["message"]
        assert cp.get_json("rayjob", "big-b", "-n", WORKSPACE)["spec"]["suspend"] is True
        run_id = cp.get_json("rayjob", "big-b", "-n", WORKSPACE)["metadata"]["labels"][RUN_ID]
        run = whole_stack.wait_for("big-b's TauRun to say it waits for quota", lambda: (
            r := cp.get_json("taurun", run_id, "-n", WORKSPACE)) and _cond(r, "Admitted").get("status") == "False"
            and "quota" in _cond(r, "Admitted").get("message", "") and r, 120)
        assert _cond(run, "Admitted")["reason"] != "", run["status"]
    finally:  # give the quota back to the tests after this one, in any order
        cp.kubectl("delete", "rayjob", "big-a", "big-b", "-n", WORKSPACE, "--ignore-not-found", "--wait=true",
                   timeout=120)


def test_a_rayjob_over_nominal_plus_borrowing_is_refused_at_apply_with_both_numbers(whole_stack):
    cp = whole_stack.cp
    huge = _rayjob("too-big", profile_workers=9, gpus_per_worker=4)  # 36 GPUs > 24 + 8
    denied = _apply(cp, huge, check=False)
    assert denied.returncode != 0
    assert "gpu-total-fits-queue" in denied.stderr, denied.stderr
    assert "nominalQuota 24 + borrowingLimit 8" in denied.stderr, denied.stderr
    assert cp.kubectl("get", "rayjob", "too-big", "-n", WORKSPACE, check=False).returncode != 0


IMMUTABLE = {"jobs": ("/spec/selector", "/spec/completionMode", "/spec/completions")}


def test_every_update_kueue_and_kuberay_send_passes_taugate_with_no_patch_under_an_immutable_field(whole_stack):
    senders = (USERS["kueue"], USERS["kuberay-operator"])
    events = [e for e in whole_stack.cp.audit_events() if e.get("stage") == "ResponseComplete"
              and e["user"]["username"] in senders and e["verb"] in ("update", "patch")]
    counts: dict[tuple[str, str, str], int] = {}
    refused, bad_patches, patched = [], [], []
    seen_by_taugate = 0  # the API server records every mutating webhook it called on the request
    for e in events:
        ref = e["objectRef"]
        res = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
        key = (e["user"]["username"], e["verb"], res)
        counts[key] = counts.get(key, 0) + 1
        code = (e.get("responseStatus") or {}).get("code", 0)
        msg = (e.get("responseStatus") or {}).get("message", "")
        if code >= 400 and "taugate" in msg:
            refused.append((key, msg))
        for k, v in (e.get("annotations") or {}).items():
            called = k.startswith("mutation.webhook.admission.k8s.io/")
            if called and "taugate" in json.loads(v).get("configuration", ""):
                seen_by_taugate += 1
            if not k.startswith("patch.webhook.admission.k8s.io/"):
                continue
            p = json.loads(v)
            if "taugate" not in p.get("configuration", ""):
                continue
            patched.append((key, p["patch"]))
            for op in p["patch"]:
                if any(op["path"].startswith(f) for f in IMMUTABLE.get(e["objectRef"]["resource"], ())):
                    bad_patches.append((key, op))
    print("UPDATE/PATCH by Kueue and KubeRay seen by the API server:",
          json.dumps({"/".join(k): n for k, n in sorted(counts.items())}))
    print("taugate's mutating webhook called on", seen_by_taugate, "of them; it patched", len(patched), patched[:5])
    assert sum(n for (u, _, _), n in counts.items() if u == USERS["kueue"]) > 0
    assert sum(n for (u, _, _), n in counts.items() if u == USERS["kuberay-operator"]) > 0
    assert seen_by_taugate > 0
    assert not refused, refused
    assert not bad_patches, bad_patches
