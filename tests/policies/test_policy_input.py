"""The policy input contract: built by one pure function, documented by a JSON Schema."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import jsonschema
import pytest

from taugate.kinds import kind_for
from taugate.policy_input import build_policy_input, gpu_quota
from taugate.snapshot import FlavorQuota
from tests.policies.conftest import POLICIES
from tests.policies.test_engine import image_classifier

SCHEMA = json.loads((POLICIES / "input.schema.json").read_text())


def build(obj, state, settings, *, namespace="vision", profile="h100-4gpu"):
    templates = kind_for(obj["apiVersion"], obj["kind"]).pod_templates(obj)
    ws = state.workspace_for(namespace)
    return build_policy_input(obj=obj, templates=templates, operation="CREATE", user_info={"username": "alice"},
                              namespace=namespace, workspace=ws, profile=state.profiles[profile],
                              queue=ws.local_queue(state.default_queue), state=state,
                              gpu_class_label=settings.gpu_class_label)


def test_every_sample_input_matches_the_documented_schema(sample_inputs):
    docs = sample_inputs
    assert len(docs) >= 48
    for doc in docs:
        jsonschema.validate(doc, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**docs[0], "operation": "DELETE"}, SCHEMA)


def test_the_input_is_built_purely_and_keeps_its_keyword_signature(example_state, settings):
    obj = image_classifier(16, 4)
    before = copy.deepcopy(obj)
    first = build(obj, example_state, settings)
    assert obj == before
    assert build(obj, example_state, settings) == first
    assert first["object"]["totalGpus"] == 64 and first["object"]["maxGpusPerPod"] == 4
    worker = first["object"]["podTemplates"][1]
    assert worker["replicasField"] == "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
    assert worker["containers"][0]["gpus"] == 4
    assert first["cluster"]["queue"]["gpu"] == {"flavors": ["h100"], "nominal": 24, "borrowingLimit": 8, "usage": 8,
                                                "max": 32}


def test_the_input_leaves_out_copies_of_the_object_and_resolution_details(example_state, settings):
    obj = image_classifier()
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj),
                                      "tau.azure.com/admission": "{}", "team.example.com/owner": "vision"}
    doc = build(obj, example_state, settings)
    assert doc["object"]["metadata"]["annotations"] == {"team.example.com/owner": "vision"}
    assert not {"conditions", "description", "applicability", "localQueues"} & set(doc["profile"])
    assert len(json.dumps({k: v for k, v in doc.items() if k != "review"})) < 4500  # the computed facts
    assert doc["review"]["object"] == obj  # the whole object as sent, in its own key


def test_autoscaling_worker_groups_report_their_maximum(example_state, settings):
    obj = image_classifier()
    obj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas=1, minReplicas=1, maxReplicas=6, numOfHosts=2)
    worker = build(obj, example_state, settings)["object"]["podTemplates"][1]
    assert (worker["replicas"], worker["maxReplicas"]) == (2, 12)


@pytest.mark.parametrize("borrowing, cohort, expected", [
    (Decimal(8), "research", 32),   # nominalQuota + borrowingLimit
    (None, None, 24),               # no cohort: nothing to borrow
    (None, "research", None),       # unbounded borrowing inside the cohort: no limit
    (Decimal(0), "research", 24),
])
def test_the_gpu_quota_follows_kueue_borrowing_rules(example_state, borrowing, cohort, expected):
    quotas = (FlavorQuota("cpu", "cpu", Decimal(32), None, Decimal(0), cohort),
              FlavorQuota("h100", "nvidia.com/gpu", Decimal(24), borrowing, Decimal(8), cohort),
              FlavorQuota("a100", "nvidia.com/gpu", Decimal(16), Decimal(0), Decimal(0), cohort))
    gpu = gpu_quota(quotas, example_state, "h100", "tau.azure.com/gpu-class")
    assert gpu["flavors"] == ["h100"]  # only the flavor whose nodeLabels name the class
    assert gpu["max"] == expected


def test_without_a_class_flavor_every_gpu_flavor_counts(example_state):
    quotas = (FlavorQuota("spot-gpus", "nvidia.com/gpu", Decimal(8), Decimal(0), Decimal(0), None),
              FlavorQuota("reserved-gpus", "nvidia.com/gpu", Decimal(4), None, Decimal(0), None))
    gpu = gpu_quota(quotas, example_state, "h100", "tau.azure.com/gpu-class")
    assert gpu["flavors"] == ["spot-gpus", "reserved-gpus"] and gpu["max"] == 12
    assert gpu_quota((), example_state, "h100", "tau.azure.com/gpu-class")["max"] == 0
