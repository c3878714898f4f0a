"""What admission remembers between reviews, and that remembering never changes an answer.

Admission remembers results that depend only on JSON it has already seen: a spec's structure
problems (``taugate.structure.workload_problems``), a pod spec's GPU demand (``taugate.pods.pod_resources``),
a pod template's part of the policy input and the input's workspace/profile/cluster part
(``taugate.policy_input``). The server edits the object of each review in place, so nothing
remembered may hold a reference into an object.
"""

from __future__ import annotations

import copy
import dataclasses
from decimal import Decimal

from taugate import pods, policy_input, structure
from taugate.kinds import base, kind_for
from taugate.snapshot import FlavorQuota
from taugate.webhook import review
from tests.admission.test_snapshot_types import _leaves
from tests.policies.test_engine import image_classifier
from tests.policies.test_policy_input import build
from tests.workload_samples import at

RAYJOB = kind_for("ray.io", "RayJob")


def forget() -> None:
    """Empty every memo of the pure functions (as a new process starts)."""
    pods._resources_memo.clear()
    base._templates_memo.clear()
    policy_input._template_memo.clear()
    structure._spec_memo.clear()


# --- an object edited in place after its review never changes what the next review reads --------


def test_a_mutation_in_place_does_not_reach_the_policy_input_of_the_next_object_of_the_same_shape(
        example_state, settings):
    forget()
    first = image_classifier()
    expected = build(copy.deepcopy(first), example_state, settings)
    build(first, example_state, settings)  # remembered from ``first``
    request = review.request_for(first, namespace="vision")
    decision = review.mutate(request, example_state, settings, in_place=True)
    assert decision.allowed and decision.patch
    worker = first["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"]  # the edits reached ``first`` itself

    again = build(image_classifier(), example_state, settings)
    assert again == expected
    sample = image_classifier()["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert again["object"]["podTemplates"][1]["nodeSelector"] == sample.get("nodeSelector", {})
    assert sample.get("nodeSelector", {}) != worker["nodeSelector"]


def test_the_remembered_template_input_is_a_copy_not_a_view_of_the_object(example_state, settings):
    forget()
    obj = image_classifier()
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    doc = build(obj, example_state, settings)
    selector = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"]
    remembered = doc["object"]["podTemplates"][1]["nodeSelector"]
    assert remembered == {"pool": "a"} and remembered is not selector
    selector["pool"] = "b"
    assert build(copy.deepcopy(image_classifier()), example_state, settings)["object"]["podTemplates"][1][
        "nodeSelector"] == {}
    assert remembered == {"pool": "a"}


# --- the same answer, remembered or not ---------------------------------------------------------


def test_a_pod_spec_gets_the_same_gpu_demand_remembered_as_computed():
    obj = image_classifier(4, 2)
    forget()
    computed = [(t.container_gpus, t.gpus_per_pod, t.mig_per_pod) for t in RAYJOB.pod_templates(obj)]
    remembered = [(t.container_gpus, t.gpus_per_pod, t.mig_per_pod) for t in RAYJOB.pod_templates(obj)]
    assert remembered == computed
    assert [g for g, _, _ in computed][1][0].limit_n == Decimal(2) and computed[1][1] == 2


def test_a_spec_checked_before_reports_its_problems_again_with_the_metadata_of_each_object():
    forget()
    obj = image_classifier()
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "2"
    first = RAYJOB.malformed(obj)
    other = copy.deepcopy(obj)
    other["metadata"]["labels"] = {"team": 7}
    second = RAYJOB.malformed(other)
    assert [v.field for v in first] == ["spec.rayClusterSpec.workerGroupSpecs[0].replicas"]
    assert [v.field for v in second] == ["metadata.labels.team"] + [v.field for v in first]


def test_specs_that_differ_only_in_a_json_type_are_never_confused():
    forget()
    whole = image_classifier()
    assert RAYJOB.malformed(whole) == []
    fractional = copy.deepcopy(whole)
    fractional["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 4.0
    assert [v.field for v in RAYJOB.malformed(fractional)] == ["spec.rayClusterSpec.workerGroupSpecs[0].replicas"]


def test_a_spec_orjson_cannot_write_is_checked_whole_every_time():
    forget()
    obj = image_classifier()
    obj["spec"]["entrypointNumGpus"] = 2**70  # beyond 64 bits: not remembered, still checked
    assert RAYJOB.malformed(obj) == RAYJOB.malformed(copy.deepcopy(obj))
    assert structure._spec_memo == {}


# --- the cluster part belongs to one cluster state ----------------------------------------------


def test_a_new_cluster_state_builds_its_own_queue_quota_for_the_policy_input(example_state, settings):
    before = build(image_classifier(), example_state, settings)["cluster"]["queue"]["gpu"]
    key = ("vision", "vision-queue")
    grown = tuple(dataclasses.replace(q, nominal=q.nominal + 100) if q.resource == "nvidia.com/gpu" else q
                  for q in example_state.queue_quotas[key])
    assert all(isinstance(q, FlavorQuota) for q in grown)
    state = dataclasses.replace(example_state, queue_quotas={**example_state.queue_quotas, key: grown})
    after = build(image_classifier(), state, settings)["cluster"]["queue"]["gpu"]
    assert after["nominal"] == before["nominal"] + 100 * len(before["flavors"])
    assert build(image_classifier(), example_state, settings)["cluster"]["queue"]["gpu"] == before


def test_a_template_that_differs_in_any_field_gets_its_own_policy_input():
    """The template memo's key holds every field the template's input reads: a template changed
    in any one field (its pod spec aside, which is the key's JSON) gets the input built for it."""
    forget()
    worker = RAYJOB.pod_templates(image_classifier(4, 2))[1]
    policy_input._template_input(worker, worker.replicas)  # remembered
    changes = {"role": "head", "group": "other", "path": ("spec", "x"), "group_path": ("spec", "y"),
               "replicas": worker.replicas + 1, "min_replicas": worker.min_replicas + 1,
               "resources_at": ("spec", "trainer", "resourcesPerNode"),
               "ray_start_params": {**worker.ray_start_params, "num-gpus": "1"},
               # what the cluster's DRA objects add to the same pod spec (taugate.demand.govern)
               "gpus_per_pod": worker.gpus_per_pod + 2, "dra_gpus": 2,
               "device_access": ("container x is privileged",)}
    derived = {"template", "spec", "container_gpus", "mig_per_pod", "spec_json"}
    assert set(changes) | derived == {f.name for f in dataclasses.fields(worker)}
    for name, value in changes.items():
        changed = dataclasses.replace(worker, **{name: value})
        assert policy_input._template_input(changed, changed.replicas) == \
            policy_input._build_template_input(changed, changed.replicas), name
    assert policy_input._template_input(worker, 99) == policy_input._build_template_input(worker, 99)


def test_a_resolution_is_remembered_per_cluster_state(example_state, settings):
    from taugate.webhook.resolution import Resolution, Unresolved, resolve

    obj = image_classifier()
    templates = RAYJOB.pod_templates(obj)
    ws = example_state.workspace_for("vision")
    first = resolve(obj, templates, ws, example_state, settings)
    assert isinstance(first, Resolution)
    assert resolve(copy.deepcopy(obj), templates, ws, example_state, settings) is first
    without_queue = dataclasses.replace(example_state, local_queues={})
    other = resolve(obj, templates, ws, without_queue, settings)
    assert isinstance(other, Unresolved) and [v.policy for v in other.violations] == ["queue"]
    labelled = copy.deepcopy(obj)
    labelled["metadata"].setdefault("labels", {})["tau.azure.com/workload-profile"] = "no-such-profile"
    refused = resolve(labelled, templates, ws, example_state, settings)
    assert isinstance(refused, Unresolved) and "no-such-profile" in refused.violations[0].message


# --- variants of real objects, one field changed at a time -------------------------------------


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return str(int(value) + 1) if value.isdigit() else value + "x"
    return "x"


def _variants(obj):
    """``obj`` changed in one place at a time: every scalar, plus metadata a review may carry."""
    for path, value in _leaves(obj):
        if isinstance(value, dict | list):
            continue
        new = copy.deepcopy(obj)
        at = new
        for step in path[:-1]:
            at = at[step]
        at[path[-1]] = _changed(value)
        yield path, new
    extra = {"labels": {"tau.azure.com/run-id": "r-2"}, "annotations": {"note": "n"},
             "generateName": "g-", "ownerReferences": [{"kind": "X", "name": "x"}]}
    for key, value in extra.items():
        new = copy.deepcopy(obj)
        new["metadata"][key] = value
        yield ("metadata", key), new
    hidden = copy.deepcopy(obj)
    hidden["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    yield ("metadata", "annotations", "last-applied"), hidden


def _objects():
    from tests.admission.test_kind_registry import SAMPLES

    job = copy.deepcopy(SAMPLES["Job"])
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    pod = copy.deepcopy(SAMPLES["Pod"])
    pod["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "g"}
    autoscaled = image_classifier(4, 2)
    autoscaled["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    return [image_classifier(4, 2), autoscaled, job, pod, *(copy.deepcopy(SAMPLES[k]) for k in sorted(SAMPLES))]


def _kind_of(obj):
    group = obj["apiVersion"].rpartition("/")[0]
    return kind_for(group, obj["kind"])


# --- pod templates remembered by the spec: the same templates, bound to each object ---------------


def test_templates_read_from_a_remembered_spec_are_the_fresh_ones_bound_to_the_object():
    """Every scalar of real and registry samples changed one at a time (metadata included), each
    read after the original was remembered: the templates equal ``pod_templates`` of the changed
    object and hold its own template dicts. A kind whose templates read the metadata would fail
    here unless it sets ``templates_from_spec = False``."""
    compared = 0
    for obj in _objects():
        kind = _kind_of(obj)
        kind.read(copy.deepcopy(obj))  # remembered
        for path, new in [((), obj), *_variants(obj)]:
            malformed, templates = kind.read(new)
            assert malformed == kind.malformed(new), (obj["kind"], path)
            if malformed:
                continue
            compared += 1
            fresh = kind.pod_templates(new)
            assert templates == fresh, (obj["kind"], path)
            for t in templates:
                if kind.templates_from_spec:
                    assert t.template is at(new, t.path), (obj["kind"], path)
                if t.ray_start_params:
                    assert t.ray_start_params is at(new, (*t.group_path, "rayStartParams"))
    assert compared > 300
    assert {k.kind for k in map(_kind_of, _objects()) if not k.templates_from_spec} == {"Job", "Pod", "TrainJob"}


def test_a_remembered_template_holds_no_reference_into_the_object_it_was_read_from():
    forget()
    obj = image_classifier()
    RAYJOB.read(obj)
    ((kind, blueprints),) = base._templates_memo.values()
    assert kind is RAYJOB and all(t.template == {} and t.spec == {} for t in blueprints)
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"] = "9"  # edited in place
    again = RAYJOB.read(image_classifier())[1]
    assert again == RAYJOB.pod_templates(image_classifier())
