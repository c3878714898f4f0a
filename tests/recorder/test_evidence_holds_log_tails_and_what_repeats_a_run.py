"""What the evidence holds beside the events (issue 32, item 2): each ended container's log tail,
bounded, once, and what repeating the run takes (the admitted object, its images and the digests
its pods ran, the resolved profile and its set hash). The pure parts first, then the recorder
against kmock's Kubernetes emulator.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import kmock

from taugate.cli import runs as recorder_commands
from taugate.cli.evidence_view import render_logs, render_repeat, safe_text
from taugate.controllers.recorder.evidence.records import (
    EVENTS_FILE,
    EVIDENCE_FILE,
    EvidenceStore,
    Signer,
    fold,
    verify_record,
)
from taugate.controllers.recorder.run.logtails import (
    LogTarget,
    bound_tail,
    limit_event,
    log_targets,
    plan_tails,
    read_is_final,
    sha256_text,
    tail_event,
    unavailable_event,
    unavailable_reason,
)
from taugate.controllers.recorder.run.repeat import new_image_ids, pod_image_ids, resolved_profile, template_images
from taugate.settings import Settings
from tests.recorder import objects as o

RID = o.RUN_ID
SETTINGS = Settings(admission_key=o.ADMISSION_KEY)
ENDED = {"exitCode": 0, "reason": "Completed", "startedAt": "2026-11-29T10:05:00Z",
         "finishedAt": "2026-11-29T10:30:00Z"}


def _pod_with(statuses: list[dict], init: list[dict] | None = None, uid: str = "u-1") -> dict:
    status: dict = {"phase": "Running", "containerStatuses": statuses}
    if init is not None:
        status["initContainerStatuses"] = init
    return {"metadata": {"name": "train-0", "uid": uid}, "spec": {"nodeName": "gpu-node-1"}, "status": status}


def _target(uid: str, container: str = "c", n: int = 0, *, deleted: bool = False,
            finished: str = "2026-11-29T10:30:00Z") -> LogTarget:
    return LogTarget(key=f"{uid}/{container}/{n}", pod=f"pod-{uid}", pod_uid=uid, container=container,
                     restart_count=n, finished_at=finished, deleted=deleted)


# -- which containers need a tail --------------------------------------------------------------

def test_each_ended_container_instance_needs_its_tail_and_a_running_one_none():
    pod = _pod_with([
        {"name": "trainer", "restartCount": 0, "state": {"terminated": {**ENDED, "exitCode": 137,
                                                                        "reason": "OOMKilled"}}},
        {"name": "sidecar", "restartCount": 0, "state": {"running": {}}},
    ], init=[{"name": "fetch-data", "restartCount": 0, "state": {"terminated": ENDED}}])
    targets = {t.key: t for t in log_targets(pod)}
    assert set(targets) == {"u-1/fetch-data/0", "u-1/trainer/0"}
    t = targets["u-1/trainer/0"]
    assert (t.pod, t.node, t.exit_code, t.reason, t.previous) == ("train-0", "gpu-node-1", 137, "OOMKilled", False)
    assert targets["u-1/fetch-data/0"].init and not t.init
    assert t.wire() == {"key": "u-1/trainer/0", "pod": "train-0", "podUid": "u-1", "container": "trainer",
                        "restartCount": 0, "node": "gpu-node-1", "exitCode": 137, "reason": "OOMKilled",
                        "finishedAt": "2026-11-29T10:30:00Z"}


def test_a_restarted_containers_previous_instance_is_read_as_the_previous_log_and_counted_once():
    # restartCount 2, running again: the instance that ended is number 1, read with previous=true
    restarted = _pod_with([{"name": "trainer", "restartCount": 2, "state": {"running": {}},
                            "lastState": {"terminated": {**ENDED, "exitCode": 1, "reason": "Error"}}}])
    (t,) = log_targets(restarted)
    assert (t.key, t.restart_count, t.previous) == ("u-1/trainer/1", 1, True)
    # ended for good at restartCount 2: instance 2 now, instance 1 still named the same
    ended = _pod_with([{"name": "trainer", "restartCount": 2, "state": {"terminated": ENDED},
                        "lastState": {"terminated": {**ENDED, "exitCode": 1, "reason": "Error"}}}])
    assert [(t.key, t.previous) for t in log_targets(ended)] == [("u-1/trainer/2", False), ("u-1/trainer/1", True)]


def test_a_malformed_status_gives_no_target_rather_than_an_error():
    for status in ({"containerStatuses": "x"}, {"containerStatuses": [None, {"state": {"terminated": {}}}]},
                   {"containerStatuses": [{"name": "c", "restartCount": "two", "state": {"terminated": ENDED}}]}):
        pod = {"metadata": {"name": "p"}, "status": status}
        assert all(t.restart_count == 0 for t in log_targets(pod))


# -- the bounds -------------------------------------------------------------------------------

def test_a_short_log_is_kept_whole_and_not_truncated():
    tail = bound_tail("epoch 1\nepoch 2\n", 3, 1024)
    assert (tail.text, tail.lines, tail.truncated) == ("epoch 1\nepoch 2\n", 2, False)
    assert bound_tail("", 3, 1024) == bound_tail("", 3, 1024) and bound_tail("", 3, 1024).lines == 0


def test_one_line_more_than_the_bound_says_the_log_was_longer_and_keeps_the_last_lines():
    tail = bound_tail("a\nb\nc\nd\n", 3, 1024)  # read with tailLines = 3 + 1
    assert (tail.text, tail.lines, tail.truncated) == ("b\nc\nd\n", 3, True)


def test_lines_over_the_byte_bound_drop_the_oldest_and_a_single_long_line_keeps_its_end():
    tail = bound_tail("x" * 10 + "\n" + "y" * 5 + "\n", 10, 8)
    assert (tail.text, tail.lines, tail.truncated) == ("yyyyy\n", 1, True)
    long = bound_tail("é" * 20, 10, 7)  # 2 bytes a character: cut at a character boundary
    assert long.truncated and long.text == "é" * 3 and len(long.text.encode()) <= 7


def test_a_tail_event_carries_the_instance_the_text_its_bounds_and_its_sha256():
    t = _target("u-9")
    data = tail_event(t, bound_tail("loss 0.1\n", 100, 16384), max_lines=100, max_bytes=16384)
    assert data["text"] == "loss 0.1\n" and data["lines"] == 1 and data["bytes"] == 9 and not data["truncated"]
    assert data["limits"] == {"lines": 100, "bytes": 16384} and data["sha256"] == sha256_text("loss 0.1\n")
    assert data["key"] == "u-9/c/0" and data["podUid"] == "u-9"
    gone = unavailable_event(t, "PodDeleted", "the pod was deleted")
    assert gone["unavailable"] == "PodDeleted" and "text" not in gone and "sha256" not in gone


def test_a_read_refused_for_good_is_recorded_at_once_and_any_other_failure_read_again():
    assert read_is_final(404) and read_is_final(400) and read_is_final(410)
    for status in (None, 0, 403, 429, 500, 503):
        assert not read_is_final(status)
    assert [unavailable_reason(s) for s in (404, 400, 503, None)] == ["NotFound", "NotServed", "ReadFailed",
                                                                      "ReadFailed"]


# -- which pending tails are read now ---------------------------------------------------------

def test_pending_tails_are_read_once_and_a_deleted_pods_recorded_unavailable():
    recorded = [{"key": "a/c/0", "podUid": "a"}]
    plan = plan_tails([_target("a"), _target("b"), _target("c", deleted=True)], recorded, 64,
                      limit_recorded=False)
    assert [t.key for t in plan.read] == ["b/c/0"] and [t.key for t in plan.gone] == ["c/c/0"]
    assert plan.first_omitted is None


def test_the_run_keeps_the_tails_of_at_most_its_pod_bound_and_says_so_once():
    pending = [_target(u, finished=f"2026-11-29T10:3{i}:00Z") for i, u in enumerate("abcd")]
    pending.append(_target("a", "sidecar"))  # another container of a kept pod is kept too
    plan = plan_tails(pending, [], 2, limit_recorded=False)
    assert sorted(t.key for t in plan.read) == ["a/c/0", "a/sidecar/0", "b/c/0"]
    assert plan.first_omitted is not None and plan.first_omitted.pod_uid == "c"
    assert limit_event(2, plan.first_omitted) == {"maxPods": 2, "firstOmitted": {"pod": "pod-c", "podUid": "c",
                                                                                 "container": "c"}}
    recorded = [{"key": t.key, "podUid": t.pod_uid} for t in plan.read]
    again = plan_tails(pending, recorded, 2, limit_recorded=True)
    assert again.read == () and again.gone == () and again.first_omitted is None
    assert plan_tails(pending, [], 0, limit_recorded=False).read == ()


# -- the fold ---------------------------------------------------------------------------------

def _run_data(**extra) -> dict:
    return {"runId": RID, "namespace": o.NS, "object": {"kind": "Job", "name": "eval-batch"},
            "admission": {"trusted": True}, "profile": "a100-4x", "profileSetHash": "sha256:7c1e0b", **extra}


def test_a_record_without_the_new_kinds_folds_as_before_so_old_records_still_verify():
    doc = fold([{"kind": "run", "data": _run_data()}, {"kind": "final", "data": {"phase": "Succeeded"}}])
    assert not {"logs", "logsLimit", "images", "imageDigests", "resolvedProfile"} & set(doc)


def test_the_summary_keeps_log_tails_images_digests_and_the_resolved_profile_and_verifies(tmp_path):
    store = EvidenceStore(tmp_path / "evidence", Signer.generate())
    images = [{"template": "spec.template", "group": "job", "container": "eval", "image": "ghcr.io/t/eval:1"}]
    profile = {"name": "a100-4x", "profile": {"name": "a100-4x", "gpusPerWorker": 4}, "profileSetHash": "sha256:7c1e0b",
               "matchesAdmission": True}
    t = "2026-11-29T10:00:00Z"
    tail = tail_event(_target("a"), bound_tail("done\n", 100, 16384), max_lines=100, max_bytes=16384)
    store.append(RID, [("run", _run_data(images=images, resolvedProfile=profile), t),
                       ("log", tail, t), ("log", unavailable_event(_target("b"), "PodDeleted"), t),
                       ("images", {"images": {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa"}}, t),
                       ("images", {"images": {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:bb",
                                              "busybox": "b@sha256:cc"}}, t),
                       ("logs-limit", limit_event(2, _target("c")), t)])
    d = store.run_dir(RID)
    assert verify_record(d).ok
    doc = json.loads((d / EVIDENCE_FILE).read_text())
    assert doc["images"] == images and doc["resolvedProfile"] == profile
    assert doc["imageDigests"] == {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa", "busybox": "b@sha256:cc"}
    assert [x.get("text") for x in doc["logs"]] == ["done\n", None] and doc["logs"][1]["unavailable"] == "PodDeleted"
    assert doc["logsLimit"]["maxPods"] == 2
    kinds = [json.loads(line)["kind"] for line in (d / EVENTS_FILE).read_text().splitlines()]
    assert kinds == ["run", "log", "log", "images", "images", "logs-limit"]


# -- what repeating the run takes ---------------------------------------------------------------

def test_the_images_of_every_container_of_every_pod_template_are_named():
    rj = o.rayjob(workers=1)
    images = template_images(rj)
    groups = {(i["group"], i["image"]) for i in images}
    heads = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert any(g[1] == heads[0]["image"] for g in groups) and len({i["template"] for i in images}) == 2
    job = o.job()
    (only,) = template_images(job)
    assert only["template"] == "spec.template" and only["image"] == job["spec"]["template"]["spec"]["containers"][0][
        "image"]
    assert template_images({"apiVersion": "v1", "kind": "ConfigMap"}) == []


def test_the_digests_pods_ran_are_recorded_once_known_and_never_twice():
    pod = {"status": {"containerStatuses": [{"image": "ghcr.io/t/eval:1", "imageID": "ghcr.io/t/eval@sha256:aa"},
                                            {"image": "busybox", "imageID": ""}]}}
    assert pod_image_ids(pod) == {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa"}
    assert new_image_ids([pod, pod], {}) == {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa"}
    assert new_image_ids([pod], {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa"}) == {}


def test_the_profile_is_taken_as_the_taucluster_status_resolved_it_and_says_whether_the_hash_matches():
    cluster = {"status": {"workloadProfiles": {"profileSetHash": "sha256:7c1e0b", "profiles": [
        {"name": "h100-8x", "gpusPerWorker": 8}, {"name": "a100-4x", "gpusPerWorker": 4}]}}}
    got = resolved_profile(cluster, "a100-4x", "sha256:7c1e0b")
    assert got == {"name": "a100-4x", "profile": {"name": "a100-4x", "gpusPerWorker": 4},
                   "profileSetHash": "sha256:7c1e0b", "matchesAdmission": True}
    assert resolved_profile(cluster, "a100-4x", "sha256:other")["matchesAdmission"] is False
    assert resolved_profile(cluster, "gone", "sha256:7c1e0b")["profile"] is None
    assert resolved_profile(None, "a100-4x", "x")["unavailable"] == "no TauCluster to read"
    assert resolved_profile(cluster, None, "x") is None


# -- taugate evidence show ------------------------------------------------------------------------

def test_evidence_show_prints_the_log_tails_and_a_section_to_repeat_the_run():
    doc = fold([
        {"kind": "run", "data": _run_data(
            admittedObject={"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval-batch"}},
            images=[{"template": "spec.template", "group": "job", "container": "eval", "image": "ghcr.io/t/eval:1"}],
            resolvedProfile={"name": "a100-4x", "profile": {"name": "a100-4x", "gpusPerWorker": 4},
                             "profileSetHash": "sha256:7c1e0b", "matchesAdmission": True})},
        {"kind": "log", "data": tail_event(_target("a"), bound_tail("a\nb\nstep 3 \x1b[2J\n", 2, 1024),
                                           max_lines=2, max_bytes=1024)},
        {"kind": "log", "data": unavailable_event(_target("b"), "PodDeleted", "gone")},
        {"kind": "images", "data": {"images": {"ghcr.io/t/eval:1": "ghcr.io/t/eval@sha256:aa"}}},
        {"kind": "logs-limit", "data": limit_event(2, _target("c"))},
    ])
    text = recorder_commands.render_evidence(doc)
    assert "Log tails:" in text and "To repeat this run:" in text
    logs = "\n".join(render_logs(doc))
    assert "truncated to the last 2 lines / 1024 bytes" in logs and "    | step 3 \\x1b[2J" in logs
    assert "\x1b" not in text  # a workload's escape sequences never reach the terminal
    assert "unavailable (PodDeleted): gone" in logs and "tails of at most 2 pods" in logs
    repeat = "\n".join(render_repeat(doc))
    assert "profile: a100-4x  profileSetHash: sha256:7c1e0b" in repeat
    assert "spec.template eval: ghcr.io/t/eval:1  (ghcr.io/t/eval@sha256:aa)" in repeat
    assert "gpusPerWorker: 4" in repeat and "kind: Job" in repeat and "the admission's" in repeat
    assert render_logs(fold([])) == [] and render_repeat(fold([])) == []
    assert safe_text("ok\tline\n\x07") == "ok\tline\n\\x07"


def test_evidence_show_accepts_fields_of_the_wrong_type_without_an_error():
    doc = {"logs": [1, {"text": 5}], "logsLimit": "x", "images": "x", "imageDigests": [],
           "resolvedProfile": 3, "admittedObject": "x", "profile": "p"}
    assert render_logs(doc)[0] == "Log tails:" and render_repeat(doc)[0] == "To repeat this run:"


# -- the recorder against kmock ----------------------------------------------------------------

DIGEST = "registry.k8s.io/e2e-test-images/agnhost@sha256:0123"

def _ended(pod: dict) -> dict:
    """``pod`` as the kubelet reports it once its container exited 0."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = json.loads(json.dumps(pod["status"]))
    status["phase"] = "Succeeded"
    for cs in status["containerStatuses"]:
        cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        cs["ready"] = False
        cs["imageID"] = DIGEST
    return status


