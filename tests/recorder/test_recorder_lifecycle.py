"""The recorder in the operator process, against kmock's Kubernetes emulator over HTTP.

Each test scripts a run the way KubeRay, Kueue and the kubelet would move it (objects created,
status patched, pods deleted) and watches the TauRun and the evidence record the recorder keeps.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import kmock
import pytest

from taugate.cli import runs as recorder_commands
from taugate.controllers.crds import CRD_KINDS, openapi_schema
from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import EVENTS_FILE, EVIDENCE_FILE, verify_record
from taugate.settings import Settings
from tests.crdschema import translate
from tests.kubedouble import KubeDouble
from tests.recorder import objects as o

RUN = o.RUN_ID
SETTINGS = Settings(admission_key=o.ADMISSION_KEY)  # the webhook's and the operator's shared key
TAURUN_SCHEMA = jsonschema.Draft7Validator(translate(openapi_schema(next(k for k in CRD_KINDS if k.kind == "TauRun"))))


def run_dir(config: RecorderConfig, namespace: str = o.NS, run_id: str = RUN) -> Path:
    return Path(config.data_root) / namespace / "runs" / run_id


def taurun(kube: KubeDouble, run_id: str = RUN) -> dict:
    return kube.get("tau.azure.com/v1alpha1", "TauRun", run_id, o.NS) or {}


def conditions(kube: KubeDouble, run_id: str = RUN) -> dict[str, dict]:
    return {c["type"]: c for c in (taurun(kube, run_id).get("status") or {}).get("conditions") or []}


def wait_state(kube: KubeDouble, type_: str, status: str, reason: str | None = None, run_id: str = RUN,
               timeout: float = 8.0) -> dict:
    def check():
        c = conditions(kube, run_id).get(type_)
        if c and c["status"] == status and (reason is None or c["reason"] == reason):
            return c
        return None
    return kube.wait_for(check, timeout=timeout, message=f"{type_}={status} {reason or ''} on TauRun {run_id}")


def schema_errors(obj: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in TAURUN_SCHEMA.iter_errors(obj)]


def admit(kube: KubeDouble, rj: dict, wl: dict) -> None:
    """What Kueue does on admission: Workload admitted, RayJob unsuspended."""
    admitted = o.workload(rj, "admitted")
    kube.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"], {"status": admitted["status"]}, o.NS)
    kube.patch("ray.io/v1", "RayJob", rj["metadata"]["name"],
               {"spec": {"suspend": False}, "status": o.rayjob_status(rj, "Initializing")["status"]}, o.NS)


def pods_of(rj: dict, node: str = "gpu-node-1", phase: str = "Running") -> list[dict]:
    """The head and one worker pod, bound now (the stall clock starts when all pods are bound)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [o.pod(rj, "head", node=node, phase=phase, scheduled_at=now),
            o.pod(rj, "worker", 0, node=node, phase=phase, scheduled_at=now)]


def write_metrics(config: RecorderConfig, steps: range) -> Path:
    d = run_dir(config)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "metrics.jsonl", "a") as f:
        for s in steps:
            f.write(json.dumps({"step": s, "loss": 3.0 / (s + 1)}) + "\n")
    return d / "metrics.jsonl"


def timeline(config: RecorderConfig, run_id: str = RUN) -> list[dict]:
    doc = json.loads((Path(config.evidence_root) / run_id / EVIDENCE_FILE).read_text())
    return doc["timeline"]


def first_true(tl: list[dict]) -> list[str]:
    seen: list[str] = []
    for c in tl:
        if c["status"] == "True" and c["type"] not in seen:
            seen.append(c["type"])
    return seen


# ----------------------------------------------------------------------------------------------


