"""The ValidatingAdmissionPolicy of taugate/admission_policy.py, judged with a CEL engine (the `cel`
package) as kube-apiserver evaluates it (matchConditions, then variables, then validations), on the
real samples of every kind it judges after taugate admitted them: none is refused. The same objects
as a hostile researcher writes them without taugate (its webhook down), or edits them after, are
refused with a message naming what is missing.
tests/e2e/test_the_api_server_keeps_taugates_rule_while_taugate_is_down.py proves it on kube-apiserver."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import cel
import pytest
import yaml

from taugate import admission_policy, labels
from taugate.kinds import KINDS, kind_of
from taugate.models import TauCluster
from taugate.settings import Settings
from taugate.unmanaged import unmanaged_kind_for
from taugate.webhook.review import admit
from tests.paths import (
    DATA,
    EXAMPLE_CLUSTER,
    EXAMPLE_RAYJOB,
    KUBERAY_SAMPLES,
    KUEUE_EXAMPLES,
    LWS_VLLM_GPU,
    PYTORCH_MNIST_NCCL,
    TRAINJOB_TORCH_DDP,
)
from tests.workload_samples import JOBSET_FINE_TUNE, load, runnable

KUEUE_SA = "system:serviceaccount:kueue-system:kueue-controller-manager"
RESEARCHER = "alice@contoso.com"
TAU_CLUSTER = next(d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d and d["kind"] == "TauCluster")


def _parameter(cluster: dict) -> dict:
    """The TauProfilePlacement the operator writes from ``cluster`` for the policy."""
    return admission_policy.parameters(TauCluster.model_validate(cluster))


def _namespace(state, name: str) -> dict:
    """The workspace namespace as taugate's operator labels it (controllers/taugrid/workspace.py)."""
    ws = state.workspace_for(name)
    return {"metadata": {"name": name, "labels": {labels.WORKSPACE: ws.metadata.name,
                                                  labels.KUEUE_QUEUE_NAME: ws.local_queue(state.default_queue)}}}


def _stored(value: Any) -> Any:
    """``value`` without null fields, as the API server hands it to a policy (it prunes a null that
    no schema marks nullable: a sample's empty ``metadata:``)."""
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def refusals(state, obj: dict, *, operation: str = "CREATE", old: dict | None = None, user: str = RESEARCHER,
             settings: Settings | None = None, params: dict | None = None) -> list[str] | None:
    """The messages of the validations ``obj`` fails, as the API server prints them; None when the
    policy does not judge the request (its resource rules or matchConditions)."""
    spec = admission_policy.policy(settings)["spec"]
    kind = kind_of(obj) or unmanaged_kind_for(obj["apiVersion"].rpartition("/")[0], obj["kind"])
    if kind is None or not any(kind.group in r["apiGroups"] and kind.resource in r["resources"]
                               for r in spec["matchConstraints"]["resourceRules"]):
        return None
    namespace = obj["metadata"]["namespace"]
    ctx: dict[str, Any] = {
        "request": {"operation": operation, "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
                    "namespace": namespace, "userInfo": {"username": user, "groups": []}},
        "object": _stored(obj), "oldObject": _stored(old), "namespaceObject": _namespace(state, namespace),
        "params": params or _parameter(TAU_CLUSTER)}
    if not all(cel.compile(c["expression"]).execute(ctx) for c in spec["matchConditions"]):
        return None
    variables: dict[str, Any] = {}
    for v in spec["variables"]:
        variables[v["name"]] = cel.compile(v["expression"]).execute({**ctx, "variables": variables})
    ctx["variables"] = variables
    return [cel.compile(v["messageExpression"]).execute(ctx) for v in spec["validations"]
            if not cel.compile(v["expression"]).execute(ctx)]


def _samples() -> Iterator[Any]:
    for root in (KUBERAY_SAMPLES, KUEUE_EXAMPLES, DATA / "kueue"):
        for path in sorted(root.rglob("*.yaml")):
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
                if isinstance(doc, dict) and kind_of(doc) is not None and isinstance(doc.get("spec"), dict):
                    yield pytest.param(doc, id=f"{path.name}#{i}")
    for path, gpus in ((LWS_VLLM_GPU, 1), (PYTORCH_MNIST_NCCL, 1), (JOBSET_FINE_TUNE, 4), (EXAMPLE_RAYJOB, None),
                       (TRAINJOB_TORCH_DDP, None)):
        yield pytest.param(runnable(load(path), gpus), id=path.name)


