"""Every RayJob, RayCluster, RayService and Job in KubeRay's ``config/samples`` and Kueue's example workloads
(from the pinned Go modules, ``tests/paths.py``), and the Kueue-shaped Jobs of ``tests/data/kueue``
(GPU with a provisioning check, partial admission, TAS, cpu-only), goes through
admission in a workspace namespace: no crash, a patch that applies with jsonpatch, an admitted
object valid under the real CRD schema (or Kubernetes' own for Jobs), and reinvocation on the
output yields an empty patch."""

from __future__ import annotations

import copy

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from taugate.kinds import kind_of
from taugate.webhook.decision import MAX_PROBLEMS_SHOWN
from taugate.webhook.review import admit, mutate, request_for
from tests.crdschema import crd_errors
from tests.paths import (
    DATA,
    KUBERAY,
    KUBERAY_SAMPLES,
    KUEUE,
    KUEUE_EXAMPLES,
    RAYCLUSTER_CRD,
    RAYJOB_CRD,
    RAYSERVICE_CRD,
)
from tests.workload_samples import at

CRDS = {
    "RayJob": RAYJOB_CRD,
    "RayCluster": RAYCLUSTER_CRD,
    "RayService": RAYSERVICE_CRD,
}
WORKLOAD_KINDS = {"RayJob", "RayCluster", "RayService", "Job"}


def _workloads():
    out = []
    for module, root in ((KUBERAY, KUBERAY_SAMPLES), (KUEUE, KUEUE_EXAMPLES), (DATA, DATA / "kueue")):
        for path in sorted(root.rglob("*.yaml")):
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
                if isinstance(doc, dict) and doc.get("kind") in WORKLOAD_KINDS:
                    out.append(pytest.param(doc, id=f"{module.name}/{path.relative_to(module)}#{i}"))
    return out


WORKLOADS = _workloads()


def test_the_sample_corpus_holds_every_workload_kind():
    kinds = {p.values[0]["kind"] for p in WORKLOADS}
    assert kinds == WORKLOAD_KINDS
    assert len(WORKLOADS) >= 40
    gpu_jobs = [p for p in WORKLOADS if p.values[0]["kind"] == "Job" and "nvidia.com/gpu" in str(p.values[0])]
    assert gpu_jobs, "a GPU Job is among the samples"


def _decoded(x):
    """``x`` as the API server hands it to webhooks: a null in a field that is not ``nullable`` is
    pruned (CRD structural-schema pruning; a built-in type decodes null as unset). KubeRay's
    ``ray-cluster.auth.yaml`` has such a null (``headGroupSpec.template.metadata:``)."""
    if isinstance(x, dict):
        return {k: _decoded(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_decoded(v) for v in x]
    return x


def _in_vision(doc: dict) -> dict:
    obj = _decoded(copy.deepcopy(doc))
    obj.setdefault("metadata", {})["namespace"] = "vision"
    return obj


def _on_an_existing_cluster(obj: dict) -> bool:
    """A RayJob that runs on an existing RayCluster: ``clusterSelector`` and no ``rayClusterSpec``."""
    return obj["kind"] == "RayJob" and bool(obj["spec"].get("clusterSelector")) and "rayClusterSpec" not in obj["spec"]


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
    assert decision.patch, "a workload in a workspace always gets a run-id"
    admitted = jsonpatch.apply_patch(obj, decision.patch)
    assert _schema_errors(admitted) == []
    labels = admitted["metadata"]["labels"]
    assert len(labels["tau.azure.com/run-id"]) == 24
    if _on_an_existing_cluster(admitted):
        # KubeRay's ClusterSelector mode cannot be suspended and Kueue does not queue it
        # (ray-job.use-existing-raycluster.yaml): a run-id, no queue label, no suspend.
        assert "kueue.x-k8s.io/queue-name" not in labels and "suspend" not in admitted["spec"]
    else:
        assert labels["kueue.x-k8s.io/queue-name"] == "vision-queue"
        assert at(admitted, kind_of(admitted).suspend_path) is True  # spec.suspend; a RayService's rayClusterConfig
    again = mutate(request_for(admitted, namespace="vision"), state, settings)
    assert again.allowed and again.patch is None


RUN_ID = "0123456789abcdef01234567"


@pytest.mark.parametrize("doc", WORKLOADS)
def test_mutating_a_real_sample_in_place_answers_the_same_patch_and_leaves_the_object_patched(doc, state, settings):
    obj = _in_vision(doc)
    obj["metadata"].setdefault("labels", {})["tau.azure.com/run-id"] = RUN_ID  # the same run-id both ways
    obj["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name", None)
    original = copy.deepcopy(obj)
    copied = mutate(request_for(obj, namespace="vision"), state, settings)
    assert obj == original, "without in_place the request's object is left untouched"
    owned = copy.deepcopy(obj)
    in_place = mutate(request_for(owned, namespace="vision"), state, settings, in_place=True)
    assert (in_place.allowed, in_place.patch) == (copied.allowed, copied.patch)
    assert owned == (jsonpatch.apply_patch(original, copied.patch) if copied.patch else original)


def test_an_update_and_a_child_mutated_in_place_get_the_same_patch_as_from_a_copy(state, settings):
    parent = _in_vision(next(p.values[0] for p in WORKLOADS if p.values[0]["kind"] == "RayJob"))
    admitted = jsonpatch.apply_patch(parent, mutate(request_for(parent, namespace="vision"), state, settings).patch)
    updated = copy.deepcopy(admitted)
    del updated["metadata"]["labels"]["tau.azure.com/run-id"]  # a client dropped it: restored from old
    child = copy.deepcopy(admitted)
    child["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "p", "uid": "u",
                                             "controller": True}]
    del child["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]["tau.azure.com/run-id"]
    for obj, old, op in ((updated, admitted, "UPDATE"), (child, None, "CREATE")):
        copied = mutate(request_for(obj, namespace="vision", operation=op, old=old), state, settings)
        owned = copy.deepcopy(obj)
        in_place = mutate(request_for(owned, namespace="vision", operation=op, old=old), state, settings,
                          in_place=True)
        assert copied.patch and in_place.patch == copied.patch
        assert owned == jsonpatch.apply_patch(obj, copied.patch)


@pytest.mark.parametrize("doc", WORKLOADS)
def test_the_full_admission_of_a_real_sample_never_crashes_and_explains_every_denial(doc, state, settings, engine):
    obj = _in_vision(doc)
    obj["metadata"].get("labels", {}).pop("kueue.x-k8s.io/queue-name", None)
    decision = admit(obj, state=state, settings=settings, engine=engine, namespace="vision")
    if decision.allowed:
        assert _schema_errors(decision.object) == []
        return
    # The researcher reads the denial: a headline, then one "- [policy] field: message" line per
    # violation (at most MAX_PROBLEMS_SHOWN, then how many more).
    assert decision.violations, decision.message
    lines = decision.message.splitlines()
    shown = decision.violations[:MAX_PROBLEMS_SHOWN]
    assert len(lines) == 1 + len(shown) + (len(decision.violations) > len(shown)), decision.message
    for v, line in zip(shown, lines[1:], strict=False):
        assert v.policy and v.message, v
        assert line.startswith(f"- [{v.policy}] {v.field + ': ' if v.field else ''}"), line
        assert v.message[:200] in line, (v.message, line)
