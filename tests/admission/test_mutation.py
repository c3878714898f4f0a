"""What taugate adds to a raw workload created in a workspace, and what it leaves alone."""

from __future__ import annotations

import copy
import json

import jsonpatch
import yaml

from taugate import labels
from taugate.snapshot import build_state, read_objects
from taugate.webhook.review import admit, mutate, request_for
from tests.admission.conftest import EXAMPLE_CLUSTER

WORKER = ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template")
HEAD = ("spec", "rayClusterSpec", "headGroupSpec", "template")


def _at(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _mutated(obj, state, settings, ns="vision", **kw):
    d = mutate(request_for(obj, namespace=ns, **kw), state, settings)
    assert d.allowed, d.message
    return d, (jsonpatch.apply_patch(obj, d.patch) if d.patch else obj)


def test_the_image_classifier_comes_out_queued_suspended_labelled_and_placed(classifier, state, settings):
    _, out = _mutated(classifier, state, settings)
    meta = out["metadata"]
    assert "name" not in meta and meta["generateName"] == "pytorch-image-classifier-"
    assert meta["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert meta["labels"][labels.WORKLOAD_PROFILE] == "h100-1gpu"
    assert meta["labels"][labels.WORKSPACE] == "vision"
    assert meta["labels"][labels.KUEUE_PRIORITY_CLASS] == "tau-train-default"
    assert out["spec"]["suspend"] is True
    run_id = meta["labels"][labels.RUN_ID]
    assert len(run_id) == 24 and all(c in "0123456789abcdef" for c in run_id)
    for path in (HEAD, WORKER):
        assert _at(out, path)["metadata"]["labels"][labels.RUN_ID] == run_id
    worker = _at(out, WORKER)["spec"]
    assert worker["nodeSelector"] == {settings.gpu_class_label: "h100"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    head = _at(out, HEAD)["spec"]
    assert "nodeSelector" not in head and "tolerations" not in head


def test_every_create_mints_a_fresh_run_id_never_derived_from_the_name(classifier, state, settings):
    ids = set()
    for _ in range(5):
        _, out = _mutated(classifier, state, settings)
        ids.add(out["metadata"]["labels"][labels.RUN_ID])
    assert len(ids) == 5


def test_mutating_the_output_again_yields_no_patch_at_all(classifier, state, settings):
    _, out = _mutated(classifier, state, settings)
    again = mutate(request_for(out, namespace="vision"), state, settings)
    assert again.allowed and again.patch is None


def test_an_object_without_a_labels_map_gets_one(state, settings):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "pi", "image": "perl:5.34", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}
    _, out = _mutated(job, state, settings)
    assert out["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert out["spec"]["template"]["metadata"]["labels"][labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]


def test_label_keys_with_slashes_and_tildes_are_escaped_in_the_patch(classifier, state, settings):
    classifier["metadata"]["labels"] = {"example.com/a~b": "x", "team/odd~/key": "y"}
    d, out = _mutated(classifier, state, settings)
    assert out["metadata"]["labels"]["example.com/a~b"] == "x"
    assert "/metadata/labels/kueue.x-k8s.io~1queue-name" in {op["path"] for op in d.patch}
    assert labels.RUN_ID in out["metadata"]["labels"]


def test_a_user_node_selector_for_the_gpu_class_is_never_overwritten(classifier, state, settings):
    _at(classifier, WORKER)["spec"]["nodeSelector"] = {settings.gpu_class_label: "a100"}
    classifier["metadata"]["labels"] = {labels.WORKLOAD_PROFILE: "h100-1gpu"}
    _, out = _mutated(classifier, state, settings)
    assert _at(out, WORKER)["spec"]["nodeSelector"][settings.gpu_class_label] == "a100"


def test_a_namespace_that_is_not_a_workspace_gets_no_change(classifier, state, settings):
    d = mutate(request_for(classifier, namespace="default"), state, settings)
    assert d.allowed and d.patch is None


def test_kuberays_submitter_job_and_raycluster_inherit_the_parents_run_id_and_nothing_else(state, settings):
    run_id = "0123456789abcdef01234567"
    child = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "rayjob-sample-abcde", "namespace": "vision", "labels": {labels.RUN_ID: run_id},
                          "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rayjob-sample",
                                               "uid": "u1", "controller": True}]},
             "spec": {"template": {"spec": {"restartPolicy": "Never",
                                            "containers": [{"name": "ray-job-submitter",
                                                            "image": "rayproject/ray:2.9.0"}]}}}}
    d, out = _mutated(child, state, settings,
                      user_info={"username": "system:serviceaccount:ray-system:kuberay-operator"})
    assert out["spec"]["template"]["metadata"]["labels"] == {labels.RUN_ID: run_id}
    assert labels.KUEUE_QUEUE_NAME not in out["metadata"]["labels"]
    assert "suspend" not in out["spec"]
    assert {op["path"] for op in d.patch} == {"/spec/template/metadata"}


