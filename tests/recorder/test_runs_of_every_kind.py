"""The recorder follows a run of every registered workload kind (issue 17): its root is the object no
governed controller owns, its members hang from it by controller ownerReference, Admitted comes
from its Kueue Workload, and its end from the kind's own status (``WorkloadKind.outcome``):
JobSet and PyTorchJob conditions, a bare Pod's phase; a serving kind runs until it is deleted.
Each run is scripted the way the kind's controller, Kueue and the kubelet would move it, against
kmock's Kubernetes emulator over HTTP."""

from __future__ import annotations

import pytest

from taugate.controllers.recorder.objects import is_member_child, is_root
from taugate.controllers.recorder.run import membership as members
from taugate.controllers.recorder.run.admitted import derive_admitted, expected_pod_count, suspended
from taugate.controllers.recorder.run.diagnosis import diagnose
from taugate.controllers.recorder.run.outcome import SERVING_KINDS, owner_outcome
from taugate.kinds import KINDS, WorkloadKind, kind_for
from taugate.labels import RUN_ID as RUN_ID_LABEL
from tests.recorder import kind_objects as k
from tests.recorder import objects as o
from tests.recorder.test_recorder_lifecycle import RUN, SETTINGS, conditions, taurun, wait_state

# -- pure rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_every_registered_kind_has_a_completion_rule(kind):
    assert type(kind).outcome is not WorkloadKind.outcome, f"{kind.kind}: give its module an outcome rule"


def test_a_jobsets_job_and_a_rayservices_raycluster_are_members_never_roots():
    js, rs = k.jobset(), k.rayservice()
    assert is_member_child(k.child(js, "batch/v1", "Job", "fine-tune-llm-trainer-node-0"))
    assert is_member_child(k.child(rs, "ray.io/v1", "RayCluster", "stable-diffusion-raycluster-q7x2m"))
    assert not is_member_child(js) and not is_member_child(rs)
    # an owner of a kind taugate does not govern makes nothing a member
    foreign = k.child({**js, "apiVersion": "example.com/v1", "kind": "Pipeline"}, "batch/v1", "Job", "step-1")
    assert not is_member_child(foreign)


def test_suspend_is_read_where_each_kind_keeps_it():
    pt = k.pytorchjob()
    assert suspended(pt)  # spec.runPolicy.suspend
    pt["spec"]["runPolicy"]["suspend"] = False
    assert not suspended(pt)
    rs = k.rayservice()
    rs["spec"]["rayClusterConfig"]["suspend"] = True  # KubeRay's RayService: the cluster's suspend
    assert suspended(rs) and not suspended({**rs, "spec": {**rs["spec"], "suspend": False,
                                                           "rayClusterConfig": {}}})


def test_a_jobset_ends_with_its_completed_or_failed_condition():
    js = k.jobset()
    js["spec"]["suspend"] = False
    js["status"] = {"replicatedJobsStatus": [{"name": "trainer-node", "active": 3}]}
    assert owner_outcome(js).state == "running"
    js["status"]["conditions"] = [k.condition("Failed", "FailedJobs", "jobset failed due to one or more job failures")]
    out = owner_outcome(js)
    assert (out.state, out.reason) == ("failed", "FailedJobs") and "job failures" in out.message
    js["status"]["conditions"] = [k.condition("Completed", "AllJobsCompleted", "jobset completed successfully")]
    assert owner_outcome(js).state == "succeeded"
    js["status"]["conditions"] = [k.condition("Suspended", "SuspendedJobs", "jobset is suspended")]
    assert (owner_outcome(js).state, owner_outcome(js).reason) == ("pending", "Suspended")


def test_a_trainjob_ends_with_its_complete_or_failed_condition_and_its_jobset_is_a_member():
    # trainer v2.2.0 trainjob_types.go: Suspended, Complete, Failed; jobsStatus[].active
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {
        "name": "torch-ddp", "namespace": "team-a", "uid": "tj-uid", "labels": {RUN_ID_LABEL: "a" * 24}},
        "spec": {"suspend": True},
        "status": {"conditions": [k.condition("Suspended", "Suspended", "TrainJob is suspended")]}}
    assert suspended(tj) and (owner_outcome(tj).state, owner_outcome(tj).reason) == ("pending", "Suspended")
    tj["spec"]["suspend"] = False
    tj["status"] = {"jobsStatus": [{"name": "node", "active": 2, "ready": 2, "succeeded": 0, "failed": 0,
                                    "suspended": 0}]}
    assert owner_outcome(tj).state == "running"
    tj["status"]["conditions"] = [k.condition("Failed", "DeadlineExceeded", "TrainJob exceeded its deadline")]
    assert (owner_outcome(tj).state, owner_outcome(tj).reason) == ("failed", "DeadlineExceeded")
    tj["status"]["conditions"] = [k.condition("Complete", "JobsCompleted", "TrainJob completed successfully")]
    assert owner_outcome(tj).state == "succeeded"
    assert is_member_child(k.child(tj, "jobset.x-k8s.io/v1alpha2", "JobSet", "torch-ddp")) and not is_member_child(tj)


