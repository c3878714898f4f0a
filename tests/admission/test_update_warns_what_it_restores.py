"""An UPDATE whose change taugate undoes is never undone silently: ``kubectl label ...
tau.azure.com/run-id-`` or a profile relabel prints ``labeled`` and exit 0, so the AdmissionReview
carries a Warning (kubectl prints it) naming the field, the value put back, what the UPDATE did
and why. An UPDATE that changes nothing of taugate's (Kueue unsuspending, a user's own label, the
garbage collector) gets no warning."""

from __future__ import annotations

import copy

import jsonpatch

from taugate import labels
from taugate.webhook.mutation import template_warnings
from taugate.webhook.patching import Edits
from taugate.webhook.review import admit, mutate, request_for
from tests import upstream_manifests as m


def _admitted(state, settings, engine) -> dict:
    d = admit(m.classifier(), state=state, settings=settings, engine=engine)
    assert d.allowed, d.message
    return m.stored(d.object, "resnet-x7k2p")


def _update(edited: dict, stored: dict, state, settings):
    d = mutate(request_for(edited, namespace="vision", operation="UPDATE", old=stored), state, settings)
    assert d.allowed, d.message
    return d


def test_removing_the_run_id_label_warns_that_it_was_restored_with_its_value(state, settings, engine):
    stored = _admitted(state, settings, engine)
    run_id = stored["metadata"]["labels"][labels.RUN_ID]
    edited = copy.deepcopy(stored)
    del edited["metadata"]["labels"][labels.RUN_ID]  # kubectl label rayjob/resnet-x7k2p tau.azure.com/run-id-
    d = _update(edited, stored, state, settings)
    assert jsonpatch.apply_patch(edited, d.patch)["metadata"]["labels"][labels.RUN_ID] == run_id
    assert d.warnings == [f'taugate restored metadata.labels["tau.azure.com/run-id"]="{run_id}" (this update '
                          f"removed it): an admitted workload keeps its run-id (its TauRun and evidence record are "
                          f"keyed by it)"]


def test_relabelling_the_profile_warns_with_the_value_asked_and_how_to_change_profile(state, settings, engine):
    stored = _admitted(state, settings, engine)
    profile = stored["metadata"]["labels"][labels.WORKLOAD_PROFILE]
    edited = copy.deepcopy(stored)
    edited["metadata"]["labels"][labels.WORKLOAD_PROFILE] = "h100-8gpu"
    d = _update(edited, stored, state, settings)
    assert jsonpatch.apply_patch(edited, d.patch)["metadata"]["labels"][labels.WORKLOAD_PROFILE] == profile
    [warning] = d.warnings
    assert warning.startswith(f'taugate restored metadata.labels["tau.azure.com/workload-profile"]="{profile}" '
                              f'(this update set "h100-8gpu"): a workload keeps the profile it was admitted under')
    assert "delete it and create it again with the new label" in warning


def test_every_restored_label_and_the_admission_record_get_one_warning_each(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    edited["metadata"]["labels"][labels.GPU_CLASS] = "a100"
    del edited["metadata"]["labels"][labels.WORKSPACE]
    del edited["metadata"]["labels"][labels.KUEUE_QUEUE_NAME]
    edited["metadata"]["annotations"][labels.ADMISSION_RECORD] = '{"profile":"h100-8gpu","workspace":"nlp"}'
    d = _update(edited, stored, state, settings)
    fields = [w.split("=", 1)[0].split(" (", 1)[0] for w in d.warnings]
    assert sorted(fields) == sorted([
        'taugate restored metadata.labels["tau.azure.com/gpu-class"]',
        'taugate restored metadata.labels["tau.azure.com/workspace"]',
        'taugate restored metadata.labels["kueue.x-k8s.io/queue-name"]',
        'taugate restored metadata.annotations["tau.azure.com/admission"]'])
    final = jsonpatch.apply_patch(edited, d.patch)
    assert final["metadata"]["labels"] == stored["metadata"]["labels"]
    assert any('(this update changed it): the admission record is signed' in w for w in d.warnings)


def test_a_huge_forged_value_is_quoted_short_in_the_warning(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    edited["metadata"]["labels"][labels.WORKLOAD_PROFILE] = "x" * 100_000
    [warning] = _update(edited, stored, state, settings).warnings
    assert len(warning) < 600 and '..." (100000 characters)' in warning


def test_updates_that_change_nothing_of_taugates_get_no_warning(state, settings, engine):
    stored = _admitted(state, settings, engine)
    unsuspended = copy.deepcopy(stored)
    unsuspended["spec"]["suspend"] = False  # Kueue admits the workload
    own_label = copy.deepcopy(stored)
    own_label["metadata"]["labels"]["team"] = "vision"  # kubectl label rayjob/resnet-x7k2p team=vision
    for edited in (unsuspended, own_label, m.gc_finalizer_removal(stored)):
        assert _update(edited, stored, state, settings).warnings == []


def test_an_object_taugate_never_admitted_gets_no_warning(state, settings):
    legacy = m.stored(m.classifier(), "before-taugate")
    edited = copy.deepcopy(legacy)
    edited["metadata"].setdefault("labels", {})[labels.WORKLOAD_PROFILE] = "h100-8gpu"
    d = _update(edited, legacy, state, settings)
    assert d.patch is None and d.warnings == []


def test_a_gpu_class_selector_removed_from_a_worker_template_is_named_in_the_warning(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    del edited["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"][labels.GPU_CLASS]
    d = _update(edited, stored, state, settings)
    assert d.warnings == [
        'taugate set spec.rayClusterSpec.workerGroupSpecs[0].template.spec.nodeSelector["tau.azure.com/gpu-class"] '
        "again: a workload keeps what it was admitted with on its pod templates (the run-id label, the profile's "
        "GPU placement, the workspace data volume, the pod priority), and this update left it out"]


def test_a_server_side_apply_that_replaced_the_worker_groups_is_told_what_was_set_again(state, settings, engine):
    stored = _admitted(state, settings, engine)
    edited = copy.deepcopy(stored)
    edited["spec"]["rayClusterSpec"]["workerGroupSpecs"] = m.classifier()["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    d = _update(edited, stored, state, settings)
    assert jsonpatch.apply_patch(edited, d.patch) == stored
    [warning] = d.warnings
    template = "spec.rayClusterSpec.workerGroupSpecs[0].template"
    assert warning.startswith(f"taugate set {template}.metadata.labels, {template}.spec.nodeSelector")
    assert f"{template}.spec.priorityClassName again: " in warning and " more " not in warning
    assert len(d.patch) == 5  # each one named


def test_the_warning_names_five_fields_and_counts_the_rest():
    edits = Edits({"metadata": {}, "spec": {"template": {"spec": {"nodeSelector": {}}}}})
    selector = edits.doc["spec"]["template"]["spec"]["nodeSelector"]
    for i in range(8):
        edits.set(selector, ("spec", "template", "spec", "nodeSelector"), f"example.com/k{i}", "v")
    edits.set(edits.doc["metadata"], ("metadata",), "name", "x")  # metadata: told by restore_warnings
    [warning] = template_warnings(edits)
    assert warning.startswith('taugate set spec.template.spec.nodeSelector["example.com/k0"], ')
    assert '["example.com/k4"] and 3 more again: ' in warning and "k5" not in warning