def test_a_scripted_lifecycle_moves_the_taurun_through_the_states_in_order_and_leaves_verifiable_evidence(
        kube, config, key, tmp_path, capsys):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        kube.apply([rj])
        c = wait_state(kube, "Admitted", "Unknown", "WorkloadNotFound")
        assert c["source"] == {"kind": "RayJob", "name": "train-resnet", "namespace": o.NS}

        wl = o.workload(rj, "pending")
        kube.apply([wl])
        c = wait_state(kube, "Admitted", "False", "Pending")
        assert "insufficient unused quota" in c["message"] and c["source"]["kind"] == "Workload"
        assert taurun(kube)["status"]["stage"] == "Admitted"

        admit(kube, rj, wl)
        c = wait_state(kube, "Admitted", "True", "Admitted")
        assert c["source"] == {"kind": "Workload", "name": wl["metadata"]["name"], "namespace": o.NS}
        assert conditions(kube)["Scheduled"]["reason"] == "PodsNotCreated"

        kube.apply([o.raycluster(rj), *pods_of(rj)])
        c = wait_state(kube, "Scheduled", "True", "AllPodsBound")
        assert c["source"]["kind"] == "Pod" and "2/2" in c["message"]
        g = wait_state(kube, "GPUHealthy", "True")
        assert g["source"] == {"kind": "Node", "name": "gpu-node-1"}
        assert conditions(kube)["Progressing"]["status"] == "Unknown"

        metrics = write_metrics(config, range(0, 3))
        c = wait_state(kube, "Progressing", "True", "MetricsAdvancing")
        assert c["source"] == {"kind": "File", "path": str(metrics)} and "step 2" in c["message"]

        kube.patch("ray.io/v1", "RayJob", rj["metadata"]["name"],
                   {"status": o.rayjob_status(rj, "Complete", "SUCCEEDED", end="2026-11-29T11:00:00Z")["status"]}, o.NS)
        c = wait_state(kube, "Completed", "True", "Succeeded")
        assert c["source"] == {"kind": "RayJob", "name": "train-resnet", "namespace": o.NS}
        wait_state(kube, "ArtifactSaved", "False", "NoArtifacts")

        out = run_dir(config) / "outputs"
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"\x00" * 4096)
        c = wait_state(kube, "ArtifactSaved", "True", "FilesWritten")
        assert c["source"] == {"kind": "Path", "path": str(out)}

        kube.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": o.workload(rj, "finished")["status"]}, o.NS)
        wait_state(kube, "QuotaReleased", "True", "WorkloadFinished")
        assert conditions(kube)["GPUsReleased"]["status"] == "False"
        for p in pods_of(rj):
            kube.delete("v1", "Pod", p["metadata"]["name"], o.NS)
        wait_state(kube, "GPUsReleased", "True", "NoPodsOnNodes")
        kube.wait_for(lambda: taurun(kube)["status"]["evidence"]["final"], message="final evidence")

        tr = taurun(kube)
        shown = json.dumps(tr["status"], indent=1)
        assert tr["status"]["phase"] == "Succeeded" and tr["status"]["stage"] == "Done", shown
        assert conditions(kube)["Scheduled"]["status"] == "True"  # kept after the pods are gone
        assert tr["spec"]["object"]["uid"] == rj["metadata"]["uid"] and tr["spec"]["profile"] == "a100-4x"
        assert schema_errors(tr) == []

        # kubectl tau status RUN, against the API double
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": kube.url}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        capsys.readouterr()
        assert recorder_commands.main(["status", "train-resnet", "-n", o.NS, "--kubeconfig", str(kubeconfig)]) == 0
        text = capsys.readouterr().out
        assert f"Run {RUN}" in text and "Stage: Done" in text and "FilesWritten" in text

    tl = timeline(config)
    assert first_true(tl) == ["Admitted", "Scheduled", "GPUHealthy", "Progressing", "Completed", "ArtifactSaved",
                              "QuotaReleased", "GPUsReleased"]
    assert [c["reason"] for c in tl if c["type"] == "Admitted"] == ["WorkloadNotFound", "Pending", "Admitted"]
    keys = [(c["type"], c["status"], c["reason"]) for c in tl]
    assert len(keys) == len(set(keys)), "a transition was recorded twice"
    d = Path(config.evidence_root) / RUN
    v = verify_record(d, key._key.public_key())
    assert v.ok and v.pinned, v.problems
    doc = json.loads((d / EVIDENCE_FILE).read_text())
    assert doc["final"] and doc["phase"] == "Succeeded"
    assert doc["admittedObject"]["metadata"]["uid"] == rj["metadata"]["uid"] and "status" not in doc["admittedObject"]
    assert doc["admission"]["policyDigest"] == "sha256:0d9f3e" and doc["profileSetHash"] == "sha256:7c1e0b"
    first = doc["artifacts"]["files"][0]
    assert first["path"] == "model.safetensors" and len(first["sha256"]) == 64
    assert recorder_commands.main(["evidence", "verify", RUN, "--evidence-root", str(config.evidence_root)]) == 0


