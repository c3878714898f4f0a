"""The pure condition functions, on plain objects shaped like real Kueue, KubeRay and core ones."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import kubernetes_validate
import pytest

from taugate.controllers.recorder.run.admitted import derive_admitted, expected_pod_count, workload_owner_uid
from taugate.controllers.recorder.run.completion import (
    derive_artifact_saved,
    derive_gpus_released,
    derive_outcome,
    derive_quota_released,
    pod_terminations,
    root_failure,
)
from taugate.controllers.recorder.run.diagnosis import diagnose, phase
from taugate.controllers.recorder.run.gpu_health import derive_gpu_healthy
from taugate.controllers.recorder.run.merge import condition_reason, derive
from taugate.controllers.recorder.run.progress import (
    advance_progress,
    derive_progressing,
    parse_log_progress,
    parse_metrics_jsonl,
)
from taugate.controllers.recorder.run.scheduled import derive_scheduled
from taugate.controllers.recorder.run.values import (
    ADMITTED,
    ALL_TYPES,
    ARTIFACT_SAVED,
    COMPLETED,
    GPU_HEALTHY,
    PROGRESSING,
    SCHEDULED,
    STATE_ORDER,
    ArtifactListing,
    DeriveOptions,
    ProgressSample,
    RunView,
)
from taugate.settings import Settings
from tests.crdschema import crd_errors
from tests.recorder import objects as o

NOW = datetime(2026, 11, 29, 10, 30, tzinfo=UTC)
OPTS = DeriveOptions(Settings().gpu_health_conditions, stall_after=300)


def _view(**kw) -> RunView:
    kw.setdefault("owner", o.rayjob())
    return RunView(run_id=o.RUN_ID, namespace=o.NS, **kw)


def _by_type(conds):
    return {c["type"]: c for c in conds}


# ---------------------------------------------------------------- the test data is realistic


@pytest.mark.parametrize("state", ["pending", "reserved", "admitted", "evicted", "finished"])
def test_the_workload_fixtures_are_valid_under_kueues_own_crd(state):
    assert crd_errors(o.workload(o.rayjob(), state), o.WORKLOAD_CRD, "v1beta2") == []


def test_the_pod_and_node_fixtures_are_valid_core_objects():
    rj = o.rayjob()
    for obj in (o.pod(rj, "worker", 1, node="n1", phase="Running", last_terminated=o.oom()),
                o.pod(rj, "worker", 2, unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
                o.pod(rj, "worker", 3, node="n1", phase="Failed", pod_reason="Evicted"),
                o.node("n1", gpu_condition="GpuXid")):
        kubernetes_validate.validate(obj, "1.30.0", strict=True)


# ---------------------------------------------------------------- Admitted


def test_a_pending_workload_keeps_the_run_unadmitted_with_kueues_reason_and_message():
    rj = o.rayjob()
    f = derive_admitted(rj, [o.workload(rj, "pending")])
    assert (f.status, f.reason) == ("False", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu in flavor a100" in f.message
    assert f.source == {"kind": "Workload", "name": "rayjob-train-resnet-3f2a1", "namespace": o.NS}
    assert f.since == "2026-11-29T10:00:05Z"


def test_an_admitted_workload_names_its_cluster_queue_and_flavors():
    rj = o.rayjob()
    f = derive_admitted(rj, [o.workload(rj, "admitted")])
    assert (f.status, f.reason) == ("True", "Admitted")
    assert "ClusterQueue gpu-cq" in f.message and "a100" in f.message


def test_a_workload_with_quota_but_pending_admission_checks_is_not_admitted_yet():
    rj = o.rayjob()
    f = derive_admitted(rj, [o.workload(rj, "reserved")])
    assert (f.status, f.reason) == ("False", "AdmissionChecksPending")
    assert "dws-prov=Pending" in f.message


def test_a_preempted_workload_reports_the_preemption_and_the_requeue():
    rj = o.rayjob()
    f = derive_admitted(rj, [o.workload(rj, "evicted")])
    assert (f.status, f.reason) == ("False", "Preempted")
    assert "prioritization in the ClusterQueue" in f.message and "InClusterQueue" in f.message


def test_without_a_workload_the_run_waits_for_kueue_unless_it_is_not_queued_at_all():
    rj = o.rayjob()
    f = derive_admitted(rj, [])
    assert (f.status, f.reason) == ("Unknown", "WorkloadNotFound")
    assert rj["metadata"]["uid"] in f.message
    bare = copy.deepcopy(rj)
    del bare["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    bare["spec"]["suspend"] = False
    assert derive_admitted(bare, []).reason == "NotQueued"


def test_workloads_are_matched_by_the_job_uid_label_or_else_the_owner_reference():
    rj = o.rayjob()
    assert workload_owner_uid(o.workload(rj, by_label=True)) == rj["metadata"]["uid"]
    assert workload_owner_uid(o.workload(rj, by_label=False)) == rj["metadata"]["uid"]
    stray = o.workload(rj, by_label=False)
    stray["metadata"]["ownerReferences"] = []
    assert workload_owner_uid(stray) is None


# ---------------------------------------------------------------- Scheduled and GPUHealthy


def test_scheduled_is_true_only_when_every_pod_the_admission_counted_is_bound():
    rj = o.rayjob()
    wl = o.workload(rj, "admitted")
    assert expected_pod_count(rj, [wl]) == 5
    pods = [o.pod(rj, "head", node="n1", phase="Running")] + [o.pod(rj, "worker", i, node="n1") for i in range(3)]
    f = derive_scheduled(pods, 5, admitted=True, terminal=False)
    assert (f.status, f.reason) == ("False", "WaitingForPods") and "4/5" in f.message
    pods.append(o.pod(rj, "worker", 3, node="n2", scheduled_at="2026-11-29T10:03:30Z"))
    f = derive_scheduled(pods, 5, admitted=True, terminal=False)
    assert (f.status, f.reason) == ("True", "AllPodsBound")
    assert f.source["name"].endswith("worker-3") and f.since == "2026-11-29T10:03:30Z"
    assert "n1, n2" in f.message


def test_an_unschedulable_pod_carries_the_schedulers_message():
    rj = o.rayjob()
    pods = [o.pod(rj, "head", node="n1"),
            o.pod(rj, "worker", 0, unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]
    f = derive_scheduled(pods, 5, admitted=True, terminal=False)
    assert (f.status, f.reason) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in f.message and f.source["kind"] == "Pod"


def test_without_pods_the_run_is_awaiting_admission_and_after_the_end_nothing_changes():
    assert derive_scheduled([], 5, admitted=False, terminal=False).reason == "AwaitingAdmission"
    assert derive_scheduled([], 5, admitted=True, terminal=False).reason == "PodsNotCreated"
    assert derive_scheduled([], 5, admitted=True, terminal=True) is None


def test_expected_pods_fall_back_to_the_pod_templates_without_a_workload():
    assert expected_pod_count(o.rayjob(workers=2), []) == 3


def test_a_gpu_health_condition_from_node_problem_detector_makes_the_run_unhealthy():
    rj = o.rayjob()
    pods = [o.pod(rj, "worker", 0, node="n1", phase="Running"), o.pod(rj, "worker", 1, node="n2", phase="Running")]
    nodes = {"n1": o.node("n1"), "n2": o.node("n2", gpu_condition="GpuXid")}
    f = derive_gpu_healthy(pods, nodes, Settings().gpu_health_conditions, terminal=False)
    assert (f.status, f.reason) == ("False", "GpuXid")
    assert f.source == {"kind": "Node", "name": "n2"} and "fallen off the bus" in f.message
    nodes["n2"] = o.node("n2")
    assert derive_gpu_healthy(pods, nodes, Settings().gpu_health_conditions, terminal=False).status == "True"
    nodes["n2"] = o.node("n2", ready=False)
    assert derive_gpu_healthy(pods, nodes, Settings().gpu_health_conditions, terminal=False).reason == "NodeNotReady"


def test_the_gpu_health_condition_list_is_configurable():
    rj = o.rayjob()
    pods = [o.pod(rj, "worker", 0, node="n1", phase="Running")]
    nodes = {"n1": o.node("n1", gpu_condition="KernelDeadlock")}
    assert derive_gpu_healthy(pods, nodes, Settings().gpu_health_conditions, terminal=False).status == "True"
    assert derive_gpu_healthy(pods, nodes, ("KernelDeadlock",), terminal=False).reason == "KernelDeadlock"


# ---------------------------------------------------------------- Progressing


def test_metrics_jsonl_counts_records_and_the_largest_step_and_skips_a_half_written_line():
    text = '{"step": 10, "loss": 2.1}\nnot json\n{"global_step": 30}\n\n{"step": 20}\n{"step": 99'
    assert parse_metrics_jsonl(text) == (3, 30.0)


def test_log_lines_matching_the_pattern_give_the_step():
    text = "INFO starting\nstep=12 loss=3.2\nwarn\nstep=15 loss=3.0\n"
    assert parse_log_progress(text, r"\bstep[=: ]+(\d+)") == (2, 15.0)
    assert parse_log_progress(text, r"loss=") == (2, None)


def test_progress_advances_only_when_the_step_or_the_record_count_grows():
    src = {"kind": "File", "path": "/d/metrics.jsonl"}
    t0 = NOW
    s = advance_progress(None, ProgressSample(src, 3, 30.0), t0)
    assert s.records == 3 and s.first_advance == s.last_advance
    same = advance_progress(s, ProgressSample(src, 3, 30.0), t0 + timedelta(seconds=60))
    assert same is s
    later = advance_progress(s, ProgressSample(src, 4, 40.0), t0 + timedelta(seconds=90))
    assert later.step == 40.0 and later.last_advance.startswith("2026-11-29T10:31:30")
    assert later.first_advance == s.first_advance


def test_a_run_without_progress_for_the_quiet_period_is_stalled():
    src = {"kind": "File", "path": "/d/metrics.jsonl"}
    s = advance_progress(None, ProgressSample(src, 5, 50.0), NOW)
    ok = derive_progressing(s, NOW + timedelta(seconds=299), 300, running_since=None, terminal=False)
    assert (ok.status, ok.reason) == ("True", "MetricsAdvancing") and "step 50" in ok.message
    stalled = derive_progressing(s, NOW + timedelta(seconds=301), 300, running_since=None, terminal=False)
    assert (stalled.status, stalled.reason) == ("False", "Stalled")
    assert "/d/metrics.jsonl" in stalled.message and stalled.since == "2026-11-29T10:35:00Z"
    assert derive_progressing(s, NOW + timedelta(hours=3), 300, running_since=None, terminal=True) is None


def test_a_run_that_never_reports_metrics_stalls_from_the_time_it_was_scheduled():
    f = derive_progressing(None, NOW, 300, running_since="2026-11-29T10:20:00Z", terminal=False, expect="/d/m.jsonl")
    assert (f.status, f.reason) == ("False", "Stalled") and "/d/m.jsonl" in f.message
    f = derive_progressing(None, NOW, 300, running_since="2026-11-29T10:28:00Z", terminal=False)
    assert (f.status, f.reason) == ("Unknown", "AwaitingMetrics")
    assert derive_progressing(None, NOW, 300, running_since=None, terminal=False).reason == "NotRunning"


# ---------------------------------------------------------------- Completed / Failed


def test_a_rayjob_succeeds_when_its_deployment_is_complete_and_its_job_succeeded():
    rj = o.rayjob_status(o.rayjob(), "Complete", "SUCCEEDED", end="2026-11-29T11:00:00Z")
    f = derive_outcome(rj, [])
    assert (f.type, f.status, f.reason, f.since) == ("Completed", "True", "Succeeded", "2026-11-29T11:00:00Z")
    running = derive_outcome(o.rayjob_status(o.rayjob(), "Running", "RUNNING"), [])
    assert (running.type, running.status, running.reason) == ("Completed", "False", "Running")


def test_a_failed_rayjob_takes_its_reason_from_the_oom_killed_worker():
    rj = o.rayjob_status(o.rayjob(), "Failed", "FAILED", reason="AppFailed",
                         message="Job entrypoint command failed with exit code 1")
    worker = o.pod(o.rayjob(), "worker", 2, node="n1", phase="Running", last_terminated=o.oom())
    head = o.pod(o.rayjob(), "head", node="n1", phase="Failed", terminated=o.error_exit())
    failures = pod_terminations(head) + pod_terminations(worker)
    f = derive_outcome(rj, failures)
    assert (f.type, f.status, f.reason) == ("Failed", "True", "OOMKilled")
    assert "worker-2" in f.message and "exit code 137" in f.message and "AppFailed" in f.message
    assert f.source["kind"] == "Pod" and f.source["name"].endswith("worker-2")
    assert derive_outcome(rj, []).reason == "AppFailed"


def test_a_failed_job_uses_its_failed_condition():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": o.NS},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
           "status": {"failed": 4, "conditions": [
               {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit"},
               {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": "2026-11-29T10:40:00Z"}]}}
    f = derive_outcome(job, [])
    assert (f.type, f.reason, f.since) == ("Failed", "BackoffLimitExceeded", "2026-11-29T10:40:00Z")
    job["spec"]["suspend"] = True
    del job["status"]
    assert derive_outcome(job, []).reason == "Suspended"


def test_termination_records_come_from_current_and_last_state_and_evictions_once_each():
    rj = o.rayjob()
    restarted = o.pod(rj, "worker", 1, node="n1", phase="Running", last_terminated=o.oom())
    evicted = o.pod(rj, "worker", 2, node="n1", phase="Failed", pod_reason="Evicted")
    ok = o.pod(rj, "head", node="n1", phase="Succeeded",
               terminated={"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-29T11:00:00Z"})
    recs = pod_terminations(restarted)
    assert [(r["reason"], r["exitCode"], r["node"]) for r in recs] == [("OOMKilled", 137, "n1")]
    assert recs == pod_terminations(copy.deepcopy(restarted))  # stable keys
    assert [r["reason"] for r in pod_terminations(evicted)] == ["Evicted"]
    assert pod_terminations(ok) == []


def test_the_root_failure_is_the_earliest_and_oom_wins_a_tie():
    a = {"reason": "Error", "finishedAt": "2026-11-29T10:20:00Z"}
    b = {"reason": "OOMKilled", "finishedAt": "2026-11-29T10:20:00Z"}
    c = {"reason": "Error", "finishedAt": "2026-11-29T10:19:00Z"}
    assert root_failure([a, b]) is b
    assert root_failure([a, b, c]) is c


# ---------------------------------------------------------------- ArtifactSaved and release lines


def test_artifacts_are_saved_when_an_index_or_a_file_exists_and_missing_only_after_the_end():
    empty = ArtifactListing("/d/outputs")
    assert derive_artifact_saved(empty, terminal=False).status == "Unknown"
    assert derive_artifact_saved(empty, terminal=True).reason == "NoArtifacts"
    files = ArtifactListing("/d/outputs", None, ({"path": "model.pt", "size": 10},))
    assert derive_artifact_saved(files, terminal=True).reason == "FilesWritten"
    idx = ArtifactListing("/d/outputs", {"artifacts": [{"name": "model"}]}, ())
    f = derive_artifact_saved(idx, terminal=True)
    assert (f.status, f.reason) == ("True", "IndexWritten") and "1 artifact" in f.message


def test_quota_is_released_when_the_workload_finishes_and_gpus_when_no_pod_is_left_on_a_node():
    rj = o.rayjob()
    assert derive_quota_released([o.workload(rj, "admitted")], terminal=False,
                                    ever_admitted=True).reason == "QuotaHeld"
    f = derive_quota_released([o.workload(rj, "finished")], terminal=True, ever_admitted=True)
    assert (f.status, f.reason, f.since) == ("True", "WorkloadFinished", "2026-11-29T11:00:00Z")
    assert derive_quota_released([], terminal=True, ever_admitted=True).reason == "WorkloadDeleted"
    running = [o.pod(rj, "worker", 0, node="n1", phase="Running")]
    assert derive_gpus_released(running, terminal=True, ever_scheduled=True).reason == "PodsOnNodes"
    done = [o.pod(rj, "worker", 0, node="n1", phase="Succeeded")]
    assert derive_gpus_released(done, terminal=True, ever_scheduled=True).status == "True"
    assert derive_gpus_released([], terminal=True, ever_scheduled=True).status == "True"


# ---------------------------------------------------------------- merge, derive, diagnose


def test_transition_times_change_only_with_the_status_and_transitions_are_reported_once():
    rj = o.rayjob()
    c1, t1 = derive(_view(workloads=[o.workload(rj, "pending")]), [], NOW, OPTS)
    assert [c["type"] for c in c1] == list(ALL_TYPES)
    assert {t["type"] for t in t1} == set(ALL_TYPES)
    c2, t2 = derive(_view(workloads=[o.workload(rj, "pending")]), c1, NOW + timedelta(seconds=5), OPTS)
    assert t2 == [] and c2 == c1
    c3, t3 = derive(_view(workloads=[o.workload(rj, "admitted")]), c2, NOW + timedelta(seconds=10), OPTS)
    adm = _by_type(c3)["Admitted"]
    assert adm["status"] == "True" and adm["lastTransitionTime"] == "2026-11-29T10:02:00Z"
    assert [t["type"] for t in t3] == ["Admitted", "Scheduled", "QuotaReleased"]


def test_a_finished_run_keeps_its_states_after_its_pods_and_workload_are_deleted():
    rj = o.rayjob_status(o.rayjob(), "Running", "RUNNING")
    wl = o.workload(rj, "admitted")
    pods = [o.pod(rj, "head", node="n1", phase="Running"),
            *(o.pod(rj, "worker", i, node="n1", phase="Running") for i in range(4))]
    nodes = {"n1": o.node("n1")}
    c1, _ = derive(_view(owner=rj, workloads=[wl], pods=pods, nodes=nodes), [], NOW, OPTS)
    assert _by_type(c1)["Scheduled"]["status"] == "True" and _by_type(c1)["GPUHealthy"]["status"] == "True"
    done = o.rayjob_status(rj, "Complete", "SUCCEEDED", end="2026-11-29T11:00:00Z")
    c2, t2 = derive(_view(owner=done, workloads=[], pods=[], nodes=nodes), c1, NOW + timedelta(minutes=40), OPTS)
    by = _by_type(c2)
    assert by["Scheduled"] == _by_type(c1)["Scheduled"] and by["GPUHealthy"] == _by_type(c1)["GPUHealthy"]
    assert by["Completed"]["status"] == "True"
    assert (by["QuotaReleased"]["reason"], by["GPUsReleased"]["status"]) == ("WorkloadDeleted", "True")


def test_a_failure_replaces_the_completed_slot_and_keeps_six_states():
    rj = o.rayjob_status(o.rayjob(), "Running", "RUNNING")
    c1, _ = derive(_view(owner=rj), [], NOW, OPTS)
    failed = o.rayjob_status(rj, "Failed", "FAILED", reason="AppFailed")
    c2, t2 = derive(_view(owner=failed), c1, NOW, OPTS)
    types = [c["type"] for c in c2]
    assert types[:6] == ["Admitted", "Scheduled", "GPUHealthy", "Progressing", "Failed", "ArtifactSaved"]
    assert "Completed" not in types and any(t["type"] == "Failed" for t in t2)


def test_reasons_from_other_systems_are_made_valid_condition_reasons():
    assert condition_reason("OOMKilled") == "OOMKilled"
    assert condition_reason("job deployment failed") == "JobDeploymentFailed"
    assert condition_reason("") == "Unknown"


def test_the_diagnosis_names_the_stuck_stage_and_what_to_check_next():
    rj = o.rayjob()
    c, _ = derive(_view(workloads=[o.workload(rj, "pending")]), [], NOW, OPTS)
    d = diagnose(c, namespace=o.NS, run_id=o.RUN_ID)
    assert (d.stage, d.reason) == ("Admitted", "Pending")
    describe = "kubectl describe workload.kueue.x-k8s.io rayjob-train-resnet-3f2a1 -n team-a"
    assert any(describe in h for h in d.next_checks)
    failed = [{"type": "Admitted", "status": "True", "reason": "Admitted"},
              {"type": "Failed", "status": "True", "reason": "OOMKilled", "message": "pod p: OOMKilled",
               "source": {"kind": "Pod", "name": "p", "namespace": o.NS}}]
    d = diagnose(failed, namespace=o.NS, run_id=o.RUN_ID)
    assert d.stage == "Failed" and any("memory" in h for h in d.next_checks)
    assert any(f"taugate evidence show {o.RUN_ID}" in h for h in d.next_checks)
    done = [{"type": t, "status": "True", "reason": "X"} for t in STATE_ORDER]
    assert diagnose(done).stage == "Done"
    assert phase(done) == "Succeeded"


def test_a_succeeded_job_that_never_reported_progress_is_diagnosed_as_finished_not_as_stalled():
    ran = [{"type": t, "status": "True", "reason": "X"} for t in (ADMITTED, SCHEDULED, COMPLETED)]
    quiet = ran + [{"type": PROGRESSING, "status": "Unknown", "reason": "NoMetrics"},
                   {"type": GPU_HEALTHY, "status": "Unknown", "reason": "NodeGone"}]
    waiting = diagnose(quiet + [{"type": ARTIFACT_SAVED, "status": "False", "reason": "NoArtifacts"}])
    assert (waiting.stage, waiting.summary) == (ARTIFACT_SAVED, "finished; waiting for artifacts")
    saved = diagnose(quiet + [{"type": ARTIFACT_SAVED, "status": "True", "reason": "Saved"}])
    assert (saved.stage, saved.summary, saved.next_checks) == ("Done", "finished; artifacts saved", ())
    assert phase(quiet) == "Succeeded"


def test_a_run_whose_object_is_deleted_before_it_finishes_ends_as_failed_deleted():
    rj = o.rayjob_status(o.rayjob(), "Running", "RUNNING")
    pods = [o.pod(rj, "head", node="n1", phase="Running")]
    c1, _ = derive(_view(owner=rj, workloads=[o.workload(rj, "admitted")], pods=pods, nodes={"n1": o.node("n1")}),
                      [], NOW, OPTS)
    c2, t2 = derive(_view(owner=None, owner_deleted=True, workloads=[], pods=[]), c1, NOW + timedelta(minutes=1),
                       OPTS)
    by = _by_type(c2)
    assert (by["Failed"]["status"], by["Failed"]["reason"]) == ("True", "Deleted")
    assert by["QuotaReleased"]["reason"] == "WorkloadDeleted" and by["GPUsReleased"]["status"] == "True"
    # a finished run whose object is deleted later keeps its outcome
    done = o.rayjob_status(rj, "Complete", "SUCCEEDED")
    c3, _ = derive(_view(owner=done), c1, NOW, OPTS)
    c4, t4 = derive(_view(owner=None, owner_deleted=True), c3, NOW, OPTS)
    assert _by_type(c4)["Completed"]["status"] == "True" and not [t for t in t4 if t["type"] in ("Completed", "Failed")]


def test_job_fixtures_are_valid_and_a_job_run_is_derived_from_its_conditions():
    job = o.job()
    kubernetes_validate.validate(job, "1.30.0", strict=True)
    assert crd_errors(o.job_workload(job, True), o.WORKLOAD_CRD, "v1beta2") == []
    assert expected_pod_count(job, [o.job_workload(job, True)]) == 1
    done = dict(job, status={"succeeded": 1, "completionTime": "2026-11-29T10:09:00Z", "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached",
         "message": "Reached expected number of succeeded pods"}]})
    f = derive_outcome(done, [])
    assert (f.type, f.status, f.since, f.source["kind"]) == ("Completed", "True", "2026-11-29T10:09:00Z", "Job")
