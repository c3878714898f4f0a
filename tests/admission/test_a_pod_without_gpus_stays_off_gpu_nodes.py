"""A pod that asks for no GPU may not put itself on a GPU node: there the container runtime hands
it GPUs that no request counts (a CUDA image sets ``NVIDIA_VISIBLE_DEVICES=all`` in its own
environment, which admission cannot see), outside the queue and every quota. Tolerating the GPU
nodes' taints or selecting them by label is refused (``devices.gpu_node_problems``); GPU pods keep
their placement. Against the example cluster (H100 and A100 nodes tainted
``nvidia.com/gpu=present:NoSchedule``, a CPU pool) and NVIDIA knavigator's DGX A100 node."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from taugate import devices
from taugate.settings import Settings
from taugate.snapshot import build_state
from taugate.webhook import review
from tests.paths import EXAMPLE_CLUSTER, REPO

NS = "vision"
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
DGX = yaml.safe_load((REPO / "tests" / "data" / "nodes" / "gpu-node-dgx-a100-80gb.yaml").read_text())


def state(*extra: dict, untainted: bool = False):
    objs = list(yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()))
    if untainted:
        for o in objs:
            if o["kind"] == "Node":
                o["spec"].pop("taints", None)
    return build_state([*objs, *extra], Settings())


def job(**pod_spec) -> dict:
    """A CPU batch Job with a CUDA image, its pod spec extended by ``pod_spec``."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneaky", "namespace": NS}, "spec": {
        "template": {"spec": {"restartPolicy": "Never", **pod_spec, "containers": [
            {"name": "main", "image": CUDA, "command": ["nvidia-smi"],
             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}


def problems(obj: dict, st=None, **kw) -> str:
    d = review.admit(obj, state=st or state(), settings=Settings(), **kw)
    return "" if d.allowed else (d.message or "")


@pytest.mark.parametrize("toleration", [
    {"operator": "Exists"},                                            # every taint
    {"key": "nvidia.com/gpu", "operator": "Exists"},                   # the profiles' own toleration
    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "value": "present"},                     # no operator: Equal
    {"operator": "Exists", "effect": "NoSchedule"},
])
def test_a_cpu_pod_tolerating_the_gpu_nodes_taint_is_refused_at_its_tolerations(toleration):
    found = problems(job(tolerations=[toleration]))
    assert "[cpu-pod-on-gpu-node] spec.template.spec.tolerations: pod template job: its tolerations tolerate " \
           "the taints of GPU nodes (nvidia.com/gpu=present:NoSchedule)" in found
    assert "fix: remove it, or ask for whole GPUs as nvidia.com/gpu" in found


@pytest.mark.parametrize("toleration", [
    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    {"key": "spot", "operator": "Exists"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
])
def test_a_toleration_that_does_not_tolerate_the_gpu_taint_is_left_alone(toleration):
    assert problems(job(tolerations=[toleration])) == ""


@pytest.mark.parametrize("selector, field", [
    ({"nodeSelector": {"tau.azure.com/gpu-class": "h100"}},
     'spec.template.spec.nodeSelector["tau.azure.com/gpu-class"]'),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                              {"key": "tau.azure.com/gpu-class", "operator": "In", "values": ["cpu", "a100"]}]}]}}}},
     "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms[0].matchExpressions[1]"),
])
def test_a_cpu_pod_selecting_gpu_nodes_is_refused_even_where_gpu_nodes_are_not_tainted(selector, field):
    for st in (state(), state(untainted=True)):
        found = problems(job(**selector), st)
        assert f"[cpu-pod-on-gpu-node] {field}: pod template job: its " in found and "chooses GPU nodes" in found


def test_gfd_labels_of_a_real_gpu_node_select_it():
    sel = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]}]}}}}
    st = state(DGX)
    assert "[cpu-pod-on-gpu-node]" in problems(job(**sel), st)
    assert "[cpu-pod-on-gpu-node]" in problems(job(nodeSelector={"nvidia.com/gpu.product": DGX["metadata"]["labels"][
        "nvidia.com/gpu.product"]}), st)


@pytest.mark.parametrize("pod_spec", [
    {"nodeSelector": {"kubernetes.io/os": "linux"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tau.azure.com/gpu-class", "operator": "NotIn",
                               "values": ["h100", "a100"]}]}]}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tau.azure.com/gpu-class", "operator": "DoesNotExist"}]}]}}}},
    {"nodeSelector": {"tau.azure.com/gpu-class": "no-such-class"}},
])
def test_selecting_cpu_nodes_or_keeping_away_from_gpu_nodes_is_left_alone(pod_spec):
    assert problems(job(**pod_spec)) == ""