def test_an_oom_killed_worker_keeps_the_failure_reason_after_its_pods_are_gone(kube, config):
    rj = o.rayjob(workers=1)
    wl = o.workload(rj, "pending", by_label=False)  # matched through the owner reference
    kube.apply([o.node("gpu-node-1"), rj, wl])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "False", "Pending")
        admit(kube, rj, wl)
        kube.apply([o.raycluster(rj), *pods_of(rj)])
        wait_state(kube, "Scheduled", "True")
        worker = o.pod(rj, "worker", 0, node="gpu-node-1", phase="Running", last_terminated=o.oom())
        kube.patch("v1", "Pod", worker["metadata"]["name"], {"status": worker["status"]}, o.NS)
        kube.wait_for(lambda: (taurun(kube).get("status") or {}).get("failures"), message="failure captured")
        for p in pods_of(rj):
            kube.delete("v1", "Pod", p["metadata"]["name"], o.NS)
        kube.patch("ray.io/v1", "RayJob", rj["metadata"]["name"], {"status": o.rayjob_status(
            rj, "Failed", "FAILED", reason="AppFailed", message="Job entrypoint command failed with exit code 1",
            end="2026-11-29T10:21:00Z")["status"]}, o.NS)
        c = wait_state(kube, "Failed", "True", "OOMKilled")
        assert "exit code 137" in c["message"] and "AppFailed" in c["message"]
        assert c["source"]["name"] == worker["metadata"]["name"]
        tr = taurun(kube)
        assert tr["status"]["phase"] == "Failed" and tr["status"]["stage"] == "Failed"
        assert [f["reason"] for f in tr["status"]["failures"]] == ["OOMKilled"]
        assert "Completed" not in conditions(kube)
        assert schema_errors(tr) == []
    doc = json.loads((Path(config.evidence_root) / RUN / EVIDENCE_FILE).read_text())
    assert doc["failures"][0]["exitCode"] == 137 and doc["failures"][0]["node"] == "gpu-node-1"
    assert verify_record(Path(config.evidence_root) / RUN).ok


