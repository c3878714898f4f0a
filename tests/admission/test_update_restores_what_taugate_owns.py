"""On UPDATE, what taugate set at CREATE is restored when a user UPDATE drops or forges it: its
labels, the admission record, and (where the pod templates may change) the profile's placement
and the workspace data volume. Found on the real API server: a second `kubectl apply
--server-side` replaces a RayJob's whole worker group list (an atomic list in KubeRay's CRD),
and the GPU workers lost their GPU-class selector and toleration."""

from __future__ import annotations

import copy

import jsonpatch

from taugate import labels
from taugate.webhook.review import admit, mutate, request_for
from tests import upstream_manifests as m

GPU_CLASS = "tau.azure.com/gpu-class"


def _admitted(state, settings, engine) -> dict:
    d = admit(m.classifier(), state=state, settings=settings, engine=engine)
    assert d.allowed, d.message
    return m.stored(d.object, "resnet-x7k2p")


def _update(edited: dict, stored: dict, state, settings) -> dict:
    d = mutate(request_for(edited, namespace="vision", operation="UPDATE", old=stored), state, settings)
    assert d.allowed, d.message
    return jsonpatch.apply_patch(edited, d.patch) if d.patch else edited


def test_a_server_side_apply_that_replaces_the_worker_groups_gets_the_profiles_placement_back(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    # What the researcher's manifest holds for the atomic list: the worker group as written.
    as_written = m.classifier()["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    edited["spec"]["rayClusterSpec"]["workerGroupSpecs"] = copy.deepcopy(as_written)
    final = _update(edited, stored, state, settings)
    assert final["spec"]["rayClusterSpec"]["workerGroupSpecs"] == stored["spec"]["rayClusterSpec"]["workerGroupSpecs"]


def test_removing_the_gpu_class_selector_and_toleration_by_hand_puts_them_back(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    worker = edited["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    del worker["nodeSelector"][GPU_CLASS]
    worker["tolerations"] = []
    final = _update(edited, stored, state, settings)
    placed = final["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert placed["nodeSelector"][GPU_CLASS] == "h100"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in placed["tolerations"]


def test_a_selector_kueue_added_on_admission_is_kept_beside_the_restored_placement(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    edited["spec"]["suspend"] = False  # Kueue admits it and injects its flavor's node labels
    worker = edited["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["nodeSelector"]["cloud.example/pool"] = "h100-spot"
    d = mutate(request_for(edited, namespace="vision", operation="UPDATE", old=stored), state, settings)
    assert d.allowed and d.patch is None, d.patch


def test_forged_or_removed_taugate_labels_and_admission_record_are_restored(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    edited["metadata"]["labels"][labels.GPU_CLASS] = "a100"
    edited["metadata"]["labels"][labels.WORKLOAD_PROFILE] = "h100-8gpu"
    del edited["metadata"]["labels"][labels.WORKSPACE]
    edited["metadata"]["annotations"][labels.ADMISSION_RECORD] = '{"profile":"h100-8gpu","workspace":"nlp"}'
    final = _update(edited, stored, state, settings)
    for key in (labels.GPU_CLASS, labels.WORKLOAD_PROFILE, labels.WORKSPACE):
        assert final["metadata"]["labels"][key] == stored["metadata"]["labels"][key]
    record = labels.ADMISSION_RECORD
    assert final["metadata"]["annotations"][record] == stored["metadata"]["annotations"][record]


def test_a_removed_data_volume_is_mounted_again(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    head = edited["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["volumes"] = []
    head["containers"][0]["volumeMounts"] = []
    final = _update(edited, stored, state, settings)
    restored = final["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert restored["volumes"] == [{"name": "tau-data", "persistentVolumeClaim": {"claimName": "vision-data"}}]
    assert restored["containers"][0]["volumeMounts"] == [{"name": "tau-data", "mountPath": "/data"}]


def test_a_started_jobs_template_is_never_patched_while_its_labels_are_restored(state, settings, engine):
    d = admit(m.kueue_job(), state=state, settings=settings, engine=engine)
    assert d.allowed, d.message
    stored = m.started_job(m.stored(d.object, "agi-x7k2p"))
    edited = copy.deepcopy(stored)
    edited["spec"]["template"]["spec"]["volumes"] = []
    del edited["metadata"]["labels"][labels.WORKLOAD_PROFILE]
    d = mutate(request_for(edited, namespace="vision", operation="UPDATE", old=stored), state, settings)
    assert d.allowed
    assert [op["path"] for op in d.patch] == ["/metadata/labels/tau.azure.com~1workload-profile"]


def test_an_object_taugate_never_admitted_gets_nothing_on_update(state, settings):
    legacy = m.stored(m.classifier(), "before-taugate")
    edited = copy.deepcopy(legacy)
    edited["metadata"].setdefault("labels", {})["team"] = "vision"
    d = mutate(request_for(edited, namespace="vision", operation="UPDATE", old=legacy), state, settings)
    assert d.allowed and d.patch is None