SAMPLES = list(_samples())


def _gpu(obj: dict) -> bool:
    return "nvidia.com/gpu" in str(obj)


def _admitted(doc: dict, state, settings) -> dict | None:
    """``doc`` in namespace vision as taugate admits it (following a queue denial's fix), named as
    the API server names it; None when taugate refuses it."""
    obj = copy.deepcopy(doc)
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = "vision"
    meta.get("labels", {}).pop(labels.KUEUE_QUEUE_NAME, None)  # the samples name their own LocalQueues
    decision = admit(obj, state=state, settings=settings, namespace="vision")
    if not decision.allowed:
        return None
    final = decision.object
    final["metadata"].setdefault("name", final["metadata"].get("generateName", "") + "x7k2p")
    return final


def test_the_sample_corpus_holds_every_kind_the_policy_judges_with_gpus():
    judged = {k.kind for k in KINDS if k.cel_pod_templates}
    assert {p.values[0]["kind"] for p in SAMPLES if _gpu(p.values[0])} >= judged - {"Pod", "Deployment",
                                                                                     "StatefulSet", "RayService"}
    assert len(SAMPLES) >= 40


@pytest.mark.parametrize("doc", SAMPLES)
def test_what_taugate_admits_the_api_servers_policy_never_refuses_and_the_raw_gpu_object_it_does(doc, state, settings):
    admitted = _admitted(doc, state, settings)
    if admitted is not None:
        assert refusals(state, admitted) in (None, []), admitted["metadata"]["name"]
        unsuspended = copy.deepcopy(admitted)  # Kueue's own update, once the Workload is admitted
        unsuspended["metadata"].setdefault("labels", {})["kueue.x-k8s.io/podset"] = "main"
        assert refusals(state, unsuspended, operation="UPDATE", old=admitted, user=KUEUE_SA) is None
        # A researcher's own later update (an annotation) passes too.
        touched = copy.deepcopy(admitted)
        touched["metadata"].setdefault("annotations", {})["note"] = "rerun"
        assert refusals(state, touched, operation="UPDATE", old=admitted) in (None, [])
    raw = copy.deepcopy(doc)
    raw.setdefault("metadata", {})["namespace"] = "vision"
    raw["metadata"].setdefault("name", "raw")
    found = refusals(state, raw)
    if _gpu(raw):  # every GPU sample (a container's nvidia.com/gpu) is judged and refused without taugate
        assert found and found[0].startswith(f"taugate has not admitted {raw['kind']} {raw['metadata']['name']} "
                                             f"in workspace namespace vision: it asks for GPUs"), found
        assert all("taugate's admission webhook may be unavailable" in r for r in found)
    else:
        assert found in (None, [])


@pytest.fixture
def admitted_rayjob(state, settings) -> dict:
    admitted = _admitted(yaml.safe_load(EXAMPLE_RAYJOB.read_text()), state, settings)
    assert admitted is not None
    return admitted