def test_a_run_whose_metrics_stop_advancing_shows_progressing_false_stalled(kube, config):
    config = config.model_copy(update={"stall_seconds": 1.0})
    rj = o.rayjob(workers=1)
    wl = o.workload(rj, "admitted")
    kube.apply([o.node("gpu-node-1"), rj, wl, o.raycluster(rj), *pods_of(rj)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        write_metrics(config, range(0, 5))
        wait_state(kube, "Progressing", "True", "MetricsAdvancing")
        write_metrics(config, range(5, 8))  # still advancing...
        kube.wait_for(lambda: "step 7" in conditions(kube)["Progressing"]["message"], message="step 7 seen")
        c = wait_state(kube, "Progressing", "False", "Stalled", timeout=5)  # ...then quiet
        assert "last advance" in c["message"] and "step 7" in c["message"]
        st = taurun(kube)["status"]
        assert st["stage"] == "Progressing" and st["reason"] == "Stalled" and "no progress for" in st["message"]
        write_metrics(config, range(8, 9))  # it recovers
        wait_state(kube, "Progressing", "True", "MetricsAdvancing")
    reasons = [c["reason"] for c in timeline(config) if c["type"] == "Progressing"]
    assert reasons[-3:] == ["MetricsAdvancing", "Stalled", "MetricsAdvancing"]


def test_progress_is_read_from_pod_log_lines_when_there_is_no_metrics_file(kube, config):
    rj = o.rayjob(workers=1)
    log = {"text": "INFO Ray Train: starting\n"}
    # the API server sends a pod's log as plain text (bytes here: kmock would JSON-encode a str)
    kube.call(lambda: kube.emulator[kmock.subresource("log")] << (lambda: log["text"].encode()))
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted"), o.raycluster(rj), *pods_of(rj)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Scheduled", "True")
        assert conditions(kube)["Progressing"]["status"] == "Unknown"
        log["text"] += "step=10 loss=2.3\nstep=20 loss=2.1\n"
        c = wait_state(kube, "Progressing", "True", "MetricsAdvancing")
        assert c["source"]["kind"] == "Pod" and c["source"]["name"].endswith("-head") and "step 20" in c["message"]


def test_a_gpu_fault_on_a_run_node_turns_gpu_healthy_false_with_the_node_as_source(kube, config):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted"), o.raycluster(rj), *pods_of(rj)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "GPUHealthy", "True")
        sick = o.node("gpu-node-1", gpu_condition="GpuXid")
        kube.patch("v1", "Node", "gpu-node-1", {"status": sick["status"]})
        c = wait_state(kube, "GPUHealthy", "False", "GpuXid")
        assert c["source"] == {"kind": "Node", "name": "gpu-node-1"} and "fallen off the bus" in c["message"]


def test_killing_the_recorder_mid_run_and_starting_it_again_leaves_one_consistent_record(kube, config, key):
    rj = o.rayjob(workers=1)
    wl = o.workload(rj, "pending")
    kube.apply([o.node("gpu-node-1"), rj, wl])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "False", "Pending")
        admit(kube, rj, wl)
        kube.apply([o.raycluster(rj), *pods_of(rj)])
        wait_state(kube, "Scheduled", "True")
        write_metrics(config, range(0, 3))
        wait_state(kube, "Progressing", "True")
    d = Path(config.evidence_root) / RUN
    before = (d / EVENTS_FILE).read_bytes()
    # the recorder died in the middle of an append: a torn line, the summary one event behind
    with open(d / EVENTS_FILE, "ab") as f:
        f.write(b'{"data":{"message":"half')
    # the run goes on while the recorder is down
    kube.patch("ray.io/v1", "RayJob", rj["metadata"]["name"],
               {"status": o.rayjob_status(rj, "Complete", "SUCCEEDED", end="2026-11-29T11:00:00Z")["status"]}, o.NS)
    out = run_dir(config) / "outputs"
    out.mkdir(parents=True)
    (out / "index.json").write_text(json.dumps({"artifacts": [{"name": "model", "path": "model.pt"}]}))
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Completed", "True")
        wait_state(kube, "ArtifactSaved", "True", "IndexWritten")
        kube.patch("kueue.x-k8s.io/v1beta2", "Workload", wl["metadata"]["name"],
                   {"status": o.workload(rj, "finished")["status"]}, o.NS)
        for p in pods_of(rj):
            kube.delete("v1", "Pod", p["metadata"]["name"], o.NS)
        kube.wait_for(lambda: taurun(kube)["status"]["evidence"]["final"], message="final evidence")
        tr_conditions = taurun(kube)["status"]["conditions"]
    after = (d / EVENTS_FILE).read_bytes()
    assert after.startswith(before)  # the old events are untouched, the torn line is gone
    assert verify_record(d, key._key.public_key()).ok
    tl = timeline(config)
    keys = [(c["type"], c["status"], c["reason"]) for c in tl]
    assert len(keys) == len(set(keys)), f"recorded twice: {keys}"
    assert [k for k in keys if k[0] == "Admitted"] == [("Admitted", "False", "Pending"),
                                                       ("Admitted", "True", "Admitted")]
    doc = json.loads((d / EVIDENCE_FILE).read_text())
    assert sum(1 for line in after.splitlines() if json.loads(line)["kind"] == "run") == 1
    assert {(c["type"], c["status"], c["reason"]) for c in doc["conditions"]} == \
        {(c["type"], c["status"], c["reason"]) for c in tr_conditions}


