"""Every RayJob, RayCluster and batch/v1 Job among KubeRay's and Kueue's own samples, applied
with the built kubectl into a workspace namespace: the API server applies taugate's JSONPatch
(Go's json-patch) and stores what ``taugate admit`` computes offline, queued, suspended, with one
run-id on the object and every pod template and the GPU class on GPU templates only; the same
object applied again changes nothing."""

from __future__ import annotations

import json

import pytest

from taugate.webhook.review import admit
from tests.e2e.workloads import (
    QUEUE,
    RUN_ID,
    WORKSPACE,
    WORKSPACE_QUEUE,
    admitted_problems,
    into_workspace,
    pod_templates,
    sample_workloads,
)

SAMPLES = sample_workloads()


def test_the_upstream_samples_hold_every_workload_kind_from_both_projects():
    kinds = {doc["kind"] for _, doc in SAMPLES}
    assert kinds == {"RayJob", "RayCluster", "Job"}
    assert {i.split("/")[0] for i, _ in SAMPLES} == {"kuberay", "kueue"}
    assert len(SAMPLES) >= 40


def _taugate_fields(obj: dict) -> dict:
    """What taugate sets, for comparing the stored object with the offline decision."""
    meta = obj["metadata"]
    record = json.loads((meta.get("annotations") or {}).get("tau.azure.com/admission", "null"))
    out = {"labels": {k: v for k, v in (meta.get("labels") or {}).items() if k != RUN_ID},
           # the run-id differs, and only the webhook in the cluster holds the admission key
           "admission": {k: v for k, v in record.items() if k not in ("runId", "signature")} if record else record,
           "suspend": obj["spec"].get("suspend"),
           "shutdownAfterJobFinishes": obj["spec"].get("shutdownAfterJobFinishes")}
    for path, tpl in pod_templates(obj):
        spec = tpl.get("spec") or {}
        out[path] = {"labels": sorted((tpl.get("metadata") or {}).get("labels") or {}),
                     "nodeSelector": spec.get("nodeSelector"), "tolerations": spec.get("tolerations"),
                     "volumes": [v["name"] for v in spec.get("volumes") or []],
                     "mounts": [[m["mountPath"] for m in c.get("volumeMounts") or []]
                                for c in spec.get("containers") or []]}
    return out


@pytest.mark.parametrize("index", range(len(SAMPLES)), ids=[i for i, _ in SAMPLES])
def test_kubectl_apply_of_an_upstream_sample_stores_what_taugate_admit_decides(index, platform, example_state,
                                                                                settings, engine):
    sample_id, doc = SAMPLES[index]
    name = f"s{index}-{doc['kind'].lower()}"
    obj = into_workspace(doc, name=name)
    cp = platform.cp
    if (obj["metadata"].get("labels") or {}).get(QUEUE, WORKSPACE_QUEUE) != WORKSPACE_QUEUE:
        # Kueue's samples name their own LocalQueue, which this workspace does not have.
        denied = cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
        assert denied.returncode != 0
        assert f'metadata.labels["{QUEUE}"]' in denied.stderr, denied.stderr
        assert f"allowed: {WORKSPACE_QUEUE}" in denied.stderr, denied.stderr
        del obj["metadata"]["labels"][QUEUE]
    offline = admit(obj, state=example_state, settings=settings, engine=engine)
    applied = cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    if not offline.allowed:
        assert applied.returncode != 0, f"{sample_id}: the API server stored what taugate admit denies"
        for v in offline.violations:
            assert v.field in applied.stderr, applied.stderr
        assert cp.kubectl("get", obj["kind"].lower() + (".ray.io" if obj["kind"] != "Job" else ".batch"), name,
                          "-n", WORKSPACE, check=False).returncode != 0
        return
    assert applied.returncode == 0, f"{sample_id}: {applied.stderr}"
    kind = f"{obj['kind'].lower()}.{'batch' if obj['kind'] == 'Job' else 'ray.io'}"
    stored = cp.get_json(kind, name, "-n", WORKSPACE)
    assert admitted_problems(stored) == []
    assert _taugate_fields(stored) == _taugate_fields(offline.object)
    # Applied again with a label of the user's own: an UPDATE through both webhooks, which keeps
    # the run-id and everything taugate set; then the same file once more stores nothing new.
    # (kubectl applies a custom resource with a JSON merge patch, which replaces a list whole: a
    # worker group list without taugate's placement is sent, and the webhook puts it back, so the
    # API server finds nothing changed and keeps the resourceVersion, though kubectl says
    # "configured".)
    obj["metadata"].setdefault("labels", {})["e2e.example/applied"] = "twice"
    cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    updated = cp.get_json(kind, name, "-n", WORKSPACE)
    assert updated["metadata"]["labels"]["e2e.example/applied"] == "twice"
    assert updated["metadata"]["labels"][RUN_ID] == stored["metadata"]["labels"][RUN_ID]
    assert _taugate_fields(updated) == {**_taugate_fields(stored), "labels": {**_taugate_fields(stored)["labels"],
                                                                            "e2e.example/applied": "twice"}}
    cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    assert cp.get_json(kind, name, "-n",
                       WORKSPACE)["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    cp.kubectl("delete", kind, name, "-n", WORKSPACE, "--wait=false")


def test_the_samples_that_taugate_admits_outnumber_those_it_denies(example_state, settings, engine):
    """A guard on the parametrized test above: at least half the upstream samples take the admitted path
    (where the stored object is checked), not the denied one."""
    admitted = 0
    for _, doc in SAMPLES:
        obj = into_workspace(doc, name="x")
        (obj["metadata"].get("labels") or {}).pop(QUEUE, None)
        admitted += admit(obj, state=example_state, settings=settings, engine=engine).allowed
    assert admitted >= len(SAMPLES) // 2, f"{admitted} of {len(SAMPLES)}"  # 33 of 57 at KubeRay v1.5.0