def test_a_bare_pod_ends_with_its_phase():
    p = k.pod(k.jobset(), "debug")
    p["metadata"]["ownerReferences"] = []
    p["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    assert owner_outcome(p).reason == "SchedulingGated"
    for phase, state in (("Running", "running"), ("Succeeded", "succeeded"), ("Failed", "failed")):
        p["status"]["phase"] = phase
        assert owner_outcome(p).state == state


@pytest.mark.parametrize("group_kind", sorted(SERVING_KINDS))
def test_a_serving_kind_never_ends_on_its_own(group_kind):
    obj = {"apiVersion": f"{group_kind[0]}/v1" if group_kind[0] else "v1", "kind": group_kind[1], "spec": {},
           "status": {"availableReplicas": 2, "serviceStatus": "Running", "state": "ready",
                      "conditions": [k.condition("Available", "MinimumReplicasAvailable", "ok"),
                                     k.condition("Ready", "RayServiceReady", "ok")]}}
    kind = kind_for(group_kind[0], group_kind[1])
    assert kind is not None and kind.serving
    out = kind.outcome(obj, obj["status"])
    assert out.state == "running" and not out.terminal
    obj["status"] = {}
    assert not kind.outcome(obj, {}).terminal


# -- through the recorder ----------------------------------------------------------------------


def test_a_jobset_run_is_recorded_from_admitted_to_completed(kube, config):
    js = k.jobset()
    job = k.child(js, "batch/v1", "Job", "fine-tune-llm-initializer-0")
    kube.apply([o.node("gpu-node-1"), js, job, k.workload(js, admitted=False)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "False", "Pending")
        kube.patch("kueue.x-k8s.io/v1beta2", "Workload", "jobset-fine-tune-llm-5e1f0",
                   {"status": k.workload(js, admitted=True)["status"]}, o.NS)
        c = wait_state(kube, "Admitted", "True", "Admitted")
        assert c["source"]["kind"] == "Workload"
        kube.patch("jobset.x-k8s.io/v1alpha2", "JobSet", "fine-tune-llm", {
            "spec": {"suspend": False},
            "status": {"replicatedJobsStatus": [{"name": "initializer", "active": 1}]}}, o.NS)
        kube.apply([k.pod(job, "fine-tune-llm-initializer-0-0-x8k2p", node="gpu-node-1", phase="Running")])
        wait_state(kube, "Completed", "False", "Running")
        kube.patch("jobset.x-k8s.io/v1alpha2", "JobSet", "fine-tune-llm", {"status": {
            "terminalState": "Completed",
            "conditions": [k.condition("Completed", "AllJobsCompleted", "jobset completed successfully")]}}, o.NS)
        c = wait_state(kube, "Completed", "True", "Succeeded")
        assert c["source"] == {"kind": "JobSet", "name": "fine-tune-llm", "namespace": o.NS}
        tr = taurun(kube)
        assert tr["spec"]["object"]["kind"] == "JobSet"
        assert tr["status"]["nodes"] == ["gpu-node-1"]  # the Job's pod is the run's, through the Job


def test_a_jobsets_job_is_never_a_root(kube, config):
    js = k.jobset()
    job = k.child(js, "batch/v1", "Job", "fine-tune-llm-trainer-node-0")
    job["metadata"]["creationTimestamp"] = "2026-11-29T09:00:00Z"  # older than its JobSet: still not the root
    kube.apply([job, js, k.workload(js, admitted=True)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        assert taurun(kube)["spec"]["object"]["uid"] == js["metadata"]["uid"]
        assert [t["metadata"]["name"] for t in kube.list("tau.azure.com/v1alpha1", "TauRun", o.NS)] == [RUN]


def test_a_pytorchjob_run_fails_with_its_pods_failure(kube, config):
    pt = k.pytorchjob()
    wl = k.workload(pt, admitted=True)
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [1, 1]  # Master and Worker, from the registry
    master = k.pod(pt, "pytorch-dist-mnist-nccl-master-0", node="gpu-node-1", phase="Running")
    kube.apply([o.node("gpu-node-1"), pt, wl, master])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        # a pod of another object copying the run-id fails too: not the run's failure
        stray = k.pod(k.root(pt, "other", "0badc0de-0000-4000-8000-000000000001", run_id="1" * 24),
                      "stray-0", node="gpu-node-1", phase="Failed", terminated=o.error_exit())
        stray["metadata"]["labels"]["tau.azure.com/run-id"] = RUN
        kube.apply([stray])
        kube.patch("v1", "Pod", "pytorch-dist-mnist-nccl-master-0", {"status": {
            "phase": "Failed", "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "",
                                                      "ready": False, "restartCount": 0,
                                                      "state": {"terminated": o.oom()}, "lastState": {}}]}}, o.NS)
        kube.patch("kubeflow.org/v1", "PyTorchJob", "pytorch-dist-mnist-nccl", {"status": {
            "conditions": [k.condition("Failed", "PyTorchJobFailed",
                                       "PyTorchJob team-a/pytorch-dist-mnist-nccl has failed because 1 Master "
                                       "replica(s) failed.")]}}, o.NS)
        c = wait_state(kube, "Failed", "True", "OOMKilled")
        assert c["source"] == {"kind": "Pod", "name": "pytorch-dist-mnist-nccl-master-0", "namespace": o.NS}
        assert "PyTorchJobFailed" in c["message"]
        failures = taurun(kube)["status"]["failures"]
        assert [f["pod"] for f in failures] == ["pytorch-dist-mnist-nccl-master-0"]


def test_a_rayservice_run_stays_running_while_ready_and_ends_when_deleted(kube, config):
    rs = k.rayservice()
    cluster = k.child(rs, "ray.io/v1", "RayCluster", "stable-diffusion-raycluster-q7x2m",
                      rs["spec"]["rayClusterConfig"])
    head = k.pod(cluster, "stable-diffusion-raycluster-q7x2m-head", node="gpu-node-1", phase="Running")
    kube.apply([o.node("gpu-node-1"), rs, cluster, k.workload(rs, admitted=True), head])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        wait_state(kube, "Completed", "False", "NotAvailable")
        kube.patch("ray.io/v1", "RayService", "stable-diffusion", {"status": {
            "serviceStatus": "Running",
            "conditions": [k.condition("Ready", "NonZeroServeEndpoints", "Number of serve endpoints is greater than 0")]
        }}, o.NS)
        c = wait_state(kube, "Completed", "False", "Available")
        assert c["source"]["kind"] == "RayService" and "Ready" in c["message"]
        assert taurun(kube)["status"]["nodes"] == ["gpu-node-1"]  # the head pod, through the RayCluster
        kube.delete("ray.io/v1", "RayService", "stable-diffusion", o.NS)
        c = wait_state(kube, "Completed", "True", "Deleted")
        assert "serving workload was deleted" in c["message"]
        assert "Failed" not in conditions(kube)


def test_a_deployment_run_is_admitted_through_its_pods_workload_stays_running_and_ends_when_deleted(kube, config):
    dep = k.deployment()
    rs = k.child(dep, "apps/v1", "ReplicaSet", "nginx-deployment-7c5ddbdf54")
    pod = k.pod(rs, "nginx-deployment-7c5ddbdf54-x2k9p", node="gpu-node-1", phase="Running")
    # Kueue's pod integration (the deployment integration queues each pod): the Workload is the pod's
    wl = k.workload(pod, admitted=True, pod_sets=[("main", 1)])
    kube.apply([o.node("gpu-node-1"), dep, rs, pod, wl])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        c = wait_state(kube, "Admitted", "True")
        assert c["source"]["name"] == wl["metadata"]["name"]
        wait_state(kube, "Completed", "False", "NotAvailable")
        kube.patch("apps/v1", "Deployment", "nginx-deployment", {"status": {"availableReplicas": 1}}, o.NS)
        c = wait_state(kube, "Completed", "False", "Available")
        assert c["source"] == {"kind": "Deployment", "name": "nginx-deployment", "namespace": o.NS}
        assert taurun(kube)["status"]["nodes"] == ["gpu-node-1"]  # the pod, through its ReplicaSet
        assert [t["metadata"]["name"] for t in kube.list("tau.azure.com/v1alpha1", "TauRun", o.NS)] == [RUN]
        kube.delete("apps/v1", "Deployment", "nginx-deployment", o.NS)
        wait_state(kube, "Completed", "True", "Deleted")


def test_a_cpu_only_pod_or_deployment_is_never_a_root_taugate_does_not_govern_it():
    cpu = k.deployment()
    del cpu["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert is_root(k.deployment()) and not is_root(cpu)
    p = k.bare_pod()
    assert is_root(p)
    del p["spec"]["containers"][0]["resources"]
    assert not is_root(p)



def test_a_pod_or_deployment_with_gpus_through_dra_is_a_root():
    pod = k.bare_pod()
    del pod["spec"]["containers"][0]["resources"]
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}]
    assert is_root(pod)
    dep = k.deployment()
    del dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}
    assert is_root(dep)