def test_a_hostile_researcher_copying_an_admitted_object_elsewhere_is_refused(admitted_rayjob, state):
    name = admitted_rayjob["metadata"]["name"]
    other_queue = copy.deepcopy(admitted_rayjob)
    other_queue["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] = "nlp-queue"
    assert refusals(state, other_queue) == [
        f'RayJob {name} asks for GPUs but is not queued in its workspace\'s LocalQueue: '
        f'metadata.labels["{labels.KUEUE_QUEUE_NAME}"] is "nlp-queue"; allowed: "vision-queue" (the label of '
        f"namespace vision){admission_policy.UNAVAILABLE}"]
    renamed = copy.deepcopy(admitted_rayjob)  # the record of one object on another
    renamed["metadata"]["name"] = "another"
    assert refusals(state, renamed)[0].startswith("taugate has not admitted RayJob another")
    other_run = copy.deepcopy(admitted_rayjob)
    other_run["metadata"]["labels"][labels.RUN_ID] = "f" * 24
    assert refusals(state, other_run)[0].startswith(f"taugate has not admitted RayJob {name}")
    other_workspace = copy.deepcopy(admitted_rayjob)
    other_workspace["metadata"]["labels"][labels.WORKSPACE] = "nlp"
    assert 'has tau.azure.com/workspace="nlp" in namespace vision of workspace "vision"' in \
        refusals(state, other_workspace)[0]


def test_a_hand_edited_placement_or_an_update_dropping_the_run_id_is_refused(admitted_rayjob, state):
    name = admitted_rayjob["metadata"]["name"]
    moved = copy.deepcopy(admitted_rayjob)
    for g in moved["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        g["template"]["spec"]["nodeSelector"].pop(labels.GPU_CLASS)
    for operation, old in (("CREATE", None), ("UPDATE", admitted_rayjob)):
        found = refusals(state, moved, operation=operation, old=old)
        assert found and found[0].startswith(f'RayJob {name} is not placed as workload profile "'), found
    unlabelled = copy.deepcopy(admitted_rayjob)
    del unlabelled["metadata"]["labels"][labels.RUN_ID]
    assert refusals(state, unlabelled, operation="UPDATE", old=admitted_rayjob)[0].startswith(
        f"this update of RayJob {name} changes or removes its {labels.RUN_ID}")
    unknown = copy.deepcopy(admitted_rayjob)
    unknown["metadata"]["labels"][labels.WORKLOAD_PROFILE] = "made-up"
    assert any('under workload profile "made-up"' in r for r in refusals(state, unknown))
    # An object stored before taugate governed the namespace (no run-id) keeps working on update.
    before = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    before["metadata"]["namespace"] = "vision"
    assert refusals(state, before, operation="UPDATE", old=before) == []


def test_device_access_without_a_request_is_refused_unless_the_platform_governs_it(state):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": "vision"},
           "spec": {"containers": [{"name": "c", "image": "cuda", "env": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                                          "value": "all"}]}]}}
    assert refusals(state, pod)[0].startswith("Pod cpu reaches GPUs without asking for them")
    for value in ("none", " VOID ", ""):
        quiet = copy.deepcopy(pod)
        quiet["spec"]["containers"][0]["env"][0]["value"] = value
        assert refusals(state, quiet) == []
    host = copy.deepcopy(pod)
    host["spec"]["containers"][0].pop("env")
    host["spec"]["volumes"] = [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]
    assert refusals(state, host)
    assert refusals(state, pod, settings=Settings(device_access="govern")) == []


def test_a_node_name_or_a_system_priority_class_is_refused_on_create_as_taugate_refuses_them(state):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": "vision"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert refusals(state, pod) == []
    for field, value in (("nodeName", "gpu-node-1"), ("priorityClassName", "system-node-critical")):
        bypass = copy.deepcopy(pod)
        bypass["spec"][field] = value
        assert refusals(state, bypass)[0].startswith("Pod cpu names a nodeName or a system- priorityClassName")


def test_a_trusted_controllers_child_or_update_is_not_judged_and_anyone_elses_is(state):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-x7k2p", "namespace": "vision", "labels": {labels.RUN_ID: "0" * 24},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u",
                             "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    for user in Settings().controller_users:
        assert refusals(state, pod, user=user) is None
    assert refusals(state, pod)  # a researcher writing an owner reference is judged as a root
    orphan = copy.deepcopy(pod)
    orphan["metadata"]["ownerReferences"][0]["controller"] = False
    assert refusals(state, orphan, user="system:serviceaccount:kube-system:job-controller")


def test_render_cel_prints_the_policy_and_binding_the_operator_installs(capsys):
    from taugate.cli import main

    assert main(["policy", "render-cel"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert docs == admission_policy.documents(Settings())
    assert docs[1]["spec"]["paramRef"] == {"name": admission_policy.NAME, "parameterNotFoundAction": "Deny"}


GPU_LIMITS = {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}}
CPU_ONLY = {"requests": {"cpu": "1", "memory": "1Gi"}}


def _deployment(name: str, resources: dict, **meta) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "vision", **meta},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "cuda", "resources": copy.deepcopy(resources)}]}}}}


def _webhook_allows(obj: dict, state, settings, **request) -> bool:
    return admit(copy.deepcopy(obj), state=state, settings=settings, namespace="vision", **request).allowed


