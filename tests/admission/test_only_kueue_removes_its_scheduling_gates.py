"""Kueue holds a queued pod with a scheduling gate until it admits the pod's workload; Kubernetes
lets anyone who may update the Pod remove a gate (KEP-3521) and Kueue's pod webhook does not check
it, so taugate refuses the removal of a ``kueue.x-k8s.io/`` gate by anyone but Kueue and the
trusted controllers (``webhook/pod_rules.py`` ``gate_removals``). On the Kubernetes docs' GPU Pod,
admitted in the workspace and gated as Kueue's pod webhook gates it."""

from __future__ import annotations

import copy

import pytest
import yaml

from taugate.settings import Settings
from taugate.webhook import review
from tests.paths import REPO

NS = "vision"
RESEARCHER = {"username": "alice@contoso.com", "groups": ["vision-researchers", "system:authenticated"]}
KUEUE = {"username": "system:serviceaccount:kueue-system:kueue-controller-manager", "groups": []}
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture
def gated(example_state, settings) -> dict:
    """The docs' GPU Pod as stored: admitted by taugate, then gated by Kueue's pod webhook."""
    pod = yaml.safe_load((REPO / "tests" / "data" / "admission" / "core" / "gpu-pod.yaml").read_text())
    pod["metadata"]["namespace"] = NS
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
    d = review.admit(pod, state=example_state, settings=settings)
    assert d.allowed, d.message
    stored = copy.deepcopy(d.object)
    stored["spec"]["schedulingGates"] = [{"name": GATE}]
    return stored


def update(obj: dict, old: dict, user: dict, state, namespace: str = NS):
    return review.admit(obj, state=state, settings=Settings(), operation="UPDATE", old=old, user_info=user,
                        namespace=namespace)


def ungated(pod: dict) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["schedulingGates"] = []
    return out


def test_a_researcher_removing_kueues_gate_is_refused_naming_the_gate_and_the_fix(gated, example_state):
    d = update(ungated(gated), gated, RESEARCHER, example_state)
    assert not d.allowed
    assert f"[kueue-gate-removed] spec.schedulingGates: removes Kueue's scheduling gate '{GATE}'" in d.message
    assert "fix: leave spec.schedulingGates as they are and let Kueue admit it (kubectl get workloads -n vision" \
        in d.message


def test_kueue_removing_its_gate_when_it_admits_the_workload_is_allowed(gated, example_state):
    assert update(ungated(gated), gated, KUEUE, example_state).allowed


def test_an_update_that_keeps_the_gate_is_allowed(gated, example_state):
    labelled = copy.deepcopy(gated)
    labelled["metadata"]["labels"]["note"] = "x"
    assert update(labelled, gated, RESEARCHER, example_state).allowed


def test_a_gate_of_another_controller_is_not_kueues_to_guard(gated, example_state):
    other = copy.deepcopy(gated)
    other["spec"]["schedulingGates"].append({"name": "example.com/wait-for-data"})
    assert update(gated, other, RESEARCHER, example_state).allowed


def test_the_topology_gate_on_a_jobs_pod_is_guarded_too(gated, example_state):
    """Topology-aware scheduling gates the pods of any queued workload, a Job's included (children
    taugate otherwise leaves to their parent)."""
    child = copy.deepcopy(gated)
    child["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1",
                                             "controller": True}]
    child["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    d = update(ungated(child), child, RESEARCHER, example_state)
    assert not d.allowed and "'kueue.x-k8s.io/topology'" in d.message


def test_outside_workspaces_nothing_is_guarded(gated, example_state):
    elsewhere = copy.deepcopy(gated)
    elsewhere["metadata"]["namespace"] = "default"
    assert update(ungated(elsewhere), elsewhere, RESEARCHER, example_state, namespace="default").allowed