def test_on_update_the_run_id_is_kept_even_when_the_client_drops_it(classifier, state, settings):
    _, created = _mutated(classifier, state, settings)
    run_id = created["metadata"]["labels"][labels.RUN_ID]
    updated = copy.deepcopy(created)
    del updated["metadata"]["labels"][labels.RUN_ID]
    _at(updated, WORKER)["metadata"]["labels"][labels.RUN_ID] = "f" * 24
    updated["spec"]["suspend"] = False
    _, out = _mutated(updated, state, settings, operation="UPDATE", old=created)
    assert out["metadata"]["labels"][labels.RUN_ID] == run_id
    assert _at(out, WORKER)["metadata"]["labels"][labels.RUN_ID] == run_id
    assert out["spec"]["suspend"] is False, "on UPDATE, suspend is Kueue's to change"


def test_subresources_deletes_and_taugates_own_requests_pass_untouched(classifier, state, settings):
    for kw in ({"operation": "DELETE"}, {"operation": "CONNECT"}):
        assert mutate(request_for(classifier, namespace="vision", **kw), state, settings).patch is None
    status = {**request_for(classifier, namespace="vision", operation="UPDATE", old=classifier),
              "subResource": "status"}
    assert mutate(status, state, settings).patch is None
    own = request_for(classifier, namespace="vision", user_info={"username": settings.service_account})
    assert mutate(own, state, settings).patch is None


def test_a_workspace_with_a_data_volume_mounts_it_at_data_in_every_pod(classifier, state, settings):
    _, out = _mutated(classifier, state, settings)
    for path in (HEAD, WORKER):
        spec = _at(out, path)["spec"]
        assert {"name": "tau-data", "persistentVolumeClaim": {"claimName": "vision-data"}} in spec["volumes"]
        assert {"name": "tau-data", "mountPath": "/data"} in spec["containers"][0]["volumeMounts"]


def test_the_admission_record_names_profile_queue_and_profile_set_hash(classifier, state, settings):
    import json
    _, out = _mutated(classifier, state, settings)
    record = json.loads(out["metadata"]["annotations"][labels.ADMISSION_RECORD])
    assert record["profile"] == "h100-1gpu" and record["queue"] == "vision-queue"
    assert record["profileSetHash"] == state.profile_set_hash and len(state.profile_set_hash) == 64


def test_kueue_sample_without_shutdown_flag_gets_shutdown_after_job_finishes(state, settings):
    from tests.paths import KUBERAY_SAMPLES
    docs = yaml.safe_load_all((KUBERAY_SAMPLES / "ray-job.custom-head-svc.yaml").read_text())
    doc = next(d for d in docs if d and d["kind"] == "RayJob")
    doc["spec"].pop("shutdownAfterJobFinishes", None)
    _, out = _mutated(doc, state, settings)
    assert out["spec"]["shutdownAfterJobFinishes"] is True


def test_a_stale_profile_set_fails_closed_with_a_reason(classifier, settings):
    objs = read_objects(EXAMPLE_CLUSTER)
    cluster = next(o for o in objs if o["kind"] == "TauCluster")
    cluster["status"] = {"workloadProfiles": {"profileSetHash": "0" * 64, "profiles": [
        {**p, "conditions": [{"type": "Ready", "status": "True", "reason": "Resolved", "message": "",
                              "lastTransitionTime": "2026-11-29T00:00:00Z"}]}
        for p in cluster["spec"]["workloadProfiles"]]}}
    stale = build_state(objs, settings)
    d = mutate(request_for(classifier, namespace="vision"), stale, settings)
    assert not d.allowed and "stale" in d.message and "0" * 64 in d.message


