"""GPU arithmetic and controller UPDATEs exactly as Kubernetes, Kueue and KubeRay define them
(issue 12), through ``taugate admit`` (the CLI, ``--old`` for an UPDATE) and the admission
functions the webhook runs, on real-shaped manifests (``tests.upstream_manifests``). Every
JSONPatch is applied with ``jsonpatch``."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import jsonpatch
import pytest
import yaml

from taugate import labels
from taugate.cli import main
from taugate.kinds import job as job_kind
from taugate.kinds import rayjob as rayjob_kind
from taugate.pods import pod_request
from taugate.snapshot import build_state, read_objects
from taugate.webhook.review import admit, mutate, request_for, validate
from tests import upstream_manifests as m
from tests.paths import EXAMPLE_CLUSTER, POLICIES

MIG_CLUSTER = POLICIES / "mig-slices-fit/samples/cluster.yaml"


def cli(tmp_path, capsys, obj, *argv, old=None, cluster=EXAMPLE_CLUSTER, namespace="vision"):
    """``taugate admit`` on ``obj`` (an UPDATE of ``old`` when given); (exit code, stdout, stderr)."""
    f = tmp_path / "object.yaml"
    f.write_text(yaml.safe_dump(obj, sort_keys=False))
    args = ["admit", "-f", str(f), "--cluster", str(cluster), "-n", namespace, *argv]
    if old is not None:
        o = tmp_path / "stored.yaml"
        o.write_text(yaml.safe_dump(old, sort_keys=False))
        args += ["--old", str(o)]
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def admitted(obj, state, settings, engine, namespace="vision"):
    d = admit(obj, state=state, settings=settings, engine=engine, namespace=namespace)
    assert d.allowed, d.message
    return d.object


def update(new, old, state, settings, engine, username="alice@example.com"):
    """The UPDATE as the API server runs the two webhooks: the mutating answer (its patch applied
    with jsonpatch) then the validating one on the patched object; (patch, final, validation)."""
    user = {"username": username, "groups": ["system:authenticated"]}
    request = request_for(new, namespace="vision", operation="UPDATE", old=old, user_info=user)
    m_ = mutate(request, state, settings, engine)
    assert m_.allowed, m_.message
    final = jsonpatch.apply_patch(new, m_.patch) if m_.patch else new
    v = validate({**request, "object": final}, state, settings, engine)
    return m_.patch or [], final, v


# --- A blocked deletion: never a patch under an immutable pod template -------------------------

def test_the_garbage_collectors_finalizer_removal_on_a_started_job_gets_no_patch(state, settings, engine):
    job = m.legacy_started_job()
    job["metadata"]["finalizers"] = ["foregroundDeletion"]
    patch, final, v = update(m.gc_finalizer_removal(job), job, state, settings, engine, username=m.GC)
    assert patch == [] and v.allowed, v.message
    assert final["metadata"]["finalizers"] == []


def test_taugate_admit_as_the_garbage_collector_and_as_kueue_sends_no_patch(tmp_path, capsys, state, settings,
                                                                           engine):
    job = m.legacy_started_job()
    job["metadata"]["finalizers"] = ["foregroundDeletion"]
    code, out, err = cli(tmp_path, capsys, m.gc_finalizer_removal(job), "-o", "patch", "--as", m.GC, old=job)
    assert code == 0, err
    assert json.loads(out)[0]["patch"] == []
    stored = _kueue_admitted(state, settings, engine)
    start = copy.deepcopy(stored)
    start["spec"]["suspend"] = False
    start["spec"]["parallelism"] = 5
    start["spec"]["template"]["spec"]["nodeSelector"] = {settings.gpu_class_label: "h100"}
    code, out, err = cli(tmp_path, capsys, start, "-o", "patch", "--as", m.KUEUE, old=stored)
    assert code == 0, err
    assert json.loads(out)[0]["patch"] == []


def test_kubectl_label_on_a_started_job_without_a_template_run_id_never_patches_the_template(tmp_path, capsys):
    job = m.legacy_started_job()
    labelled = copy.deepcopy(job)
    labelled["metadata"]["labels"]["example.com/reviewed"] = "yes"
    del labelled["metadata"]["labels"][labels.RUN_ID]  # and a client that dropped the run-id
    code, out, err = cli(tmp_path, capsys, labelled, "-o", "patch", old=job)
    assert code == 0, err
    [entry] = json.loads(out)
    assert [op["path"] for op in entry["patch"]] == ["/metadata/labels/tau.azure.com~1run-id"]
    final = jsonpatch.apply_patch(labelled, entry["patch"])
    assert final["spec"]["template"] == job["spec"]["template"], "a started Job's pod template is immutable"
    assert final["metadata"]["labels"][labels.RUN_ID] == m.RUN_ID


def test_a_suspended_job_that_never_started_still_gets_its_template_run_id_back(state, settings, engine):
    job = m.legacy_started_job()
    job["spec"]["suspend"] = True
    job["status"] = {}
    assert job_kind.KIND.templates_mutable(job)
    patch, final, v = update(copy.deepcopy(job), job, state, settings, engine)
    assert final["spec"]["template"]["metadata"]["labels"][labels.RUN_ID] == m.RUN_ID and v.allowed


def test_kuberays_started_submitter_job_is_updated_without_a_template_patch(state, settings, engine):
    child = m.legacy_started_job()
    child["metadata"]["labels"].pop(labels.KUEUE_QUEUE_NAME)
    child["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rayjob-sample",
                                             "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
    relabelled = copy.deepcopy(child)
    relabelled["metadata"]["annotations"] = {"ray.io/job-submission-id": "rayjob-sample-abcde"}
    patch, final, v = update(relabelled, child, state, settings, engine, username=m.KUBERAY)
    assert patch == [] and v.allowed and final["spec"]["template"] == child["spec"]["template"]
    # At CREATE the same child inherits the run-id on its template too.
    created = copy.deepcopy(child)
    del created["status"]
    d = mutate(request_for(created, namespace="vision", user_info={"username": m.KUBERAY}), state, settings)
    assert [op["path"] for op in d.patch] == ["/spec/template/metadata/labels/tau.azure.com~1run-id"]


@pytest.mark.parametrize("status", [{"startTime": "2026-12-01T09:00:00Z"}, {"active": 1}])
def test_a_suspended_job_that_started_or_has_active_pods_keeps_an_immutable_template(status):
    job = m.legacy_started_job()
    job["spec"]["suspend"] = True
    job["status"] = status
    assert not job_kind.KIND.templates_mutable(job)
    assert rayjob_kind.KIND.templates_mutable(m.classifier())


# --- Kueue's UPDATEs: unsuspend with the flavor's placement and a lowered parallelism; eviction -

def _kueue_admitted(state, settings, engine):
    """A partially admissible GPU Job as taugate stored it (suspended, queued, run-id)."""
    return m.stored(admitted(m.partial_job(), state, settings, engine), "sample-job-partial-admission")


def test_kueues_unsuspend_with_node_selectors_tolerations_gates_and_lowered_parallelism_is_allowed_untouched(
        state, settings, engine):
    job = _kueue_admitted(state, settings, engine)
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    start = copy.deepcopy(job)
    start["spec"]["suspend"] = False
    start["spec"]["parallelism"] = 7  # admitted partially: 7 of 12 pods fit the quota
    pod = start["spec"]["template"]["spec"]
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), settings.gpu_class_label: "h100"}
    pod["tolerations"] = pod["tolerations"] + [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                "effect": "NoSchedule"}]
    del pod["schedulingGates"]
    start["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = "5"
    patch, final, v = update(start, job, state, settings, engine, username=m.KUEUE)
    assert patch == [] and v.allowed, v.message
    assert final["spec"]["parallelism"] == 7 and final["spec"]["suspend"] is False
    # Admitted at exactly the minimum: Kueue checks the annotation only when it changes.
    start["spec"]["parallelism"] = 5
    patch, final, v = update(start, job, state, settings, engine, username=m.KUEUE)
    assert patch == [] and v.allowed, v.message


def test_kueues_eviction_suspends_first_then_restores_the_template_and_parallelism_untouched(state, settings,
                                                                                            engine):
    job = _kueue_admitted(state, settings, engine)
    running = m.started_job(job)
    running["spec"]["parallelism"] = 7
    evict = copy.deepcopy(running)
    evict["spec"]["suspend"] = True
    patch, _, v = update(evict, running, state, settings, engine, username=m.KUEUE)
    assert patch == [] and v.allowed, v.message
    # The Job controller clears startTime and active; then Kueue restores what it changed.
    suspended = copy.deepcopy(evict)
    suspended["status"] = {}
    restore = copy.deepcopy(suspended)
    restore["spec"]["parallelism"] = 12
    restore["spec"]["template"] = copy.deepcopy(job["spec"]["template"])
    patch, final, v = update(restore, suspended, state, settings, engine, username=m.KUEUE)
    assert patch == [] and v.allowed, v.message
    assert final["spec"]["parallelism"] == 12


# --- Native sidecars (KEP-753) ------------------------------------------------------------------

def test_a_native_sidecar_adds_its_gpus_to_the_pod_so_eight_plus_one_is_denied_on_8_gpu_nodes(tmp_path, capsys):
    code, out, err = cli(tmp_path, capsys, m.sidecar_job(8, 1))
    assert code == 1 and out == ""
    assert "[gpu-per-pod-fits-node]" in err
    assert ("asks for 9 GPUs per pod (native sidecar gpu-telemetry: 1 runs beside the main containers, so its GPUs "
            "add to theirs, KEP-753), but the largest h100 node has 8 allocatable GPUs") in err
    assert "[gpu-per-pod-within-profile]" in err and "allowed: 8 GPUs per worker" in err


def test_a_classic_init_container_runs_before_the_main_ones_so_eight_and_one_is_eight(tmp_path, capsys):
    code, out, err = cli(tmp_path, capsys, m.sidecar_job(8, 1, native=False))
    assert code == 0, err
    assert yaml.safe_load(out)["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-8gpu"


def test_the_pod_request_is_the_larger_of_main_plus_sidecars_and_each_init_plus_the_sidecars_before_it():
    d = Decimal
    # A sidecar of 2 started before a classic init container of 7: 9 while it initialises.
    assert pod_request([("containers", False, d(1)), ("initContainers", True, d(2)),
                        ("initContainers", False, d(7))]) == 9
    # The same init container before the sidecar: 7 alone, then main 1 + sidecar 2.
    assert pod_request([("containers", False, d(1)), ("initContainers", False, d(7)),
                        ("initContainers", True, d(2))]) == 7
    assert pod_request([("containers", False, d(4)), ("containers", False, d(4)),
                        ("initContainers", True, d(1))]) == 9


# --- KubeRay's worker count, and Kueue's -------------------------------------------------------

def test_kuberay_creates_min_replicas_when_replicas_is_below_it_so_64_gpus_are_counted(tmp_path, capsys):
    obj = m.set_worker_gpus(m.classifier(), 8)
    group = m.worker_group(obj)
    group.update(replicas=1, minReplicas=2, numOfHosts=4)
    group.pop("maxReplicas")
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 1
    assert "[gpu-total-fits-queue]" in err and "asks for 64 GPUs in total (gpu-group: 8 pods x 8 GPUs)" in err


def test_replicas_zero_the_crd_default_with_min_replicas_five_counts_five_workers(tmp_path, capsys):
    obj = m.classifier()
    group = m.worker_group(obj)
    group.update(replicas=0, minReplicas=5, maxReplicas=5)
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 1
    assert "[workers-match-profile] spec.rayClusterSpec.workerGroupSpecs[0].replicas: asks for 5 workers" in err


def test_where_kueue_reserves_more_than_kuberay_creates_the_larger_count_decides(state, settings):
    from taugate.webhook.review import Context, subject_of  # the templates admission reads
    obj = m.classifier()
    m.worker_group(obj).update(replicas=6, minReplicas=1, maxReplicas=3)  # KubeRay 3, Kueue 6
    [_, worker] = rayjob_kind.KIND.pod_templates(obj)
    assert worker.replicas == 6
    m.worker_group(obj)["suspend"] = True  # KubeRay creates none; Kueue still reserves 6
    assert rayjob_kind.KIND.pod_templates(obj)[1].replicas == 6
    assert subject_of(Context.of(request_for(obj, namespace="vision"), state, settings)).templates[1].replicas == 6


# --- Jobs: min(parallelism, completions) and Kueue's partial admission --------------------------

def test_a_job_runs_min_parallelism_completions_pods_so_16_by_6_is_24_gpus_and_admitted(tmp_path, capsys):
    code, out, err = cli(tmp_path, capsys, m.partial_job(parallelism=16, completions=6, minimum=None))
    assert code == 0, err
    assert yaml.safe_load(out)["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-4gpu"


def test_a_job_kueue_may_admit_partially_is_admitted_when_its_minimum_fits_the_queue(tmp_path, capsys):
    code, _, err = cli(tmp_path, capsys, m.partial_job(12, 12, minimum=None))
    assert code == 1 and "asks for 48 GPUs in total" in err and "at most 32 nvidia.com/gpu" in err
    code, out, err = cli(tmp_path, capsys, m.partial_job(12, 12, minimum="5"))
    assert code == 0, err
    assert "[gpu-total-fits-queue]" not in err


def test_a_partial_admission_minimum_that_still_exceeds_the_queue_is_denied_with_the_range(tmp_path, capsys):
    code, _, err = cli(tmp_path, capsys, m.partial_job(12, 12, minimum="9"))
    assert code == 1
    assert "at least 36 GPUs in total even at Kueue's partial-admission minimum (job: 9-12 pods x 4 GPUs)" in err


def test_a_fixed_size_profile_refuses_a_job_that_kueue_may_start_with_fewer_workers(tmp_path, capsys):
    job = m.partial_job(2, 2, minimum="1", gpus=8)  # h100-8gpu: mode fixed, workerCount 2
    code, _, err = cli(tmp_path, capsys, job)
    assert code == 1
    assert ('[workers-match-profile] metadata.annotations["kueue.x-k8s.io/job-min-parallelism"]: lets Kueue\'s '
            'partial admission start it with 1 of its 2 workers') in err
    del job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"]
    code, _, err = cli(tmp_path, capsys, job)
    assert code == 0, err


@pytest.mark.parametrize("minimum,says", [("12", '"should be between 0 and 11"'),
                                          ("five", '"should be between 0 and 11"'),
                                          ("0", "allowed: a whole number from 1 to 11")])
def test_a_partial_admission_annotation_kueue_would_reject_is_denied_in_kueues_words(tmp_path, capsys, minimum, says):
    code, _, err = cli(tmp_path, capsys, m.partial_job(12, 12, minimum=minimum))
    assert code == 1
    assert '[kueue-partial-admission] metadata.annotations["kueue.x-k8s.io/job-min-parallelism"]' in err
    assert says in err


# --- A running workload leaving its queue --------------------------------------------------------

@pytest.mark.parametrize("build", [m.classifier, m.kueue_ray_cluster], ids=["RayJob", "RayCluster"])
def test_removing_the_queue_label_from_a_running_workload_is_undone(build, tmp_path, capsys, state, settings, engine):
    running = m.stored(admitted(build(), state, settings, engine), "resnet-x7k2p")
    running["spec"]["suspend"] = False  # Kueue admitted it
    edited = copy.deepcopy(running)
    del edited["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]  # kubectl edit
    code, out, err = cli(tmp_path, capsys, edited, "-o", "patch", old=running)
    assert code == 0, err
    [entry] = json.loads(out)
    final = jsonpatch.apply_patch(edited, entry["patch"])
    assert final["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert {op["path"] for op in entry["patch"]} == {"/metadata/labels/kueue.x-k8s.io~1queue-name"}


def test_a_workload_that_reaches_validation_without_its_queue_label_is_denied_as_kueue_does(state, settings,
                                                                                            engine):
    running = m.stored(admitted(m.classifier(), state, settings, engine), "resnet-x7k2p")
    running["spec"]["suspend"] = False
    edited = copy.deepcopy(running)
    del edited["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]
    v = validate(request_for(edited, namespace="vision", operation="UPDATE", old=running), state, settings, engine)
    assert not v.allowed
    assert ('metadata.labels["kueue.x-k8s.io/queue-name"]: is removed; Kueue: "field is immutable"' in v.message
            and "allowed: 'vision-queue'" in v.message)


# --- KubeRay rules that fail late ----------------------------------------------------------------

def _head_restart(obj, policy):
    obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["restartPolicy"] = policy
    return obj


@pytest.mark.parametrize("change,field,says", [
    (lambda o: o["spec"].update(submissionMode="InteractiveMode", backoffLimit=2), "spec.backoffLimit",
     "BackoffLimit is incompatible with InteractiveMode"),
    (lambda o: o["spec"].update(submissionMode="SidecarMode", submitterPodTemplate={"spec": {
        "restartPolicy": "Never", "containers": [{"name": "submitter", "image": "rayproject/ray:2.9.0",
                                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}),
     "spec.submitterPodTemplate", "Currently, SidecarMode doesn't support SubmitterPodTemplate"),
    (lambda o: o["spec"].update(submissionMode="SidecarMode", submitterConfig={"backoffLimit": 1}),
     "spec.submitterConfig", "Currently, SidecarMode doesn't support SubmitterConfig"),
    (lambda o: (o["spec"].update(submissionMode="SidecarMode"), _head_restart(o, "Always")),
     "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy",
     "restartPolicy for head Pod should be Never or unset when using SidecarMode"),
], ids=["interactive-backoff", "sidecar-submitter-template", "sidecar-submitter-config", "sidecar-head-restart"])
def test_rayjob_specs_kuberay_rejects_only_in_its_controller_are_denied_at_apply(tmp_path, capsys, change, field,
                                                                                  says):
    obj = m.kueue_ray_job()
    change(obj)
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 1
    assert f"[rayjob-submission-mode] {field}:" in err and says in err


def test_sidecar_and_interactive_modes_kuberay_accepts_are_admitted(tmp_path, capsys):
    for mode, extra in (("SidecarMode", {}), ("InteractiveMode", {"backoffLimit": 0})):
        obj = m.kueue_ray_job()
        obj["spec"].update(submissionMode=mode, **extra)
        _head_restart(obj, "Never")
        code, _, err = cli(tmp_path, capsys, obj)
        assert code == 0, (mode, err)


# --- Kueue rules -----------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [m.kueue_ray_job, m.kueue_ray_cluster], ids=["RayJob", "RayCluster"])
def test_the_ray_autoscaler_under_kueue_is_denied_unless_the_job_is_elastic(build, tmp_path, capsys, monkeypatch):
    obj = build()
    spec = obj["spec"]["rayClusterSpec"] if obj["kind"] == "RayJob" else obj["spec"]
    spec["enableInTreeAutoscaling"] = True
    for g in spec["workerGroupSpecs"]:
        g.update(replicas=1, minReplicas=1, maxReplicas=3)
    code, _, err = cli(tmp_path, capsys, obj)
    where = "spec.rayClusterSpec" if obj["kind"] == "RayJob" else "spec"
    assert code == 1 and f"[kueue-autoscaling] {where}.enableInTreeAutoscaling" in err
    assert ("a kueue managed job can use autoscaling only when the ElasticJobsViaWorkloadSlices feature gate is on "
            "and the job is an elastic job") in err
    obj["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/elastic-job"] = "true"
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 1 and "turn on Kueue's ElasticJobsViaWorkloadSlices feature gate" in err  # the gate is off
    monkeypatch.setenv("TAUGATE_KUEUE_ELASTIC_JOBS", "true")
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 0, err


def test_a_resource_flavor_that_contradicts_the_profiles_node_selector_is_reported_at_apply(tmp_path, capsys):
    cluster = m.with_snapshot_change(tmp_path, m.contradicting_flavor)
    obj = m.set_worker_gpus(m.classifier(), 8)
    m.worker_group(obj).update(replicas=2, minReplicas=2, maxReplicas=2)
    code, _, err = cli(tmp_path, capsys, obj, cluster=cluster)
    assert code == 1
    assert "resolves to workload profile 'h100-8gpu', which is not Ready" in err
    assert ("flavor h100 doesn't match node affinity (nodeLabels[tau.azure.com/pool]: h100=interactive, "
            "the profile places on training)") in err
    # The same profile with a flavor that agrees is admitted.
    code, _, err = cli(tmp_path, capsys, obj)
    assert code == 0, err


def test_a_template_asking_only_for_mig_slices_never_gets_the_full_gpu_profile(tmp_path, capsys):
    code, out, err = cli(tmp_path, capsys, m.mig_job(1), cluster=MIG_CLUSTER)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert job["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "cpu-small"
    assert labels.GPU_CLASS not in job["metadata"]["labels"]
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    asked = m.mig_job(1)
    asked["metadata"]["labels"] = {labels.WORKLOAD_PROFILE: "h100-8gpu"}
    code, _, err = cli(tmp_path, capsys, asked, cluster=MIG_CLUSTER)
    assert code == 1
    assert ("asks only for MIG slices (nvidia.com/mig-1g.10gb) but asks for workload profile h100-8gpu "
            "(gpusPerWorker 8, gpuClass h100), a full-GPU profile") in err


def test_a_mig_workload_never_falls_back_to_a_full_gpu_workspace_default(settings):
    objs = read_objects(EXAMPLE_CLUSTER)
    cpu = next(p for p in m.pick(objs, "TauCluster", "cluster")["spec"]["workloadProfiles"] if p["name"] == "cpu-small")
    cpu["applicability"] = {"namespaces": ["vision"]}  # workspace nlp has only a100-4gpu, its default
    state = build_state(objs, settings)
    d = admit(m.mig_job(1), state=state, settings=settings, namespace="nlp")
    assert not d.allowed
    assert "would get the workspace default a100-4gpu (gpusPerWorker 4, gpuClass a100), a full-GPU profile" in d.message
    assert "allowed: a profile with gpusPerWorker 0 (none in this workspace)" in d.message


@pytest.mark.parametrize("slices,resource,says", [
    (8, "nvidia.com/mig-1g.10gb", "the largest node offering it has 7 allocatable"),
    (1, "nvidia.com/mig-2g.20gb", "no node offers nvidia.com/mig-2g.20gb"),
])
def test_mig_slices_are_checked_against_the_nodes_that_offer_them(tmp_path, capsys, slices, resource, says):
    code, _, err = cli(tmp_path, capsys, m.mig_job(slices, resource), cluster=MIG_CLUSTER)
    assert code == 1 and "[mig-slices-fit]" in err and says in err


def test_mig_slices_are_checked_against_the_queue_that_offers_them(tmp_path, capsys):
    job = m.in_workspace(m.mig_job(1), "nlp")
    code, _, err = cli(tmp_path, capsys, job, cluster=MIG_CLUSTER, namespace="nlp")
    assert code == 1 and 'Kueue: "resource nvidia.com/mig-1g.10gb unavailable in ClusterQueue"' in err
