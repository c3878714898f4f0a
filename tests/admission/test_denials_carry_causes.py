"""A denial's Kubernetes Status carries ``details.causes``: one ``metav1.StatusCause`` per problem
(``field``, ``message``, ``reason`` a ``metav1.CauseType``), so a pipeline reads what was wrong
where without parsing the message. The API server passes this Status through to the client
(k8s.io/apiserver pkg/admission/plugin/webhook/errors ``ToStatusErr``). Every test renders the
real AdmissionReview answer (``review_response``) of a real object and reads it back as JSON."""

from __future__ import annotations

import copy
import shutil

import orjson
import yaml

from taugate.webhook.decision import MAX_LINE_CHARS, MAX_PROBLEMS_SHOWN, Decision
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.review import admit, parse_review, request_for, review_response, validate
from tests.paths import POLICIES

WORKER_RESOURCES = ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec", "containers", 0, "resources")


def _answer(obj: dict, decision) -> dict:
    """The AdmissionReview answer to a review of ``obj`` as the API server decodes it."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": request_for(obj, namespace="vision")}
    return orjson.loads(orjson.dumps(review_response(parse_review(review), decision)))["response"]


def _at(obj: dict, path: tuple) -> dict:
    for p in path:
        obj = obj[p]
    return obj


def test_a_policy_denial_names_each_field_with_its_message_and_forbidden_as_the_cause_type(classifier, example_state,
                                                                                          settings, engine):
    obj = copy.deepcopy(classifier)
    res = _at(obj, WORKER_RESOURCES)
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "2"  # the default profile gives 1 or 8
    for quantities in (res["requests"], res["limits"]):  # no memory asked (a limit would default the request)
        del quantities["memory"]
    decision = admit(obj, state=example_state, settings=settings, engine=engine, namespace="vision")
    assert not decision.allowed and len(decision.violations) >= 2, decision.message
    status = _answer(obj, decision)["status"]
    causes = status["details"]["causes"]
    assert len(causes) == len(decision.violations)
    for v, cause in zip(decision.violations, causes, strict=True):
        assert cause["reason"] == "FieldValueForbidden", cause
        assert cause["message"] == f"[{v.policy}] {v.message}"
        assert cause.get("field", "") == v.field
        assert v.message in status["message"]  # the same problems as the text kubectl prints
    fields = [c.get("field") for c in causes]
    assert "spec.rayClusterSpec.workerGroupSpecs[0].replicas" in fields
    assert "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.requests.memory" in fields


def test_a_value_no_object_could_hold_is_field_value_invalid_and_causes_are_capped_like_the_message(
        classifier, example_state, settings, engine):
    obj = copy.deepcopy(classifier)
    obj["metadata"]["labels"] = {f"example.com/l{i}": i for i in range(1245)}  # labels that are not strings
    decision = admit(obj, state=example_state, settings=settings, engine=engine, namespace="vision")
    assert len(decision.violations) == 1245
    status = _answer(obj, decision)["status"]
    causes = status["details"]["causes"]
    assert len(causes) == MAX_PROBLEMS_SHOWN == 20
    assert causes[0] == {"reason": "FieldValueInvalid", "field": 'metadata.labels["example.com/l0"]',
                         "message": f"[object-shape] {decision.violations[0].message}"}
    assert {c["reason"] for c in causes} == {"FieldValueInvalid"}
    assert status["message"].endswith("... and 1225 more problem(s)")  # the count of the causes left out


def test_a_cause_quoting_a_huge_value_is_clipped_like_a_message_line(classifier, example_state, settings, engine):
    obj = copy.deepcopy(classifier)
    obj["metadata"]["labels"] = {"x" * 5000: 7}
    decision = admit(obj, state=example_state, settings=settings, engine=engine, namespace="vision")
    [cause, *_] = _answer(obj, decision)["status"]["details"]["causes"]
    assert len(cause["field"]) <= MAX_LINE_CHARS and cause["field"].endswith("characters in all)")
    assert len(cause["message"]) <= MAX_LINE_CHARS


def test_a_policy_that_failed_on_the_object_is_an_internal_error_cause_without_a_field(tmp_path, classifier,
                                                                                       example_state, settings):
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    (root / "priority-class-prefix").mkdir()
    (root / "priority-class-prefix" / "policy.rego").write_text(
        'package taugate.policies.priority_class_prefix\n\nimport data.taugate.lib\n\n'
        'name := "priority-class-prefix"\n\n'
        'deny contains lib.violation(name, t.field, "use a tau- PriorityClass") if {\n'
        '\tsome t in input.object.podTemplates\n\tt.priorityClassName != null\n'
        '\tnot startswith(t.priorityClassName, "tau-")\n}\n')
    obj = yaml.safe_load(yaml.safe_dump(classifier))
    _at(obj, WORKER_RESOURCES[:-3])["priorityClassName"] = 7  # startswith() on a number: a Rego type error
    obj["metadata"]["namespace"] = "vision"
    request = request_for(obj, namespace="vision")
    decision = validate(request, example_state, settings, load_policy_engine(root))
    assert not decision.allowed and decision.code == 503 and decision.policy_failures == ["priority-class-prefix"]
    causes = _answer(obj, decision)["status"]["details"]["causes"]
    failed = [c for c in causes if c["message"].startswith("[priority-class-prefix]")]
    assert failed == [{"reason": "InternalError",
                       "message": "[priority-class-prefix] " + decision.violations[-1].message}], causes


def test_an_allowed_answer_has_no_status_and_a_denial_without_violations_has_no_details(classifier, example_state,
                                                                                         settings, engine):
    allowed = admit(classifier, state=example_state, settings=settings, engine=engine, namespace="vision")
    assert allowed.allowed and "status" not in _answer(classifier, allowed)
    engine_failed = Decision.deny([], code=503, reason="taugate's policy engine failed on this object (boom)")
    status = _answer(classifier, engine_failed)["status"]
    assert status == {"code": 503, "reason": "ServiceUnavailable", "message": engine_failed.message}
