"""A workspace's pods get their priority from the workload profile and their node from the
scheduler (``taugate.webhook.pod_rules``, issue 27): the profile's ``podPriorityClassName`` is set
on every pod template of a governed workload; another class is refused; a ``system-`` class and a
``nodeName`` are refused on every pod template of every kind in a workspace, on CREATE and on an
UPDATE that sets them, while an UPDATE that keeps a stored value passes."""

from __future__ import annotations

import copy

import pytest

from taugate.webhook.review import admit, mutate, request_for, validate
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import ALICE, gpu_deployment, gpu_pod
from tests.upstream_manifests import classifier, kueue_job

PROFILE_CLASS = "tau-train-default"  # examples/cluster.yaml: h100-1gpu priorities.podPriorityClassName


def gpu_job() -> dict:
    """Kueue's example Job with 1 GPU per pod."""
    obj = kueue_job()
    for c in obj["spec"]["template"]["spec"]["containers"]:
        c["resources"].setdefault("limits", {})["nvidia.com/gpu"] = 1
        c["resources"]["requests"]["nvidia.com/gpu"] = 1
    return obj


def cpu_replicaset() -> dict:
    """A bare CPU-only ReplicaSet (a kind taugate does not manage) made from the GPU Deployment."""
    obj = gpu_deployment(replicas=1)
    obj["kind"] = "ReplicaSet"
    del obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return obj


def cpu_deployment() -> dict:
    obj = gpu_deployment(replicas=1)
    del obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return obj


def pod_specs(obj: dict) -> dict[str, dict]:
    """Every pod spec of the samples used here, by its field path."""
    spec = obj["spec"]
    if obj["kind"] == "Pod":
        return {"spec": spec}
    if obj["kind"] == "RayJob":
        ray = spec["rayClusterSpec"]
        out = {"spec.rayClusterSpec.headGroupSpec.template.spec": ray["headGroupSpec"]["template"]["spec"]}
        for i, g in enumerate(ray["workerGroupSpecs"]):
            out[f"spec.rayClusterSpec.workerGroupSpecs[{i}].template.spec"] = g["template"]["spec"]
        if "submitterPodTemplate" in spec:
            out["spec.submitterPodTemplate.spec"] = spec["submitterPodTemplate"]["spec"]
        return out
    return {"spec.template.spec": spec["template"]["spec"]}


SAMPLES = {"RayJob": classifier, "Job": gpu_job, "Deployment": lambda: gpu_deployment(replicas=2), "Pod": gpu_pod}


def _admit(obj, state, settings, engine, **kw):
    return admit(obj, state=state, settings=settings, engine=engine, namespace="vision", user_info=ALICE, **kw)


def _stored(obj: dict, state, settings, engine) -> dict:
    d = _admit(obj, state, settings, engine)
    assert d.allowed, d.message
    out = copy.deepcopy(d.object)
    out["metadata"].update(name=out["metadata"].get("name") or "stored", namespace="vision", uid="u-1",
                           resourceVersion="7")
    return out


def _update(new: dict, old: dict, state, settings, engine, user=ALICE):
    return validate(request_for(new, namespace="vision", operation="UPDATE", old=old, user_info=user),
                    state, settings, engine)


# ---- the profile's pod priority ------------------------------------------------------------------

def test_a_bare_pod_keeps_the_default_priority_as_the_api_server_resolved_it_before_the_webhooks(
        state, settings, engine):
    # plugin/pkg/admission/priority admitPod sets spec.priority before the webhooks and refuses a
    # class added afterwards ("the integer value of priority must not be provided")
    d = _admit(gpu_pod(), state, settings, engine)
    assert d.allowed and "priorityClassName" not in d.object["spec"]


@pytest.mark.parametrize("kind", sorted(set(SAMPLES) - {"Pod"}))
def test_every_pod_template_of_a_governed_workload_gets_the_profiles_pod_priority_class(kind, state, settings,
                                                                                       engine):
    d = _admit(SAMPLES[kind](), state, settings, engine)
    assert d.allowed, d.message
    specs = pod_specs(d.object)
    assert specs and {p: s.get("priorityClassName") for p, s in specs.items()} == dict.fromkeys(specs, PROFILE_CLASS)
    again = mutate(request_for(d.object, namespace="vision", user_info=ALICE), state, settings, engine)
    assert again.allowed and again.patch is None or not any(
        "priorityClassName" in op["path"] for op in again.patch)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_a_template_naming_the_profiles_class_itself_is_admitted(kind, state, settings, engine):
    obj = SAMPLES[kind]()
    for s in pod_specs(obj).values():
        s["priorityClassName"] = PROFILE_CLASS
    assert _admit(obj, state, settings, engine).allowed


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_a_template_naming_another_priority_class_is_refused_naming_the_profiles(kind, state, settings, engine):
    obj = SAMPLES[kind]()
    where, spec = list(pod_specs(obj).items())[-1]
    spec["priorityClassName"] = "research-urgent"
    d = _admit(obj, state, settings, engine)
    assert not d.allowed
    assert f"[pod-priority-class] {where}.priorityClassName: asks for PriorityClass 'research-urgent'" in d.message
    assert f"allowed: '{PROFILE_CLASS}'" in d.message and "fix:" in d.message, d.message