def test_an_update_giving_gpus_to_an_object_created_without_any_is_refused_as_taugate_refuses_it(state, settings):
    cpu = _deployment("notebook", CPU_ONLY)
    stored = admit(copy.deepcopy(cpu), state=state, settings=settings, namespace="vision").object
    assert labels.RUN_ID not in stored["metadata"].get("labels", {})  # left alone: no GPUs, no run-id
    gpu = copy.deepcopy(stored)
    gpu["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(GPU_LIMITS)
    assert not _webhook_allows(gpu, state, settings, operation="UPDATE", old=stored)
    assert refusals(state, gpu, operation="UPDATE", old=stored) == [
        "this update gives GPUs to Deployment notebook, which was created without any, so with no queue, placement "
        f"or run-id; fix: delete it and create it again with the GPUs (kubectl replace --force -f FILE)"
        f"{admission_policy.UNAVAILABLE}"]
    scaled = copy.deepcopy(stored)  # anything else on the CPU object passes
    scaled["spec"]["replicas"] = 3
    assert refusals(state, scaled, operation="UPDATE", old=stored) == []


def test_an_admitted_workload_keeps_its_profile(admitted_rayjob, state):
    name = admitted_rayjob["metadata"]["name"]
    to_cpu = copy.deepcopy(admitted_rayjob)  # a CPU profile has no placement to check: the label is pinned
    to_cpu["metadata"]["labels"][labels.WORKLOAD_PROFILE] = "cpu-small"
    assert refusals(state, to_cpu, operation="UPDATE", old=admitted_rayjob) == [
        f"this update of RayJob {name} changes or removes its {labels.RUN_ID}, {labels.KUEUE_QUEUE_NAME} or "
        f"{labels.WORKLOAD_PROFILE} label or its {labels.ADMISSION_RECORD} record, which an admitted workload keeps"
        f"{admission_policy.UNAVAILABLE}"]
    # GPUs per pod against the profile are the policy library's (gpu-per-pod-within-profile), whose
    # enforcement the platform team sets in policies/enforcement.yaml: not the API server's.
    bigger = copy.deepcopy(admitted_rayjob)
    for g in bigger["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        for c in g["template"]["spec"]["containers"]:
            c["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert refusals(state, bigger, operation="UPDATE", old=admitted_rayjob) == []


def test_a_profile_changed_after_admission_refuses_no_update_that_leaves_the_placement_alone(admitted_rayjob, state,
                                                                                             settings):
    moved = copy.deepcopy(TAU_CLUSTER)  # the platform team moves the profile to another GPU class
    for p in moved["spec"]["workloadProfiles"]:
        p["gpuClass"] = "a100"
    labelled = copy.deepcopy(admitted_rayjob)
    labelled["metadata"]["labels"]["team"] = "vision"
    deleting = copy.deepcopy(admitted_rayjob)
    deleting["metadata"].update(deletionTimestamp="2026-12-05T10:00:00Z", finalizers=[])
    image = copy.deepcopy(admitted_rayjob)  # kubectl set image: the webhook excuses what was stored
    image["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "ray:2"
    for update in (labelled, deleting, image):
        assert refusals(state, update, operation="UPDATE", old=admitted_rayjob, params=_parameter(moved)) == []
    placement = copy.deepcopy(admitted_rayjob)  # a placement edit is judged by the profile as it is now
    placement["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]["zone"] = "b"
    assert refusals(state, placement, operation="UPDATE", old=admitted_rayjob, params=_parameter(moved))[0].startswith(
        f'RayJob {admitted_rayjob["metadata"]["name"]} is not placed as workload profile')


def test_anyones_update_of_a_child_is_left_to_its_parent_as_taugate_leaves_it(state, settings):
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1", "controller": True}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-x7k2p", "namespace": "vision", "labels": {labels.RUN_ID: "0" * 24}, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": copy.deepcopy(GPU_LIMITS)}]}}
    labelled = copy.deepcopy(pod)
    labelled["metadata"]["labels"]["debug"] = "true"
    orphaned = copy.deepcopy(pod)  # the garbage collector orphaning it
    orphaned["metadata"]["ownerReferences"][0]["controller"] = False
    assert _webhook_allows(labelled, state, settings, operation="UPDATE", old=pod)
    assert refusals(state, labelled, operation="UPDATE", old=pod) == []
    assert refusals(state, orphaned, operation="UPDATE", old=pod) == []
    cron = copy.deepcopy(pod)  # a Job a CronJob makes is no workload's child: judged when created
    cron["metadata"]["ownerReferences"] = [{**owner, "apiVersion": "batch/v1", "kind": "CronJob"}]
    cron["metadata"]["labels"] = {}
    assert refusals(state, cron, user="system:serviceaccount:kube-system:cronjob-controller")


@pytest.mark.parametrize("kind", ["ReplicaSet", "DaemonSet", "ReplicationController"])
def test_a_gpu_workload_of_an_unmanaged_kind_is_refused_unless_a_deployment_made_it(kind, state, settings):
    obj = _deployment("bare", GPU_LIMITS)
    obj.update(kind=kind, apiVersion="v1" if kind == "ReplicationController" else "apps/v1")
    assert not _webhook_allows(obj, state, settings)
    assert refusals(state, obj)[0].startswith(f"{kind} bare asks for GPUs but taugate does not manage that kind")
    cpu = _deployment("bare", CPU_ONLY)
    cpu.update(kind=kind, apiVersion=obj["apiVersion"])
    assert refusals(state, cpu) == []
    assert refusals(state, obj, operation="UPDATE", old=cpu)  # GPUs added later
    assert refusals(state, settings=Settings(unmanaged_gpu_workloads="warn"), obj=obj) == []
    if kind == "ReplicaSet":
        child = copy.deepcopy(obj)
        child["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d",
                                                 "uid": "u-2", "controller": True}]
        assert refusals(state, child, user="system:serviceaccount:kube-system:deployment-controller") is None


def test_every_other_path_to_a_gpu_is_judged_as_taugate_judges_it(state, settings):
    dra = _deployment("dra", {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}})
    assert not _webhook_allows(dra, state, settings)
    assert refusals(state, dra)[0].startswith("taugate has not admitted Deployment dra")
    cdi = _deployment("cdi", CPU_ONLY)
    cdi["spec"]["template"]["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
    assert not _webhook_allows(cdi, state, settings)
    assert refusals(state, cdi)[0].startswith("Deployment cdi reaches GPUs without asking for them")
    for path in ("//dev/nvidia0", "/dev/./nvidia0", "/tmp/../dev", "/dev/nvidia0"):
        host = _deployment("host", CPU_ONLY)
        host["spec"]["template"]["spec"]["volumes"] = [{"name": "d", "hostPath": {"path": path}}]
        assert not _webhook_allows(host, state, settings), path
        assert refusals(state, host)[0].startswith("Deployment host reaches GPUs"), path
    for value, reaches in (("\u00a0none", True), ("\tVoid\n", False), ("all", True)):
        env = _deployment("env", CPU_ONLY)
        env["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
        assert _webhook_allows(env, state, settings) is not reaches, value
        assert bool(refusals(state, env)) is reaches, value


def test_a_gpu_submitter_on_an_existing_ray_cluster_is_refused_by_both_as_it_would_run_unqueued(state, settings):
    selector = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "on-cluster", "namespace": "vision"},
                "spec": {"entrypoint": "python x.py", "clusterSelector": {"ray.io/cluster": "shared"},
                         "submitterPodTemplate": {"spec": {"restartPolicy": "Never", "containers": [
                             {"name": "ray-job-submitter", "image": "ray", "resources": copy.deepcopy(GPU_LIMITS)}]}}}}
    assert refusals(state, selector)[0].startswith("taugate has not admitted RayJob on-cluster")
    refused = admit(copy.deepcopy(selector), state=state, settings=settings, namespace="vision")
    assert [v.field for v in refused.violations] == ["spec.submitterPodTemplate"], refused.violations
    assert "Kueue does not queue" in refused.violations[0].message
    cpu = copy.deepcopy(selector)
    cpu["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["resources"] = copy.deepcopy(CPU_ONLY)
    admitted = admit(cpu, state=state, settings=settings, namespace="vision")
    assert admitted.allowed and refusals(state, admitted.object) == []


def test_an_owner_reference_a_researcher_wrote_does_not_make_gpus_added_later_a_childs_business(state, settings):
    forged = _deployment("payload", CPU_ONLY, ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "decoy", "uid": "u-9", "controller": True}])
    stored = admit(copy.deepcopy(forged), state=state, settings=settings, namespace="vision").object
    gpu = copy.deepcopy(stored)
    gpu["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(GPU_LIMITS)
    assert not _webhook_allows(gpu, state, settings, operation="UPDATE", old=stored)
    assert refusals(state, gpu, operation="UPDATE", old=stored)[0].startswith(
        "this update gives GPUs to Deployment payload")
    labelled = copy.deepcopy(stored)  # its templates untouched, it stays its owner's business
    labelled["metadata"].setdefault("labels", {})["x"] = "y"
    assert _webhook_allows(labelled, state, settings, operation="UPDATE", old=stored)
    assert refusals(state, labelled, operation="UPDATE", old=stored) == []


@pytest.mark.parametrize("bad", [
    {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
    {"securityContext": {"privileged": True}},
    {"nodeName": "gpu-node-1"},
    {"priorityClassName": "system-node-critical"},
], ids=["device-variable", "privileged", "node-name", "system-priority"])
def test_what_a_create_may_not_have_an_update_may_not_add_and_an_unmanaged_kind_may_not_have(bad, state, settings):
    cpu = admit(_deployment("web", CPU_ONLY), state=state, settings=settings, namespace="vision").object
    edited = copy.deepcopy(cpu)
    spec = edited["spec"]["template"]["spec"]
    for key, value in bad.items():
        (spec["containers"][0] if key in ("env", "securityContext") else spec)[key] = value
    assert not _webhook_allows(edited, state, settings, operation="UPDATE", old=cpu)
    assert refusals(state, edited, operation="UPDATE", old=cpu)
    assert refusals(state, edited, operation="UPDATE", old=edited) == []  # stored so: not new, not refused
    bare = copy.deepcopy(edited)
    bare.update(kind="DaemonSet")
    assert not _webhook_allows(bare, state, settings)
    assert refusals(state, bare)


def test_kueues_scheduling_gate_stays_until_kueue_lifts_it(state, settings):
    gated = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "vision"},
             "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}], "containers": [
                 {"name": "c", "image": "cuda", "resources": copy.deepcopy(GPU_LIMITS)}]}}
    lifted = copy.deepcopy(gated)
    lifted["spec"]["schedulingGates"] = []
    assert not _webhook_allows(lifted, state, settings, operation="UPDATE", old=gated)
    assert refusals(state, lifted, operation="UPDATE", old=gated) == [
        "this update removes Kueue's scheduling gate from Pod p, which Kueue lifts when it admits the pod (taugate "
        f"refuses anyone else's removal){admission_policy.UNAVAILABLE}"]
    assert refusals(state, lifted, operation="UPDATE", old=gated, user=KUEUE_SA) is None