def test_a_bare_gpu_pod_is_its_own_run_and_ends_with_its_phase(kube, config):
    p = k.bare_pod()
    kube.apply([o.node("gpu-node-1"), p, k.workload(p, admitted=True)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        kube.patch("v1", "Pod", "example-vector-add", {"spec": {"nodeName": "gpu-node-1"},
                                                       "status": {"phase": "Running"}}, o.NS)
        wait_state(kube, "Completed", "False", "Running")
        kube.patch("v1", "Pod", "example-vector-add", {"status": {"phase": "Succeeded"}}, o.NS)
        c = wait_state(kube, "Completed", "True", "Succeeded")
        assert c["source"] == {"kind": "Pod", "name": "example-vector-add", "namespace": o.NS}
        assert taurun(kube)["spec"]["object"]["kind"] == "Pod"


def test_a_leaderworkersets_worker_pods_join_its_run_through_the_leader_pod():
    # lws v0.8.0: the LWS controls the leader StatefulSet, each leader pod controls its group's
    # worker StatefulSet (leaderworkerset_controller.go, pod_controller.go)
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "vllm", "namespace": o.NS, "uid": "lws-vllm", "labels": {RUN_ID_LABEL: RUN}}}
    leader_sts = k.child(lws, "apps/v1", "StatefulSet", "vllm")
    leader = k.pod(leader_sts, "vllm-0")
    worker_sts = k.child(leader, "apps/v1", "StatefulSet", "vllm-0")
    worker = k.pod(worker_sts, "vllm-0-1")
    assert all(is_member_child(x) for x in (leader_sts, leader, worker_sts, worker))
    uids = members.members("lws-vllm", [worker, worker_sts, leader, leader_sts])  # any order
    mine, others = members.run_pods([leader, worker, k.pod(k.jobset(), "stray")], frozenset(uids))
    assert [p["metadata"]["name"] for p in mine] == ["vllm-0", "vllm-0-1"]
    assert [p["metadata"]["name"] for p in others] == ["stray"]