def test_tolerations_matter_nowhere_gpu_nodes_carry_no_taint_of_their_own():
    st = state(untainted=True)
    assert st.gpu_nodes.taint_sets == frozenset()
    assert problems(job(tolerations=[{"operator": "Exists"}]), st) == ""


def test_kubernetes_own_condition_taints_are_not_a_gpu_fence():
    node = copy.deepcopy(DGX)
    node["spec"] = {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                               {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}
    st = state(node, untainted=True)
    assert st.gpu_nodes.taint_sets == frozenset()
    # every pod carries DefaultTolerationSeconds' not-ready/unreachable tolerations
    assert problems(job(tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300}]), st) == ""


def test_a_gpu_pod_with_the_gpu_toleration_and_selector_is_placed_as_before():
    obj = job(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
              nodeSelector={"tau.azure.com/gpu-class": "h100"})
    res = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["limits"] = {"nvidia.com/gpu": "1"}
    d = review.admit(obj, state=state(), settings=Settings())
    assert d.allowed, d.message


def test_a_ray_head_tolerating_every_taint_is_refused_while_its_gpu_workers_are_placed(classifier):
    """KubeRay's GPU image-classifier sample in the workspace, its CPU head made to tolerate every taint."""
    head = classifier["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["tolerations"] = [{"operator": "Exists"}]
    found = problems(classifier, namespace=NS)
    assert "[cpu-pod-on-gpu-node] spec.rayClusterSpec.headGroupSpec.template.spec.tolerations" in found
    assert found.count("[cpu-pod-on-gpu-node]") == 1


def test_an_update_keeps_what_the_stored_object_already_tolerated_and_refuses_a_new_one():
    stored = job(tolerations=[{"operator": "Exists"}])
    again = copy.deepcopy(stored)
    again["metadata"]["labels"] = {"team": "vision"}
    assert problems(again, operation="UPDATE", old=stored) == ""
    plain = job()
    assert "[cpu-pod-on-gpu-node]" in problems(stored, operation="UPDATE", old=plain)


def test_the_cli_refuses_the_hostile_job_with_one_line_per_field(tmp_path):
    f = tmp_path / "sneaky.yaml"
    f.write_text(yaml.safe_dump(job(tolerations=[{"operator": "Exists"}],
                                    nodeSelector={"tau.azure.com/gpu-class": "h100"})))
    out = subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "-f", str(f), "--cluster",
                          str(EXAMPLE_CLUSTER)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("- [cpu-pod-on-gpu-node]")]
    assert [ln.split(":")[0] for ln in lines] == [
        "- [cpu-pod-on-gpu-node] spec.template.spec.tolerations",
        '- [cpu-pod-on-gpu-node] spec.template.spec.nodeSelector["tau.azure.com/gpu-class"]']


@pytest.mark.parametrize("toleration, taint, tolerated", [
    # the cases of k8s.io/api core/v1 toleration_test.go TestTolerationToleratesTaint, by name
    ({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}, ("foo", "bar", "NoSchedule"), True),
    ({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}, ("foo", "baz", "NoSchedule"), False),
    ({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}, ("foo", "bar", "NoSchedule"), True),
    ({"key": "foo", "operator": "Exists"}, ("foo", "bar", "NoExecute"), True),          # empty effect: every effect
    ({"key": "foo", "operator": "Exists", "effect": "NoExecute"}, ("foo", "bar", "NoSchedule"), False),
    ({"operator": "Exists"}, ("anything", "", "NoSchedule"), True),                     # empty key: every key
    ({"key": "foo", "value": "bar"}, ("foo", "bar", "NoSchedule"), True),               # no operator: Equal
    ({"key": "foo", "operator": "Gt", "value": "5"}, ("foo", "7", "NoSchedule"), True),  # KEP-5471
    ({"key": "foo", "operator": "Lt", "value": "5"}, ("foo", "7", "NoSchedule"), False),
    ({"key": "foo", "operator": "Gt", "value": "x"}, ("foo", "7", "NoSchedule"), False),
    ({"key": "foo", "operator": "Bogus"}, ("foo", "", "NoSchedule"), False),
])
def test_tolerations_match_taints_as_the_scheduler_matches_them(toleration, taint, tolerated):
    assert devices.tolerates(toleration, taint) is tolerated