# ---- system classes and nodeName: every kind in a workspace ------------------------------------------

EVERY_KIND = {**SAMPLES, "CPU-only Deployment": cpu_deployment, "bare ReplicaSet": cpu_replicaset,
              "CPU-only Pod": lambda: _without_gpus(gpu_pod())}


def _without_gpus(pod: dict) -> dict:
    for c in pod["spec"]["containers"]:
        c["resources"].pop("limits", None)
    return pod


@pytest.mark.parametrize("cls", ["system-node-critical", "system-cluster-critical", "system-anything"])
@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
def test_a_system_priority_class_is_refused_on_every_kind_in_a_workspace(kind, cls, state, settings, engine):
    obj = EVERY_KIND[kind]()
    where, spec = list(pod_specs(obj).items())[-1]  # RayJob: the worker group
    spec["priorityClassName"] = cls
    d = _admit(obj, state, settings, engine)
    assert not d.allowed
    assert f"[system-priority-class] {where}.priorityClassName: asks for the system PriorityClass {cls!r}" \
        in d.message, d.message


@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
def test_a_node_name_is_refused_on_every_kind_in_a_workspace(kind, state, settings, engine):
    obj = EVERY_KIND[kind]()
    where, spec = list(pod_specs(obj).items())[-1]
    spec["nodeName"] = "aks-h100-unhealthy-0"
    d = _admit(obj, state, settings, engine)
    assert not d.allowed
    assert f"[node-name] {where}.nodeName: binds the pods to node 'aks-h100-unhealthy-0'" in d.message, d.message
    assert "fix: remove nodeName" in d.message


def test_outside_a_workspace_nothing_of_this_is_judged(state, settings, engine):
    obj = gpu_job()
    obj["spec"]["template"]["spec"].update(priorityClassName="system-node-critical", nodeName="n1")
    obj["metadata"]["namespace"] = "default"
    d = admit(obj, state=state, settings=settings, engine=engine, namespace="default", user_info=ALICE)
    assert d.allowed and d.patch is None


# ---- UPDATE ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "policy"), [
    ("priorityClassName", "system-cluster-critical", "system-priority-class"),
    ("nodeName", "aks-h100-0", "node-name"),
    ("priorityClassName", "research-urgent", "pod-priority-class"),
])
def test_an_update_setting_a_class_or_a_node_on_a_deployments_template_is_refused(field, value, policy, state,
                                                                                  settings, engine):
    old = _stored(gpu_deployment(replicas=2), state, settings, engine)
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"][field] = value
    d = _update(new, old, state, settings, engine)
    assert not d.allowed and f"[{policy}] spec.template.spec.{field}" in d.message, d.message


def test_an_update_changing_a_stored_system_class_or_node_is_refused_too(state, settings, engine):
    old = _stored(cpu_deployment(), state, settings, engine)
    old["spec"]["template"]["spec"].update(priorityClassName="system-node-critical", nodeName="n1")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"].update(priorityClassName="system-cluster-critical", nodeName="n2")
    d = _update(new, old, state, settings, engine)
    assert not d.allowed and "[system-priority-class]" in d.message and "[node-name]" in d.message


def test_an_update_of_a_bound_pod_that_keeps_its_node_passes(state, settings, engine):
    # The scheduler binds a pod (pods/binding sets spec.nodeName); later UPDATEs (a label, Kueue
    # removing its finalizer) carry the stored node name unchanged.
    old = _stored(gpu_pod(), state, settings, engine)
    old["spec"]["nodeName"] = "aks-h100-0"
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team-note"] = "x"
    new["metadata"].pop("finalizers", None)
    assert _update(new, old, state, settings, engine).allowed
    cpu_old = _without_gpus(gpu_pod())
    cpu_old["metadata"].update(name="notebook", namespace="vision", uid="u-2")
    cpu_old["spec"]["nodeName"] = "cpu-0"
    assert _update(copy.deepcopy(cpu_old), cpu_old, state, settings, engine).allowed


def test_taugates_own_service_account_is_not_judged(state, settings, engine):
    obj = cpu_deployment()
    obj["metadata"]["namespace"] = "vision"
    obj["spec"]["template"]["spec"]["nodeName"] = "n1"
    operator = {"username": settings.service_account, "groups": []}
    assert validate(request_for(obj, namespace="vision", user_info=operator), state, settings, engine).allowed