def _events(config, run_id: str, kind: str) -> list[dict]:
    path = Path(config.evidence_root) / run_id / EVENTS_FILE
    if not path.is_file():
        return []
    return [e["data"] for e in map(json.loads, path.read_text().splitlines()) if e["kind"] == kind]


def test_the_recorder_keeps_each_ended_pods_tail_once_reads_a_failed_read_again_and_records_a_deleted_pod(
        kube, config):
    config = config.model_copy(update={"evidence_log_lines": 3, "evidence_log_attempts": 1000})
    job = o.job(parallelism=2)
    rid = job["metadata"]["labels"]["tau.azure.com/run-id"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = [o.job_pod(job, i, node="cpu-node-1", phase="Running", scheduled_at=now) for i in range(2)]
    kept, lost = (p["metadata"]["name"] for p in pods)
    reads: dict[str, int] = {kept: 0, lost: 0}

    def serve_log(request: kmock.Request) -> kmock.Response:
        name = request.name or ""
        reads[name] = reads.get(name, 0) + 1
        if name == kept and reads[name] > 1:
            return kmock.Response(status=200, payload="".join(f"eval batch {i}\n" for i in range(10)).encode())
        return kmock.Response(status=503)  # the first read of one pod, every read of the other

    kube.call(lambda: kube.emulator[kmock.subresource("log")] << serve_log)
    kube.apply([o.node("cpu-node-1"), job, o.job_workload(job, admitted=True), *pods])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        kube.wait_for(lambda: _events(config, rid, "run"), message="the run event")
        for p in pods:
            kube.patch("v1", "Pod", p["metadata"]["name"], {"status": _ended(p)}, o.NS)
        kube.wait_for(lambda: _events(config, rid, "log"), message="the kept pod's tail")
        kube.wait_for(lambda: reads[lost] >= 2, message="the other pod's log read again")
        assert not [x for x in _events(config, rid, "log") if x["pod"] == lost]  # a failed read is not a record
        kube.delete("v1", "Pod", lost, o.NS)
        kube.wait_for(lambda: len(_events(config, rid, "log")) == 2, message="the deleted pod's log event")
        kube.wait_for(lambda: _events(config, rid, "images"), message="the digest the pods ran")
    logs = {x["pod"]: x for x in _events(config, rid, "log")}
    assert logs[kept]["text"] == "eval batch 7\neval batch 8\neval batch 9\n" and logs[kept]["truncated"]
    assert logs[kept]["sha256"] == sha256_text(logs[kept]["text"]) and logs[kept]["exitCode"] == 0
    assert logs[lost]["unavailable"] == "PodDeleted" and "text" not in logs[lost]
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert _events(config, rid, "images") == [{"images": {image: DIGEST}}]
    (run,) = _events(config, rid, "run")
    assert run["images"][0]["image"] == image
    assert verify_record(Path(config.evidence_root) / rid).ok


def test_a_burst_of_new_runs_reads_the_taucluster_once_and_again_after_ten_seconds(kube):
    from taugate.controllers.recorder.writer import CLUSTER_REUSE_SECONDS, TauRunWriter
    from taugate.kube import Kube
    from taugate.state_objects import TAU_CLUSTERS

    cluster = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster", "metadata": {"name": "cluster"},
               "spec": {"workloadProfiles": []},
               "status": {"workloadProfiles": {"profileSetHash": "sha256:a", "profiles": []}}}
    kube.apply([cluster])
    reads: list[str] = []

    class Counting(Kube):  # the real client, counting its TauCluster reads
        def get(self, res, name, namespace=None):
            if res is TAU_CLUSTERS:
                reads.append(name)
            return super().get(res, name, namespace)

    now = [100.0]
    writer = TauRunWriter(Counting.from_configuration(kube.configuration), clock=lambda: now[0])
    for _ in range(50):
        assert writer.tau_cluster()["status"]["workloadProfiles"]["profileSetHash"] == "sha256:a"
    assert len(reads) == 1
    now[0] += CLUSTER_REUSE_SECONDS - 0.5
    writer.tau_cluster()
    assert len(reads) == 1
    kube.patch("tau.azure.com/v1alpha1", "TauCluster", "cluster",
               {"status": {"workloadProfiles": {"profileSetHash": "sha256:b"}}})
    now[0] += 0.5
    assert writer.tau_cluster()["status"]["workloadProfiles"]["profileSetHash"] == "sha256:b"  # read again
    assert len(reads) == 2