def test_a_train_job_that_does_not_state_its_size_is_refused(state, settings):
    job = load(TRAINJOB_TORCH_DDP)
    job["metadata"]["namespace"] = "vision"
    del job["spec"]["trainer"]["resourcesPerNode"]  # its GPUs would come from the runtime
    assert not _webhook_allows(job, state, settings)
    assert refusals(state, job) == [
        "TrainJob torch-ddp does not state its size (spec.trainer.numNodes and spec.trainer.resourcesPerNode), "
        f"which taugate needs in a workspace to count its GPUs{admission_policy.UNAVAILABLE}"]


def test_a_cpu_pod_template_that_puts_itself_on_gpu_nodes_is_refused(state, settings):
    for how in ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "nodeSelector": {"tau.azure.com/gpu-class": "h100"}},
                {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"nvidia.com/gpu.present": "true"}}):
        on_gpus = _deployment("sneaky", CPU_ONLY)
        on_gpus["spec"]["template"]["spec"].update(copy.deepcopy(how))
        assert not _webhook_allows(on_gpus, state, settings)
        assert refusals(state, on_gpus)[0].startswith("Deployment sneaky has a pod template that asks for no GPU")
    elsewhere = _deployment("web", CPU_ONLY)
    elsewhere["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "false"}
    assert refusals(state, elsewhere) == []


def test_zero_gpus_are_no_gpus_for_both(state, settings):
    for zero in (0, "0", "0m", "0.0"):
        cpu = _deployment("web", {"limits": {"nvidia.com/gpu": zero}, "requests": {"cpu": "1", "memory": "1Gi"}})
        decision = admit(copy.deepcopy(cpu), state=state, settings=settings, namespace="vision")
        assert decision.allowed and labels.RUN_ID not in decision.object["metadata"].get("labels", {}), zero
        assert refusals(state, decision.object) == [], zero