def test_the_diagnosis_of_a_run_of_a_new_kind_says_how_to_describe_its_object():
    stuck = [{"type": "Admitted", "status": "True", "reason": "Admitted"},
             {"type": "Scheduled", "status": "True", "reason": "AllPodsBound"},
             {"type": "GPUHealthy", "status": "True", "reason": "Healthy"},
             {"type": "Progressing", "status": "True", "reason": "Advancing"},
             {"type": "Completed", "status": "False", "reason": "NotAvailable", "message": "not available yet",
              "source": {"kind": "LeaderWorkerSet", "name": "vllm", "namespace": o.NS}}]
    d = diagnose(stuck, namespace=o.NS, run_id=RUN)
    assert any("kubectl describe leaderworkersets.leaderworkerset.x-k8s.io vllm -n team-a" in h
               for h in d.next_checks), d.next_checks


def test_a_run_queued_pod_by_pod_is_admitted_only_when_every_pods_workload_is():
    dep = k.deployment()
    rs = k.child(dep, "apps/v1", "ReplicaSet", "nginx-deployment-7c5ddbdf54")
    pods = [k.pod(rs, f"nginx-deployment-7c5ddbdf54-{i}") for i in range(3)]
    admitted = [k.workload(p, admitted=True, pod_sets=[("main", 1)]) for p in pods]
    waiting = k.workload(pods[1], admitted=False, pod_sets=[("main", 1)])
    f = derive_admitted(dep, [admitted[0], waiting, admitted[2]])
    assert (f.status, f.reason) == ("False", "Pending") and f.source["name"] == waiting["metadata"]["name"]
    assert derive_admitted(dep, admitted).status == "True"
    assert expected_pod_count(dep, admitted) == 3  # one pod per Workload, summed
