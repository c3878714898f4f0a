"""Structure is checked one way, with pydantic (``taugate.structure``): strict types as the Go API
types have them, null an absent optional field, unknown fields left alone, the object never
replaced, and every problem one line with its field path, what was asked and what is allowed."""

from __future__ import annotations

import copy
from typing import Required

import pytest
from pydantic import ValidationError
from typing_extensions import TypedDict

from taugate.kinds import rayjob
from taugate.kinds.base import WorkloadKind
from taugate.models import TauWorkspace
from taugate.structure import Int32, PodTemplateSpec, first_problem, object_depth_problem, validation_problems

WORKER = "spec.rayClusterSpec.workerGroupSpecs[0]"


def _worker(obj: dict) -> dict:
    return obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]


def test_a_string_of_digits_is_not_a_count_and_a_string_true_is_not_a_boolean(classifier):
    _worker(classifier)["replicas"] = "2"
    classifier["spec"]["shutdownAfterJobFinishes"] = "true"
    found = {v.field: v.message for v in rayjob.KIND.malformed(classifier)}
    assert found[f"{WORKER}.replicas"].startswith("is a string ('2'); it must be a whole number from 0 to 2147483647")
    assert found["spec.shutdownAfterJobFinishes"].startswith("is a string ('true'); it must be true or false")


def test_null_is_an_absent_optional_field_and_a_missing_required_one(classifier):
    _worker(classifier)["replicas"] = None
    classifier["metadata"]["labels"] = None
    assert rayjob.KIND.malformed(classifier) == []
    _worker(classifier)["template"] = None
    [v] = rayjob.KIND.malformed(classifier)
    assert (v.field, v.message.split(";")[0]) == (f"{WORKER}.template", "is missing")


def test_unknown_fields_are_allowed_and_the_object_is_never_replaced(classifier):
    _worker(classifier)["somethingNew"] = {"replicas": "not ours to read"}
    classifier["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["x-extra"] = [1]
    before = copy.deepcopy(classifier)
    assert rayjob.KIND.malformed(classifier) == []
    assert classifier == before


def test_a_quantity_names_the_value_asked_and_the_grammar_allowed(classifier):
    limits = _worker(classifier)["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"], limits["memory"] = "lots", "-1Gi"
    found = {v.field.rsplit(".", 1)[1]: v.message for v in rayjob.KIND.malformed(classifier)}
    assert found["cpu"].startswith('is "lots", which is not a Kubernetes quantity (e.g. 2, 500m, 8Gi)')
    assert found["memory"].startswith("is -1Gi; quantities must not be negative")


def test_a_new_kind_needs_only_a_model_of_its_spec_for_its_structure_to_be_checked():
    class SketchSpec(TypedDict, total=False):
        replicas: Int32 | None
        template: Required[PodTemplateSpec]

    class Sketch(WorkloadKind):
        group, version, resource, kind, upstream = "example.com", "v1", "sketches", "Sketch", "none"
        spec_model = SketchSpec

    good = {"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}}
    assert Sketch().malformed(good) == []
    bad = {"metadata": {"labels": {"a": 1}}, "spec": {"replicas": -1, "template": {"spec": {"containers": []}}}}
    assert [(v.policy, v.field, v.message.split(";")[0]) for v in Sketch().malformed(bad)] == [
        ("object-shape", "metadata.labels.a", "is a number (1)"),
        ("object-shape", "spec.replicas", "is -1"),
        ("object-shape", "spec.template.spec.containers", "is empty"),
    ]


def test_an_error_of_taugates_own_kinds_reads_with_the_same_field_path_and_words():
    obj = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace", "metadata": {"name": "w"},
           "spec": {"role": "boss", "quota": [{"flavor": "h100", "nominalQuota": True}, {"flavor": ""}]}}
    with pytest.raises(ValidationError) as e:
        TauWorkspace.model_validate(obj)
    assert first_problem(e.value).startswith("spec.role: is a string ('boss'); input should be 'researcher' or "), \
        first_problem(e.value)
    found = dict(validation_problems(e.value))
    assert found["spec.quota[1].nominalQuota"] == "is missing; it is required", found


def test_an_object_nested_past_the_limit_is_named_at_the_first_level_too_deep():
    value: dict = {}
    for _ in range(5):
        value = {"a": value}
    assert object_depth_problem({"spec": value}, limit=3) == ("spec.a.a.a", "nests more than 3 levels deep; "
                                                              "Kubernetes objects nest about 20 levels, taugate "
                                                              "reads up to 3")
