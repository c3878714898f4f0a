"""Every denial, warning and dry-run hit is logged once, as one structured line naming the object,
the user, the rule and the operation, although the API server calls ``/mutate`` again on
reinvocation (``webhook/decision_log.py``). Requests are walked through the server as kube-apiserver
walks them: the one workload webhook (``/mutate`` decides both), the patch applied, then ``/mutate``
again on the final object."""

from __future__ import annotations

import copy
import logging
import shutil

import pytest

from taugate import labels
from taugate.webhook.engines import load_policy_engine
from tests.paths import POLICIES
from tests.server.https import admission_review, apply, check_response, workload_request

DECISIONS = "taugate.webhook.decisions"


@pytest.fixture
def library(tmp_path):
    """The bundled policies with ``head-without-gpu`` in dry-run."""
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    (root / "enforcement.yaml").write_text("head-without-gpu: dryrun\n")
    return root


def _gpu_head(rayjob: dict) -> dict:
    obj = copy.deepcopy(rayjob)
    head = obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["requests"]["nvidia.com/gpu"] = head["resources"]["limits"]["nvidia.com/gpu"] = "1"
    return obj


async def _walk(gate, req: dict) -> list[dict]:
    """``req`` as the API server walks it: the mutating webhook, again on reinvocation (another
    webhook, Kueue's, changed the object: ``reinvocationPolicy: IfNeeded``); returns each answer's
    response."""
    answers = []
    for path in ("/mutate", "/mutate"):
        r = await gate.post(path, admission_review(req))
        assert r.status == 200, r.body
        resp = check_response(r.body, req["uid"])
        answers.append(resp)
        if not resp["allowed"]:
            break
        req = {**req, "object": apply(req["object"], resp)}
    return answers


def _lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == DECISIONS]


async def test_a_denied_create_is_logged_once_with_the_object_user_rule_and_operation(start_server, rayjob, caplog):
    gate = await start_server()
    rayjob["metadata"]["labels"] = {labels.WORKLOAD_PROFILE: "no-such-profile"}
    req = workload_request(rayjob, username="mallory@example.com")
    with caplog.at_level(logging.INFO):
        answers = await _walk(gate, req)
    assert not answers[-1]["allowed"]
    [line] = _lines(caplog)
    assert line.decision == "denied" and line.path == "/mutate" and line.uid == req["uid"]
    assert (line.operation, line.user) == ("CREATE", "mallory@example.com")
    assert line.object == {"kind": "RayJob", "namespace": "vision", "generateName": "resnet-finetune-"}
    assert line.policies == ["workload-profile"], line.policies
    assert "no-such-profile" in line.getMessage()


async def test_a_dry_run_hit_is_logged_once_and_the_admitted_create_nothing_else(start_server, library, rayjob,
                                                                                caplog):
    gate = await start_server(engine_=load_policy_engine(library))
    req = workload_request(_gpu_head(rayjob))
    with caplog.at_level(logging.INFO):
        answers = await _walk(gate, req)
    assert all(a["allowed"] for a in answers) and not any("warnings" in a for a in answers), answers
    [line] = _lines(caplog)
    assert (line.decision, line.path, line.policies) == ("dryrun", "/mutate", ["head-without-gpu"])
    assert line.problems[0].startswith("[head-without-gpu] spec.rayClusterSpec.headGroupSpec")


async def test_a_policy_warning_is_logged_once_though_reinvocation_says_it_again(start_server, library, rayjob, caplog):
    (library / "enforcement.yaml").write_text("head-without-gpu: warn\n")
    gate = await start_server(engine_=load_policy_engine(library))
    req = workload_request(_gpu_head(rayjob))
    with caplog.at_level(logging.INFO):
        answers = await _walk(gate, req)
    assert [("warnings" in a) for a in answers] == [True, True]  # kube-apiserver shows a repeated warning once
    [line] = _lines(caplog)
    assert (line.decision, line.path, line.policies) == ("warned", "/mutate", ["head-without-gpu"])


async def test_an_update_that_taugate_restores_is_logged_once_by_mutate_naming_the_field(start_server, rayjob,
                                                                                         caplog):
    gate = await start_server()
    created = await _walk(gate, workload_request(rayjob))
    stored = apply(rayjob, created[0])
    stored["metadata"].update(name="resnet-x7k2p", uid="0d5c9f5e-0000-4000-8000-000000000001")
    edited = copy.deepcopy(stored)
    del edited["metadata"]["labels"][labels.RUN_ID]
    req = workload_request(edited, operation="UPDATE", old=stored, username="bob@example.com")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        answers = await _walk(gate, req)
    assert "warnings" in answers[0] and not any("warnings" in a for a in answers[1:]), answers
    [line] = _lines(caplog)
    assert (line.decision, line.path, line.operation, line.object["name"], line.user) == (
        "warned", "/mutate", "UPDATE", "resnet-x7k2p", "bob@example.com")
    assert line.policies == ["taugate"]
    assert line.problems[0].startswith(f'taugate restored metadata.labels["{labels.RUN_ID}"]=')


async def test_an_allowed_request_with_nothing_to_say_logs_no_decision_line(start_server, rayjob, caplog):
    gate = await start_server()
    with caplog.at_level(logging.DEBUG):
        answers = await _walk(gate, workload_request(rayjob))
    assert all(a["allowed"] for a in answers)
    assert _lines(caplog) == []
