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
from taugate.settings import Settings
from taugate.webhook.review import admit
from tests.paths import (
    DATA,
    EXAMPLE_CLUSTER,
    EXAMPLE_RAYJOB,
    KUBERAY_SAMPLES,
    KUEUE_EXAMPLES,
    LWS_VLLM_GPU,
    PYTORCH_MNIST_NCCL,
)
from tests.workload_samples import JOBSET_FINE_TUNE, load, runnable

KUEUE_SA = "system:serviceaccount:kueue-system:kueue-controller-manager"
RESEARCHER = "alice@contoso.com"
TAU_CLUSTER = next(d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d and d["kind"] == "TauCluster")


def _namespace(state, name: str) -> dict:
    """The workspace namespace as taugate's operator labels it (controllers/taugrid/workspace.py)."""
    ws = state.workspace_for(name)
    return {"metadata": {"name": name, "labels": {labels.WORKSPACE: ws.metadata.name,
                                                  labels.KUEUE_QUEUE_NAME: ws.local_queue(state.default_queue)}}}


def refusals(state, obj: dict, *, operation: str = "CREATE", old: dict | None = None, user: str = RESEARCHER,
             settings: Settings | None = None) -> list[str] | None:
    """The messages of the validations ``obj`` fails, as the API server prints them; None when the
    policy does not judge the request (its resource rules or matchConditions)."""
    spec = admission_policy.policy(settings)["spec"]
    kind = kind_of(obj)
    if kind is None or not any(kind.group in r["apiGroups"] and kind.resource in r["resources"]
                               for r in spec["matchConstraints"]["resourceRules"]):
        return None
    namespace = obj["metadata"]["namespace"]
    ctx: dict[str, Any] = {
        "request": {"operation": operation, "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
                    "namespace": namespace, "userInfo": {"username": user, "groups": []}},
        "object": obj, "oldObject": old, "namespaceObject": _namespace(state, namespace), "params": TAU_CLUSTER}
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
    for path, gpus in ((LWS_VLLM_GPU, 1), (PYTORCH_MNIST_NCCL, 1), (JOBSET_FINE_TUNE, 4), (EXAMPLE_RAYJOB, None)):
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
    judged = {k.kind for k in KINDS if k.cel_pod_specs}
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
    # An object stored before taugate governed the namespace (no run-id) is not judged on update.
    before = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    before["metadata"]["namespace"] = "vision"
    assert refusals(state, before, operation="UPDATE", old=before) is None


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
    assert docs[1]["spec"]["paramRef"] == {"name": "cluster", "parameterNotFoundAction": "Deny"}