def test_a_batch_job_run_is_recorded_and_kuberays_submitter_job_joins_its_rayjobs_run(kube, config):
    job = o.job()
    rid = job["metadata"]["labels"]["tau.azure.com/run-id"]
    rj = o.rayjob(workers=1)
    submitter = o.job(name=rj["metadata"]["name"], run_id=RUN, uid="5b7a1c00-0000-4000-8000-0000000000c2", owner=rj)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.apply([o.node("cpu-node-1"), job, o.job_workload(job, admitted=True), rj, submitter,
                o.job_pod(job, node="cpu-node-1", phase="Running", scheduled_at=now)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        c = wait_state(kube, "Scheduled", "True", run_id=rid)
        assert c["source"]["name"].startswith("eval-batch-0")
        assert wait_state(kube, "Admitted", "True", run_id=rid)["source"]["name"] == "job-eval-batch-8c1d2"
        kube.patch("batch/v1", "Job", "eval-batch", {"status": {"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]}}, o.NS)
        c = wait_state(kube, "Completed", "True", "Succeeded", run_id=rid)
        assert c["source"] == {"kind": "Job", "name": "eval-batch", "namespace": o.NS}
        # the submitter Job (controlled by the RayJob) is not a run of its own
        tr = kube.wait_for(lambda: taurun(kube, RUN), message="the RayJob's TauRun")
        assert tr["spec"]["object"]["kind"] == "RayJob"
        assert {t["metadata"]["name"] for t in kube.list("tau.azure.com/v1alpha1", "TauRun", o.NS)} == {RUN, rid}


def test_the_signing_key_can_come_from_a_secret(kube, key):
    import base64

    import kubernetes.client

    from taugate.controllers.recorder.evidence.records import EvidenceError
    from taugate.controllers.recorder.watch import Recorder
    from taugate.kube import Kube

    with kube.api_client() as api:
        kubernetes.client.CoreV1Api(api).create_namespaced_secret("taugate-system", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "evidence-key", "namespace": "taugate-system"},
            "data": {"ed25519.pem": base64.b64encode(key.private_pem()).decode()}})
        cfg = RecorderConfig(signing_key_secret="taugate-system/evidence-key")
        assert Recorder.load_signer(cfg, Kube(api)).key_id == key.key_id
        with pytest.raises(EvidenceError, match="has no key 'other'"):
            Recorder.load_signer(RecorderConfig(signing_key_secret="taugate-system/evidence-key/other"), Kube(api))
        with pytest.raises(EvidenceError, match="Secret taugate-system/missing: cannot read"):
            Recorder.load_signer(RecorderConfig(signing_key_secret="taugate-system/missing"), Kube(api))
        with pytest.raises(EvidenceError, match="no evidence signing key"):
            Recorder.load_signer(RecorderConfig(), Kube(api))


def test_the_taugate_command_line_carries_the_recorder_commands(config, key, tmp_path, capsys):
    from taugate.cli import main
    from taugate.controllers.recorder.evidence.records import EvidenceStore

    store = EvidenceStore(config.evidence_root, key)
    store.append(RUN, [("run", {"runId": RUN, "namespace": o.NS, "object": {"kind": "RayJob", "name": "train"}}, "t0")])
    assert main(["evidence", "verify", RUN, "--evidence-root", str(config.evidence_root)]) == 0
    assert main(["status", RUN, "--evidence-root", str(config.evidence_root)]) == 0
    assert "Stage: Admitted" in capsys.readouterr().out
    assert main(["status", RUN, "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
