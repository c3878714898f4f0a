"""The policy input holds the whole AdmissionReview request (issue 29 item 1): ``input.review`` is
the request as the API server sent it, all but its ``uid``, with the object as judged; and every
``input.`` reference of a policy set is checked against ``policies/input.schema.json``, from the
engine's own parse, so a path the input never has is an error naming the file and line."""

from __future__ import annotations

import json
import shutil

import jsonschema

from taugate.webhook import review
from taugate.webhook.policy.engine import EmbeddedPolicyEngine, PolicyStore, RecordingEngine, read_policy_set
from taugate.webhook.policy.schema import input_references, unknown_references
from tests.paths import POLICIES
from tests.policies.test_engine import image_classifier
from tests.server.https import workload_request

SCHEMA = json.loads((POLICIES / "input.schema.json").read_text())


def test_the_input_holds_the_request_as_sent_but_its_uid(example_state, settings):
    rec = RecordingEngine(EmbeddedPolicyEngine(PolicyStore(POLICIES)))
    old = image_classifier()
    new = image_classifier()
    new["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "NCCL_DEBUG", "value": "INFO"}]
    request = workload_request(new, operation="UPDATE", old=old, dry_run=True, username="bob@example.com")
    review.validate(request, example_state, settings, rec)
    doc = rec.inputs[0]
    jsonschema.validate(doc, SCHEMA)
    assert doc["review"] == {k: v for k, v in json.loads(json.dumps(request)).items() if k != "uid"}
    assert doc["review"]["object"]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"][
        "containers"][0]["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert doc["review"]["dryRun"] is True and doc["review"]["oldObject"] == json.loads(json.dumps(old))


def _with_policy(tmp_path, body: str):
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    (root / "probe").mkdir()
    (root / "probe" / "policy.rego").write_text(
        "package taugate.policies.probe\n\nimport data.taugate.lib\n\n"
        f'deny contains lib.violation("probe", "", "x") if {{\n{body}\n}}\n')
    return read_policy_set(root), root / "probe" / "policy.rego"


def test_the_library_references_only_paths_the_schema_has():
    ps = read_policy_set(POLICIES)
    assert len(input_references(ps)) > 100
    assert unknown_references(ps) == []


def test_an_unknown_path_is_an_error_naming_the_file_and_line(tmp_path):
    ps, rego = _with_policy(tmp_path, "\tinput.object.totalGPUs > 8")
    [error] = unknown_references(ps)
    assert error.startswith(f"{rego}:6: input.object.totalGPUs is not in the policy input (")
    assert "input.object has apiVersion, autoscaling, kind" in error


def test_a_bracketed_or_raw_string_key_is_checked_too(tmp_path):
    ps, _ = _with_policy(tmp_path, '\tinput["object"][`totalGPUs`] > 8')
    assert [e.split(": ", 1)[1].split(" is not")[0] for e in unknown_references(ps)] == ["input.object.totalGPUs"]


def test_any_path_under_the_whole_object_and_past_a_variable_is_accepted(tmp_path):
    ps, _ = _with_policy(tmp_path, "\tsome c in input.review.object.spec.template.spec.containers\n"
                                   "\tc.securityContext.privileged\n"
                                   "\tinput.object.podTemplates[_].anything")
    assert unknown_references(ps) == []


def test_a_reference_inside_an_index_is_found(tmp_path):
    ps, _ = _with_policy(tmp_path, "\tx := input.cluster.gpuClasses[input.cluster.gpuClasLabel]\n\tx.nodes > 0")
    assert [e.split(": ", 1)[1].split(" is not")[0] for e in unknown_references(ps)] == ["input.cluster.gpuClasLabel"]


def test_a_misspelt_profile_field_is_an_error_as_every_computed_fact_is_closed(tmp_path):
    ps, rego = _with_policy(tmp_path, "\tinput.profile.gpusPerWorkr > 1")
    [error] = unknown_references(ps)
    assert error.startswith(f"{rego}:6: input.profile.gpusPerWorkr is not in the policy input (")
    for key in ("object", "workspace", "profile", "cluster"):
        assert SCHEMA["properties"][key].get("additionalProperties") is False, key
