"""Every GPU workload a researcher can create in a workspace is governed, through the whole stack
(``tests/e2e/stack``: the real API server, Kueue v0.17 with its pod, deployment, statefulset,
jobset, kubeflow, rayservice and leaderworkerset integrations, the KubeRay operator, kwok):

- each kind's own sample from its Go module (made to ask for GPUs where it does not), created
  with kubectl by a researcher of the ``vision`` workspace, is stored with the workspace's queue
  label, one run-id on the object and on every pod template, and the profile's placement on the
  GPU templates only; Kueue then queues it the way its integration does;
- a bare GPU Pod is gated by Kueue's pod integration, gets a Workload, is admitted and bound by
  kube-scheduler to a kwok GPU Node;
- the pods kube-controller-manager makes for a GPU Deployment carry the placement and the
  Deployment's run-id, not one of their own;
- a GPU DaemonSet or ReplicaSet (kinds taugate does not manage) is refused, naming the kinds it
  manages; a CPU-only Deployment passes unchanged; nothing outside workspaces is touched.

The tests share the one stack with the other files of the tier: everything made here is deleted
at the end of the module (and its pods gone), so the quota and the GPU Nodes are free again.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from tests import upstream
from tests.e2e.stack import Stack
from tests.e2e.workloads import (
    GPU_CLASS_SELECTOR,
    QUEUE,
    RUN_ID,
    WORKSPACE,
    WORKSPACE_QUEUE,
    admitted_problems,
    pod_templates,
    template_gpus,
)
from tests.paths import DATA, JOBSET, KUBEFLOW_EXAMPLES, KUBERAY_SAMPLES, LAMMPS_TRAINJOB, LWS_EXAMPLES, TORCH_RUNTIME

KUBERNETES = upstream.module_dir("kubernetes")
"""k8s.io/kubernetes at the pinned version: ``test/fixtures/doc-yaml`` and ``hack/testdata`` hold
the Kubernetes docs' and kubectl's own Pod, Deployment, StatefulSet, ReplicaSet and DaemonSet."""
GATE = "kueue.x-k8s.io/admission"
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
OUTSIDE = "e2e-outside"
"""A namespace that is no workspace."""
RESEARCHER_GROUP = "vision-researchers"


# ---- the samples ---------------------------------------------------------------------------------
def _yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _first(path: Path, kind: str) -> dict:
    return next(d for d in _yaml_docs(path) if d.get("kind") == kind)


def _markdown_yaml(path: Path, kind: str) -> dict:
    """The first ```yaml block of a Markdown file that holds a ``kind`` object."""
    for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S):
        docs = [d for d in yaml.safe_load_all(block) if isinstance(d, dict)]
        for d in docs:
            if d.get("kind") == kind:
                return d
    raise AssertionError(f"no {kind} in the YAML blocks of {path}")


def _ask_for_gpus(template: dict, gpus: int = 1) -> None:
    """Make every container of ``template`` ask for ``gpus`` GPUs (requests = limits, as the
    device plugin's extended resource requires)."""
    for c in template["spec"]["containers"]:
        res = c.setdefault("resources", {})
        res.setdefault("limits", {})[GPU] = str(gpus)
        res.setdefault("requests", {})[GPU] = str(gpus)


def _with_requests(obj: dict) -> dict:
    """``obj`` with cpu and memory requests on every container of its pod templates that has
    none, as the policy library requires (``requests-required``) and its denial says to fix: 4
    cpu and 16Gi on a GPU container, 1 cpu and 1Gi on a CPU-only one."""
    for _, tpl in pod_templates(obj):
        for c in tpl["spec"]["containers"]:
            requests = c.setdefault("resources", {}).setdefault("requests", {})
            gpu = GPU in requests or GPU in (c["resources"].get("limits") or {})
            requests.setdefault("cpu", "4" if gpu else "1")
            requests.setdefault("memory", "16Gi" if gpu else "1Gi")
    return obj


def _named(obj: dict, name: str, namespace: str = WORKSPACE) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**{k: v for k, v in obj["metadata"].items() if k not in ("generateName", "namespace")},
                       "name": name, "namespace": namespace}
    return obj


def cpu_deployment(name: str, namespace: str = WORKSPACE) -> dict:
    """The Kubernetes docs' nginx Deployment (``test/fixtures/doc-yaml/user-guide/deployment.yaml``):
    3 CPU-only pods, selected by ``name: <name>`` (the sample's ``name: nginx`` would make every
    Deployment made from it select the others' pods)."""
    obj = _named(_first(KUBERNETES / "test/fixtures/doc-yaml/user-guide/deployment.yaml", "Deployment"), name,
                 namespace)
    obj["spec"]["selector"]["matchLabels"]["name"] = name
    obj["spec"]["template"]["metadata"]["labels"]["name"] = name
    return obj


def gpu_deployment(name: str, namespace: str = WORKSPACE, replicas: int = 2) -> dict:
    """``cpu_deployment`` with ``replicas`` pods of 1 GPU each."""
    obj = cpu_deployment(name, namespace)
    obj["spec"]["replicas"] = replicas
    _ask_for_gpus(obj["spec"]["template"])
    return obj


def gpu_pod(name: str, namespace: str = WORKSPACE) -> dict:
    """The Kubernetes docs' nginx Pod (``test/fixtures/doc-yaml/user-guide/pod.yaml``) asking for 1 GPU."""
    obj = _named(_first(KUBERNETES / "test/fixtures/doc-yaml/user-guide/pod.yaml", "Pod"), name, namespace)
    _ask_for_gpus(obj)
    return obj


def gpu_statefulset() -> dict:
    """kubectl's rolling-update StatefulSet (``hack/testdata/rollingupdate-statefulset.yaml``),
    2 replicas of 1 GPU."""
    obj = _named(_first(KUBERNETES / "hack/testdata/rollingupdate-statefulset.yaml", "StatefulSet"), "gpu-statefulset")
    obj["spec"]["replicas"] = 2
    _ask_for_gpus(obj["spec"]["template"])
    return obj


def gpu_jobset() -> dict:
    """JobSet's driver-and-workers example (``keps/104-StartupPolicy/README.md``, story 1): a CPU
    driver Job and a workers Job of 2 pods, here of 1 GPU each."""
    obj = _named(_markdown_yaml(JOBSET / "keps/104-StartupPolicy/README.md", "JobSet"), "gpu-jobset")
    workers = next(r for r in obj["spec"]["replicatedJobs"] if r["name"] == "workers")
    _ask_for_gpus(workers["template"]["spec"]["template"])
    return obj


def gpu_leaderworkerset() -> dict:
    """LeaderWorkerSet's sample (``docs/examples/sample/lws.yaml``): groups of 4 pods made from one
    worker template (the leader too, as it has no leader template); here 1 group, of 1 GPU a pod.
    LeaderWorkerSet's own webhook does not run here: the rollout strategy it defaults, which its
    CRD requires, is written out (``pkg/webhooks/leaderworkerset_webhook.go``, ``Default``)."""
    obj = _named(_first(LWS_EXAMPLES / "sample" / "lws.yaml", "LeaderWorkerSet"), "gpu-lws")
    obj["spec"]["replicas"] = 1
    obj["spec"].setdefault("rolloutStrategy", {"type": "RollingUpdate"})
    _ask_for_gpus(obj["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    return obj


def gpu_pytorchjob() -> dict:
    """The training-operator's NCCL MNIST PyTorchJob (``examples/pytorch/mnist/v1/
    pytorch_job_mnist_nccl.yaml``): a master and a worker of 1 GPU each."""
    return _named(_first(KUBEFLOW_EXAMPLES / "pytorch/mnist/v1/pytorch_job_mnist_nccl.yaml", "PyTorchJob"),
                  "gpu-pytorchjob")


def gpu_rayservice() -> dict:
    """KubeRay's text-summarizer RayService (``config/samples/ray-service.text-summarizer.yaml``):
    a CPU head and 1 worker of 1 GPU."""
    return _named(_first(KUBERAY_SAMPLES / "ray-service.text-summarizer.yaml", "RayService"), "gpu-rayservice")


SAMPLES = {
    "Pod": lambda: _with_requests(gpu_pod("gpu-pod-sample")),
    "Deployment": lambda: _with_requests(gpu_deployment("gpu-deployment-sample", replicas=1)),
    "StatefulSet": lambda: _with_requests(gpu_statefulset()),
    "JobSet": lambda: _with_requests(gpu_jobset()),
    "LeaderWorkerSet": lambda: _with_requests(gpu_leaderworkerset()),
    "PyTorchJob": lambda: _with_requests(gpu_pytorchjob()),
    "RayService": lambda: _with_requests(gpu_rayservice()),
}
"""Each new kind's GPU sample, built from its own module, with the cpu and memory requests the
policy library requires (``_with_requests``)."""
RESOURCE = {"Pod": "pod", "Deployment": "deployment.apps", "StatefulSet": "statefulset.apps",
            "JobSet": "jobsets.jobset.x-k8s.io", "LeaderWorkerSet": "leaderworkersets.leaderworkerset.x-k8s.io",
            "PyTorchJob": "pytorchjobs.kubeflow.org", "RayService": "rayservices.ray.io",
            "TrainJob": "trainjobs.trainer.kubeflow.org",
            "DaemonSet": "daemonset.apps", "ReplicaSet": "replicaset.apps"}


# ---- helpers -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(whole_stack: Stack):
    """The whole stack, and at the end every object this module made deleted and its pods gone."""
    cp = whole_stack.cp
    cp.kubectl("create", "namespace", OUTSIDE)
    try:
        yield whole_stack
    finally:
        # The workloads (the garbage collector deletes their pods: a pod deleted under a live
        # ReplicaSet would be replaced), then the bare Pods, which no controller owns.
        for ns in (WORKSPACE, OUTSIDE):
            cp.kubectl("delete", ",".join(RESOURCE[k] for k in RESOURCE if k != "Pod"), "-n", ns, "-l",
                       "e2e.taugate/kinds=1", "--ignore-not-found", "--wait=false", check=False)
            bare = [p["metadata"]["name"] for p in cp.get_json("pods", "-n", ns, "-l", "e2e.taugate/kinds=1")["items"]
                    if not p["metadata"].get("ownerReferences")]
            if bare:
                cp.kubectl("delete", "pod", *bare, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
        cp.kubectl("delete", "namespace", OUTSIDE, "--wait=false", check=False)
        whole_stack.wait_for("the pods of this module's workloads to be gone",
                             lambda: not cp.get_json("pods", "-n", WORKSPACE, "-l", "e2e.taugate/kinds=1")["items"],
                             180)


def _mark(obj: dict) -> dict:
    """``obj`` and its pod templates labelled ``e2e.taugate/kinds=1``, for the module's cleanup."""
    obj["metadata"].setdefault("labels", {})["e2e.taugate/kinds"] = "1"
    for _, tpl in pod_templates(obj):
        tpl.setdefault("metadata", {}).setdefault("labels", {})["e2e.taugate/kinds"] = "1"
    return obj


def researcher(stack: Stack) -> Path:
    """A kubeconfig of a researcher of the ``vision`` workspace (group ``vision-researchers``)."""
    return stack.cp.user_kubeconfig("alice", (RESEARCHER_GROUP,))


def create(stack: Stack, obj: dict, *, check: bool = True, as_researcher: bool = True):
    """``kubectl create -f -`` of ``obj`` as the researcher (the admin outside workspaces, or
    when not ``as_researcher``)."""
    kubeconfig = researcher(stack) if as_researcher and obj["metadata"]["namespace"] == WORKSPACE else None
    return stack.cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(_mark(obj)), kubeconfig=kubeconfig,
                            check=check)


def get(stack: Stack, kind: str, name: str, namespace: str = WORKSPACE) -> dict:
    return stack.cp.get_json(RESOURCE[kind], name, "-n", namespace)


def workloads_of(stack: Stack, kind: str, name: str, namespace: str = WORKSPACE) -> list[dict]:
    """Kueue's Workloads owned by the ``kind`` object ``name``."""
    return [w for w in stack.cp.get_json("workloads.kueue.x-k8s.io", "-n", namespace)["items"]
            if any(r["kind"] == kind and r["name"] == name for r in w["metadata"].get("ownerReferences") or [])]


def _condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def admitted(workload: dict) -> bool:
    return _condition(workload, "Admitted").get("status") == "True"


def placement_problems(template: dict) -> list[str]:
    """What a GPU pod (template) lacks of the ``vision`` profile's placement (h100 class and the
    GPU toleration), or what a CPU-only one carries of it."""
    spec = template.get("spec") or {}
    selector, tolerations = spec.get("nodeSelector") or {}, spec.get("tolerations") or []
    if template_gpus(template):
        problems = [] if selector.get(GPU_CLASS_SELECTOR) == "h100" else [f"nodeSelector {selector}"]
        return problems + ([] if GPU_TOLERATION in tolerations else [f"tolerations {tolerations}"])
    return [f"CPU-only pod placed on {selector[GPU_CLASS_SELECTOR]!r}"] if GPU_CLASS_SELECTOR in selector else []


def untouched_problems(stored: dict) -> list[str]:
    """What taugate left on an object it must not touch (outside workspaces, or a CPU-only
    object of a kind it does not queue): a run-id, a queue label, the GPU class selector."""
    problems = []
    labels = stored["metadata"].get("labels") or {}
    problems += [f"label {k}" for k in (RUN_ID, QUEUE) if k in labels]
    for path, tpl in pod_templates(stored):
        tpl_labels = (tpl.get("metadata") or {}).get("labels") or {}
        problems += [f"{path or 'pod'}: label {k}" for k in (RUN_ID, QUEUE) if k in tpl_labels and path]
        if GPU_CLASS_SELECTOR in ((tpl.get("spec") or {}).get("nodeSelector") or {}):
            problems.append(f"{path or 'pod'}: nodeSelector {GPU_CLASS_SELECTOR}")
    return problems


# ---- each kind from its own sample ---------------------------------------------------------------
@pytest.mark.parametrize("kind", list(SAMPLES))
def test_each_gpu_kind_from_its_own_sample_is_stored_with_the_queue_label_one_run_id_and_gpu_only_placement(
        stack, kind):
    obj = SAMPLES[kind]()
    assert any(template_gpus(t) for _, t in pod_templates(obj)), "the sample must ask for GPUs"
    created = json.loads(create(stack, obj).stdout)
    stored = get(stack, kind, created["metadata"]["name"])
    assert admitted_problems(stored, suspended=False) == [], json.dumps(stored, indent=1)
    for path, tpl in pod_templates(stored):
        assert placement_problems(tpl) == [], f"{kind} {path}"


def test_kueue_suspends_a_jobset_and_a_pytorchjob_until_it_admits_their_workload(stack):
    for kind, name, suspend in (("JobSet", "gpu-jobset", ("spec", "suspend")),
                                ("PyTorchJob", "gpu-pytorchjob", ("spec", "runPolicy", "suspend"))):
        wl = stack.wait_for(f"Kueue's Workload of the {kind}", lambda k=kind, n=name: workloads_of(stack, k, n), 60)[0]
        assert wl["spec"]["queueName"] == WORKSPACE_QUEUE
        stack.wait_for(f"the {kind}'s Workload to be admitted",
                       lambda k=kind, n=name: any(admitted(w) for w in workloads_of(stack, k, n)), 120)
        obj = get(stack, kind, name)
        value = obj
        for key in suspend:
            value = value.get(key) if isinstance(value, dict) else None
        assert value is False, f"{kind} {'.'.join(suspend)} is {value!r} after admission"


def test_kueue_queues_a_rayservice_and_kuberay_runs_its_gpu_worker_on_an_h100_node(stack):
    wl = stack.wait_for("Kueue's Workload of the RayService", lambda: workloads_of(stack, "RayService",
                                                                                    "gpu-rayservice"), 60)[0]
    assert wl["spec"]["queueName"] == WORKSPACE_QUEUE
    stack.wait_for("the RayService's Workload to be admitted",
                   lambda: any(admitted(w) for w in workloads_of(stack, "RayService", "gpu-rayservice")), 120)
    run_id = get(stack, "RayService", "gpu-rayservice")["metadata"]["labels"][RUN_ID]

    def gpu_worker_bound() -> list[dict]:
        pods = stack.cp.get_json("pods", "-n", WORKSPACE, "-l", f"{RUN_ID}={run_id}")["items"]
        return [p for p in pods if template_gpus(p) and (p["spec"].get("nodeName") or "").startswith("aks-h100-")]
    pod = stack.wait_for("KubeRay's GPU worker of the RayService bound to an h100 Node", gpu_worker_bound, 180)[0]
    assert placement_problems(pod) == []


def test_kueue_marks_a_leaderworkersets_templates_as_suspended_by_their_parent(stack):
    stored = get(stack, "LeaderWorkerSet", "gpu-lws")
    for path, tpl in pod_templates(stored):
        annotations = (tpl.get("metadata") or {}).get("annotations") or {}
        assert annotations.get("kueue.x-k8s.io/pod-suspending-parent") == "leaderworkerset.x-k8s.io/leaderworkerset", \
            f"{path}: {annotations}"


# ---- a Kubeflow TrainJob -------------------------------------------------------------------------
TAUGATE_PATCH = "tau.azure.com/taugate"
KUEUE_PATCH = "kueue.x-k8s.io/manager"


@pytest.fixture(scope="module")
def torch_runtime(stack: Stack):
    """Trainer's ``torch-distributed`` ClusterTrainingRuntime (``manifests/base/runtimes``), which
    Kueue's trainjob integration reads to build a TrainJob's PodSets (``getRuntimeSpec``); the
    platform team installs it with the trainer."""
    runtime = _first(TORCH_RUNTIME, "ClusterTrainingRuntime")
    stack.cp.kubectl("apply", "-f", "-", input=json.dumps(runtime))
    try:
        yield runtime
    finally:
        stack.cp.kubectl("delete", "clustertrainingruntimes.trainer.kubeflow.org", runtime["metadata"]["name"],
                         "--ignore-not-found", "--wait=false", check=False)


def gpu_trainjob(name: str = "gpu-trainjob") -> dict:
    """The trainer proposal's ``torch-ddp`` TrainJob (``tests/data/admission/trainer``) sized to
    the ``vision`` profile: 2 nodes of 1 GPU (limit = request), with cpu and memory requests."""
    obj = _named(yaml.safe_load((DATA / "admission" / "trainer" / "torch-ddp.yaml").read_text()), name)
    obj["spec"]["trainer"].update(numNodes=2, resourcesPerNode={
        "limits": {GPU: "1"}, "requests": {GPU: "1", "cpu": "4", "memory": "16Gi"}})
    return obj


def create_trainjob(stack: Stack, obj: dict, *, check: bool = True):
    """``kubectl create`` of a TrainJob as the researcher, labelled for the module's cleanup (it
    has no pod template of its own to mark)."""
    obj["metadata"].setdefault("labels", {})["e2e.taugate/kinds"] = "1"
    return stack.cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj), kubeconfig=researcher(stack),
                            check=check)


def _node_patch(trainjob: dict, manager: str) -> dict | None:
    """The ``node`` replicated job's pod template patch of the runtime patch of ``manager``."""
    for patch in trainjob["spec"].get("runtimePatches") or []:
        if patch["manager"] == manager:
            rjobs = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get(
                "replicatedJobs") or []
            return next((r["template"]["spec"]["template"] for r in rjobs if r["name"] == "node"), None)
    return None


def test_a_gpu_trainjob_is_queued_by_kueue_with_its_run_id_and_placement_in_taugates_runtime_patch(
        stack, torch_runtime):
    created = json.loads(create_trainjob(stack, gpu_trainjob()).stdout)
    labels = created["metadata"]["labels"]
    assert labels[QUEUE] == WORKSPACE_QUEUE and re.fullmatch(r"[0-9a-f]{24}", labels[RUN_ID]), labels
    assert created["spec"]["suspend"] is True
    managers = [p["manager"] for p in created["spec"]["runtimePatches"]]
    assert managers == [TAUGATE_PATCH, KUEUE_PATCH], managers  # taugate's first: Kueue's flavor has the last word
    node = _node_patch(created, TAUGATE_PATCH)
    assert node is not None and node["metadata"]["labels"][RUN_ID] == labels[RUN_ID]
    assert node["spec"]["nodeSelector"][GPU_CLASS_SELECTOR] == "h100" and GPU_TOLERATION in node["spec"]["tolerations"]
    wl = stack.wait_for("Kueue's Workload of the TrainJob", lambda: workloads_of(stack, "TrainJob", "gpu-trainjob"),
                        60)[0]
    assert wl["spec"]["queueName"] == WORKSPACE_QUEUE
    [pod_set] = wl["spec"]["podSets"]  # the runtime's one replicated job, as the trainer would build it
    assert (pod_set["name"], pod_set["count"]) == ("node", 2), pod_set
    [container] = pod_set["template"]["spec"]["containers"]
    assert container["resources"]["limits"][GPU] == "1"
    # the pod template Kueue reserves is the runtime's, with taugate's patch applied
    assert pod_set["template"]["metadata"]["labels"][RUN_ID] == labels[RUN_ID]
    assert pod_set["template"]["spec"]["nodeSelector"][GPU_CLASS_SELECTOR] == "h100"
    # Kueue admits it: its own runtime patch gets the flavor's placement (RunWithPodSetsInfo, an
    # UPDATE taugate's webhooks allow without touching taugate's patch) and the job is unsuspended.
    stack.wait_for("the TrainJob's Workload to be admitted",
                   lambda: any(admitted(w) for w in workloads_of(stack, "TrainJob", "gpu-trainjob")), 120)

    def unsuspended() -> dict | None:
        obj = get(stack, "TrainJob", "gpu-trainjob")
        return obj if obj["spec"].get("suspend") is False else None
    stored = stack.wait_for("Kueue to unsuspend the TrainJob", unsuspended, 60)
    assert [p["manager"] for p in stored["spec"]["runtimePatches"]] == [TAUGATE_PATCH, KUEUE_PATCH]
    assert _node_patch(stored, TAUGATE_PATCH) == node
    flavor = _node_patch(stored, KUEUE_PATCH)
    assert flavor is not None and flavor["spec"]["nodeSelector"][GPU_CLASS_SELECTOR] == "h100", flavor
    assert stored["metadata"]["labels"][RUN_ID] == labels[RUN_ID]


def test_a_trainjob_that_leaves_its_size_to_the_runtime_is_refused_naming_the_fields(stack, torch_runtime):
    # The trainer's own Flux LAMMPS example: numNodes, but no resourcesPerNode. On the runtime the
    # stack has: Kueue's validating webhook, which runs beside taugate's, refuses a TrainJob whose
    # runtime is missing (trainjob_webhook.go validateTopologyRequest) and might answer first.
    obj = _named(_first(LAMMPS_TRAINJOB, "TrainJob"), "lammps-flux")
    obj["spec"]["runtimeRef"]["name"] = torch_runtime["metadata"]["name"]
    refused = create_trainjob(stack, obj, check=False)
    assert refused.returncode != 0
    assert "trainjob-size" in refused.stderr and "spec.trainer.resourcesPerNode" in refused.stderr, refused.stderr
    assert stack.cp.kubectl("get", RESOURCE["TrainJob"], "lammps-flux", "-n", WORKSPACE, check=False).returncode != 0


# ---- a bare Pod ----------------------------------------------------------------------------------
def test_a_bare_gpu_pod_is_gated_by_kueue_queued_as_a_workload_then_admitted_and_bound_to_an_h100_node(stack):
    cp = stack.cp
    # `kubectl run` has no flag for resources: a researcher asks for a GPU with --overrides.
    overrides = {"spec": {"containers": [{"name": "train", "image": "nginx", "resources": {
        "limits": {GPU: "1"}, "requests": {GPU: "1", "cpu": "4", "memory": "16Gi"}}}]}}
    out = cp.kubectl("run", "train", "-n", WORKSPACE, "--image=nginx", "--restart=Never",
                     "--labels=e2e.taugate/kinds=1", f"--overrides={json.dumps(overrides)}", "-o", "json",
                     kubeconfig=researcher(stack))
    created = json.loads(out.stdout)
    # Kueue's pod webhook gates a Pod that has the queue label when it sees it; mutating webhook
    # configurations run in name order (kueue-... before taugate's), Kueue's with reinvocation
    # Never as its chart ships it: the Pod must leave taugate gated, or Kueue never queues it.
    assert {"name": GATE} in (created["spec"].get("schedulingGates") or []), (
        f"stored without Kueue's scheduling gate, so Kueue never queues it and kube-scheduler binds it at once: "
        f"labels {created['metadata'].get('labels')}, schedulingGates {created['spec'].get('schedulingGates')}")
    assert created["metadata"]["labels"][QUEUE] == WORKSPACE_QUEUE
    assert re.fullmatch(r"[0-9a-f]{24}", created["metadata"]["labels"].get(RUN_ID, ""))
    assert placement_problems(created) == []
    wl = stack.wait_for("Kueue's Workload of the Pod", lambda: workloads_of(stack, "Pod", "train"), 60)[0]
    assert wl["spec"]["queueName"] == WORKSPACE_QUEUE
    stack.wait_for("the Pod's Workload to be admitted",
                   lambda: any(admitted(w) for w in workloads_of(stack, "Pod", "train")), 120)
    pod = stack.wait_for("the Pod ungated, bound to an h100 Node and Running",
                         lambda: (p := get(stack, "Pod", "train"))["status"].get("phase") == "Running" and p, 120)
    assert not pod["spec"].get("schedulingGates")
    assert pod["spec"]["nodeName"].startswith("aks-h100-")


def test_a_researcher_cannot_remove_kueues_gate_from_a_pod_kueue_still_holds(stack):
    cp = stack.cp
    # One pod of a group of two: Kueue keeps it gated until the whole group exists.
    pod = _with_requests(gpu_pod("half-group"))
    pod["metadata"].setdefault("labels", {})["kueue.x-k8s.io/pod-group-name"] = "half-group"
    pod["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/pod-group-total-count"] = "2"
    created = json.loads(create(stack, pod).stdout)
    assert {"name": GATE} in (created["spec"].get("schedulingGates") or []), created["spec"]
    out = cp.kubectl("patch", "pod", "half-group", "-n", WORKSPACE, "--type=json",
                     "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]', kubeconfig=researcher(stack),
                     check=False)
    assert out.returncode != 0, out.stdout
    assert f"[kueue-gate-removed] spec.schedulingGates: removes Kueue's scheduling gate '{GATE}'" in out.stderr, \
        out.stderr
    stored = get(stack, "Pod", "half-group")
    assert {"name": GATE} in stored["spec"]["schedulingGates"] and not stored["spec"].get("nodeName")


# ---- what the controllers make -------------------------------------------------------------------
def test_a_gpu_deployments_pods_carry_the_placement_and_the_deployments_run_id_and_kueue_admits_each(stack):
    cp = stack.cp
    create(stack, _with_requests(gpu_deployment("trainer-fleet", replicas=2)))
    dep = get(stack, "Deployment", "trainer-fleet")
    run_id = dep["metadata"]["labels"][RUN_ID]
    assert dep["spec"]["template"]["metadata"]["labels"][RUN_ID] == run_id

    def pods() -> list[dict]:
        items = cp.get_json("pods", "-n", WORKSPACE, "-l", "name=trainer-fleet")["items"]
        owned = [p for p in items if any(r["kind"] == "ReplicaSet" and r["name"].startswith("trainer-fleet-")
                                         for r in p["metadata"].get("ownerReferences") or [])]
        return owned if len(owned) == 2 else []
    made = stack.wait_for("kube-controller-manager to make the Deployment's 2 pods", pods, 90)
    for p in made:
        assert p["metadata"]["labels"][RUN_ID] == run_id, "a pod of a governed parent inherits its run-id"
        assert placement_problems(p) == []
    bound = stack.wait_for("Kueue to admit each pod and kube-scheduler to bind it to an h100 Node",
                           lambda: (ps := pods()) and all((p["spec"].get("nodeName") or "").startswith("aks-h100-")
                                                          for p in ps) and ps, 180)
    for p in bound:
        assert not p["spec"].get("schedulingGates"), p["metadata"]["name"]
        assert any(admitted(w) for w in workloads_of(stack, "Pod", p["metadata"]["name"]))


def test_a_cpu_only_deployment_in_a_workspace_passes_unchanged(stack):
    cp = stack.cp
    sent = cpu_deployment("web")
    create(stack, sent)
    stored = get(stack, "Deployment", "web")
    assert untouched_problems(stored) == []
    # The same Deployment where no webhook of taugate's acts: the stored specs are the same.
    elsewhere = json.loads(cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                      input=json.dumps(_mark(cpu_deployment("web", OUTSIDE)))).stdout)
    assert stored["spec"] == elsewhere["spec"]
    assert stored["metadata"]["labels"] == elsewhere["metadata"]["labels"]


def hostile_cpu_pod(name: str, namespace: str) -> dict:
    """The Kubernetes docs' nginx Pod asking for no GPU but tolerating every taint and selecting the
    H100 nodes: with a CUDA image (its own ``NVIDIA_VISIBLE_DEVICES=all``) it would get the node's GPUs."""
    obj = _named(_first(KUBERNETES / "test/fixtures/doc-yaml/user-guide/pod.yaml", "Pod"), name, namespace)
    obj["spec"]["tolerations"] = [{"operator": "Exists"}]
    obj["spec"]["nodeSelector"] = {GPU_CLASS_SELECTOR: "h100"}
    return _with_requests(obj)


def test_a_pod_without_gpus_cannot_put_itself_on_a_gpu_node(stack):
    cp = stack.cp
    # Where taugate does not act, kube-scheduler binds such a pod to a tainted H100 node.
    create(stack, hostile_cpu_pod("on-gpu-node", OUTSIDE))
    bound = stack.wait_for("the CPU pod outside workspaces bound", lambda: cp.get_json(
        "pod", "on-gpu-node", "-n", OUTSIDE)["spec"].get("nodeName"), 90)
    assert bound.startswith("aks-h100-"), bound
    out = create(stack, hostile_cpu_pod("on-gpu-node", WORKSPACE), check=False)
    assert out.returncode != 0, out.stdout
    assert "[cpu-pod-on-gpu-node] spec.tolerations: pod template pod: its tolerations tolerate the taints of GPU " \
           "nodes (nvidia.com/gpu=present:NoSchedule)" in out.stderr, out.stderr
    assert '[cpu-pod-on-gpu-node] spec.nodeSelector["tau.azure.com/gpu-class"]' in out.stderr, out.stderr
    assert cp.kubectl("get", "pod", "on-gpu-node", "-n", WORKSPACE, check=False).returncode != 0


# ---- kinds taugate does not manage ---------------------------------------------------------------
DAEMONSET = KUBERNETES / "hack/testdata/rollingupdate-daemonset.yaml"
REPLICASET = KUBERNETES / "test/fixtures/doc-yaml/user-guide/replicaset/redis-slave.yaml"
UNMANAGED = {
    "DaemonSet": lambda: _gpu_template_kind(DAEMONSET, "DaemonSet"),
    "ReplicaSet": lambda: _gpu_template_kind(REPLICASET, "ReplicaSet"),
}
"""Kubernetes' own DaemonSet and ReplicaSet (kubectl's test data, the docs' guestbook), asking
for 1 GPU a pod: kinds Kueue has no integration for and taugate does not manage."""


def _gpu_template_kind(path: Path, kind: str, namespace: str = WORKSPACE) -> dict:
    obj = _named(_first(path, kind), f"gpu-{kind.lower()}", namespace)
    _ask_for_gpus(obj["spec"]["template"])
    return obj


@pytest.mark.parametrize("kind", list(UNMANAGED))
def test_a_gpu_workload_of_a_kind_taugate_does_not_manage_is_refused_naming_the_managed_kinds(stack, kind):
    # The researcher role grants no DaemonSet or ReplicaSet: one whose role does (here the admin)
    # meets taugate's webhook, which refuses the GPU workload by the default setting (deny).
    out = create(stack, _with_requests(UNMANAGED[kind]()), check=False, as_researcher=False)
    assert out.returncode != 0, out.stdout
    assert "denied the request" in out.stderr, out.stderr
    for managed in ("Deployment", "StatefulSet", "JobSet", "RayJob"):
        assert managed in out.stderr, f"the denial should name {managed}: {out.stderr}"
    assert stack.cp.kubectl("get", RESOURCE[kind], f"gpu-{kind.lower()}", "-n", WORKSPACE,
                            check=False).returncode != 0


# ---- outside workspaces --------------------------------------------------------------------------
def test_nothing_outside_workspaces_is_touched(stack):
    cp = stack.cp
    for obj in (gpu_pod("gpu-pod", OUTSIDE), gpu_deployment("gpu-deployment", OUTSIDE),
                _gpu_template_kind(DAEMONSET, "DaemonSet", OUTSIDE)):
        created = json.loads(create(stack, obj).stdout)
        assert untouched_problems(created) == [], f"{obj['kind']}: {untouched_problems(created)}"
        if obj["kind"] == "Pod":
            assert not created["spec"].get("schedulingGates"), "Kueue queues nothing without a queue label"
    pods = stack.wait_for("the Deployment's pods outside workspaces",
                          lambda: cp.get_json("pods", "-n", OUTSIDE, "-l", "name=gpu-deployment")["items"], 90)
    for p in pods:
        assert untouched_problems(p) == []
        assert not p["spec"].get("schedulingGates")

