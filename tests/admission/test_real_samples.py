"""Every RayJob, RayCluster and Job in the real KubeRay and Kueue samples goes through
admission in a workspace namespace: no crash, a patch that applies with jsonpatch, an admitted
object valid under the real CRD schema (or Kubernetes' own for Jobs), and reinvocation on the
output yields an empty patch."""

from __future__ import annotations

import copy

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.crdschema import crd_errors
from tests.paths import SAMPLES
from webhook.review import admit, mutate, request_for

CRDS = {
    "RayJob": SAMPLES / "kuberay/ray-operator/config/crd/bases/ray.io_rayjobs.yaml",
    "RayCluster": SAMPLES / "kuberay/ray-operator/config/crd/bases/ray.io_rayclusters.yaml",
}
WORKLOAD_KINDS = {"RayJob", "RayCluster", "Job"}


def _workloads():
    out = []
    for root in (SAMPLES / "kuberay", SAMPLES / "kueue"):
        for path in sorted(root.rglob("*.yaml")):
            if "/crd/" in str(path) or "/webhook/" in str(path):
                continue
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
                if isinstance(doc, dict) and doc.get("kind") in WORKLOAD_KINDS:
                    out.append(pytest.param(doc, id=f"{path.relative_to(SAMPLES)}#{i}"))
    return out


WORKLOADS = _workloads()


def test_the_sample_corpus_holds_every_workload_kind():
    kinds = {p.values[0]["kind"] for p in WORKLOADS}
    assert kinds == WORKLOAD_KINDS
    assert len(WORKLOADS) >= 40


def _in_vision(doc: dict) -> dict:
    obj = copy.deepcopy(doc)
    obj.setdefault("metadata", {})["namespace"] = "vision"
    return obj


def _schema_errors(obj: dict) -> list[str]:
    if obj["kind"] in CRDS:
        return crd_errors(obj, CRDS[obj["kind"]])
    try:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    except kubernetes_validate.ValidationError as e:
        return [str(e)]
    return []


@pytest.mark.parametrize("doc", WORKLOADS)
def test_mutation_of_a_real_sample_applies_validates_against_its_schema_and_is_idempotent(doc, state, settings):
    obj = _in_vision(doc)
    assert _schema_errors(obj) == [], "the sample itself must be valid"
    decision = mutate(request_for(obj, namespace="vision"), state, settings)
    if not decision.allowed:
        # The Kueue samples name their own LocalQueue (user-queue, lq-a...), which this workspace
        # does not have: denied with the allowed queue; following the fix admits them.
        assert [v.policy for v in decision.violations] == ["queue"]
        assert "allowed: vision-queue" in decision.message
        del obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        decision = mutate(request_for(obj, namespace="vision"), state, settings)
    assert decision.allowed, decision.message
    assert decision.patch, "a workload in a workspace always gets queue label, run-id and suspend"
    admitted = jsonpatch.apply_patch(obj, decision.patch)
    assert _schema_errors(admitted) == []
    labels = admitted["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "vision-queue"
    assert len(labels["tau.azure.com/run-id"]) == 24
    assert admitted["spec"]["suspend"] is True
    again = mutate(request_for(admitted, namespace="vision"), state, settings)
    assert again.allowed and again.patch is None


@pytest.mark.parametrize("doc", WORKLOADS)
def test_the_full_admission_of_a_real_sample_never_crashes_and_explains_every_denial(doc, state, settings, engine):
    obj = _in_vision(doc)
    obj["metadata"].get("labels", {}).pop("kueue.x-k8s.io/queue-name", None)
    decision = admit(obj, state=state, settings=settings, engine=engine, namespace="vision")
    if decision.allowed:
        assert _schema_errors(decision.object) == []
    else:
        for v in decision.violations:
            assert v.policy and v.message
        assert decision.message.count("\n- ") == len(decision.violations) - 1 or decision.message