def _on_existing_cluster(classifier):
    """The image classifier turned into a RayJob that runs on an existing RayCluster."""
    job = copy.deepcopy(classifier)
    del job["spec"]["rayClusterSpec"]
    job["spec"].pop("shutdownAfterJobFinishes", None)
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared-vision"}
    return job


def test_a_rayjob_on_an_existing_cluster_gets_a_run_id_but_is_neither_queued_nor_suspended(classifier, state,
                                                                                          settings):
    # KubeRay: "the ClusterSelector mode doesn't support the suspend operation";
    # Kueue: "a kueue managed job should not use an existing cluster".
    _, out = _mutated(_on_existing_cluster(classifier), state, settings)
    meta_labels = out["metadata"]["labels"]
    assert labels.KUEUE_QUEUE_NAME not in meta_labels and labels.KUEUE_PRIORITY_CLASS not in meta_labels
    assert len(meta_labels[labels.RUN_ID]) == 24 and meta_labels[labels.WORKSPACE] == "vision"
    assert "suspend" not in out["spec"] and "shutdownAfterJobFinishes" not in out["spec"]
    record = json.loads(out["metadata"]["annotations"][labels.ADMISSION_RECORD])
    assert record["queue"] is None and record["workspace"] == "vision"
    d = admit(_on_existing_cluster(classifier), state=state, settings=settings, namespace="vision")
    assert d.allowed, d.message


def test_a_rayjob_with_a_deletion_strategy_does_not_get_shutdown_after_job_finishes(classifier, state, settings):
    # KubeRay: shutdownAfterJobFinishes and deletionStrategy.deletionRules are mutually exclusive.
    classifier["spec"].pop("shutdownAfterJobFinishes", None)
    classifier["spec"]["deletionStrategy"] = {"deletionRules": [
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}]}
    _, out = _mutated(classifier, state, settings)
    assert "shutdownAfterJobFinishes" not in out["spec"] and out["spec"]["suspend"] is True


# --- KubeRay's submitter pod carries the run-id ----------------------------------------------------

def test_a_rayjob_in_k8s_job_mode_gets_kuberays_default_submitter_template_with_the_run_id(classifier, state,
                                                                                       settings):
    # KubeRay v1.5 copies no RayJob label onto the submitter Job; found on the whole stack
    # (tests/e2e/test_the_whole_run.py): without this the recorder never saw the submitter pod.
    assert "submitterPodTemplate" not in classifier["spec"]
    _, out = _mutated(classifier, state, settings)
    tpl = out["spec"]["submitterPodTemplate"]
    run_id = out["metadata"]["labels"][labels.RUN_ID]
    assert tpl["metadata"]["labels"][labels.RUN_ID] == run_id
    (c,) = tpl["spec"]["containers"]
    head_image = classifier["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert c["name"] == "ray-job-submitter" and c["image"] == head_image
    assert c["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
    assert tpl["spec"]["restartPolicy"] == "Never"
    assert "nodeSelector" not in tpl["spec"] and "tolerations" not in tpl["spec"]  # a CPU pod: no GPU placement


def test_a_rayjob_with_its_own_submitter_or_another_submission_mode_keeps_it(classifier, state, settings):
    own = copy.deepcopy(classifier)
    own["spec"]["submitterPodTemplate"] = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "my-submitter", "image": "example/submit:1"}]}}
    _, out = _mutated(own, state, settings)
    assert [c["name"] for c in out["spec"]["submitterPodTemplate"]["spec"]["containers"]] == ["my-submitter"]
    submitter_labels = out["spec"]["submitterPodTemplate"]["metadata"]["labels"]
    assert submitter_labels[labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]
    for mode in ("HTTPMode", "SidecarMode", "InteractiveMode"):
        other = copy.deepcopy(classifier)
        other["spec"]["submissionMode"] = mode
        _, out = _mutated(other, state, settings)
        assert "submitterPodTemplate" not in out["spec"], mode
