"""A policy that fails at run time on some inputs: it passes its own Rego tests and its samples,
so the reload gate accepts it. ``taugate policy test`` finds the failure on generated inputs
(every rule on every sample with one field changed at a time); when serving, the failure is the
policy's own (HTTP 503 in the AdmissionReview, or the policy's enforcement action), never a 500
or a traceback; ``taugate admit`` answers in one line."""

from __future__ import annotations

import copy
import logging
import shutil

import pytest
import yaml

from taugate.cli import main
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy_tests import render_report, run_policy_tests
from tests.paths import EXAMPLE_CLUSTER, POLICIES
from tests.server.https import admission_review, check_response, workload_request

POLICY = """# priority-class-prefix: pod templates name a tau- PriorityClass (a test policy that breaks at run
# time: startswith() on a priorityClassName that is not a string is a Rego type error).
package taugate.policies.priority_class_prefix

import data.taugate.lib

name := "priority-class-prefix"

deny contains lib.violation(name, sprintf("%s.spec.priorityClassName", [t.field]), "use a tau- PriorityClass") if {
	some t in input.object.podTemplates
	t.priorityClassName != null
	not startswith(t.priorityClassName, "tau-")
}
"""

POLICY_TEST = """package taugate.policies.priority_class_prefix

import data.taugate.lib.fixtures as fx

test_no_priority_class_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_another_prefix_is_denied if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [
		{"op": "add", "path": "/object/podTemplates/1/priorityClassName", "value": "batch"},
	])
	count(deny) == 1 with input as inp
}
"""

SOURCE_SAMPLE = POLICIES / "requests-required" / "samples" / "example_allowed_all_requests.yaml"


@pytest.fixture
def library(tmp_path):
    """The bundled library plus the breakable policy, with its tests and samples."""
    return breakable_library(tmp_path)


def breakable_library(tmp_path):
    """``library``'s folder, made under ``tmp_path``."""
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    folder = root / "priority-class-prefix"
    (folder / "samples").mkdir(parents=True)
    (folder / "policy.rego").write_text(POLICY)
    (folder / "policy_test.rego").write_text(POLICY_TEST)
    sample = yaml.safe_load(SOURCE_SAMPLE.read_text())
    for expect, value in (("allowed", "tau-high"), ("disallowed", "batch")):
        obj = copy.deepcopy(sample)
        obj["metadata"]["name"] = f"priority-{expect}"
        obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["priorityClassName"] = value
        (folder / "samples" / f"example_{expect}_priority.yaml").write_text(yaml.safe_dump(obj))
    return root


def breaking_object() -> dict:
    obj = yaml.safe_load(SOURCE_SAMPLE.read_text())
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["priorityClassName"] = 7
    return obj


def test_policy_test_finds_a_policy_that_fails_at_run_time_on_a_generated_input(library):
    report = run_policy_tests(library, cluster=EXAMPLE_CLUSTER)
    assert all(t.passed for t in report.tests) and all(s.passed for s in report.samples)  # its own checks pass
    assert not report.ok and [r.policy for r in report.runtime] == ["priority-class-prefix"]
    [failure] = report.runtime
    assert failure.field.endswith(".template.spec.priorityClassName") and "startswith" in failure.error
    text = render_report(report)
    assert "FAIL priority-class-prefix failed at run time on" in text and "priorityClassName = " in text


def test_the_bundled_library_has_no_runtime_failure_on_generated_inputs():
    report = run_policy_tests(POLICIES, cluster=EXAMPLE_CLUSTER)
    assert report.ok and report.runtime == [] and report.generated > 1000, render_report(report)


def test_policy_test_exits_1_naming_the_failure(library, capsys):
    assert main(["policy", "test", str(library), "--cluster", str(EXAMPLE_CLUSTER)]) == 1
    assert "priority-class-prefix failed at run time" in capsys.readouterr().out


async def test_serving_answers_the_failure_as_the_policys_own_503_without_a_traceback(library, start_server, settings,
                                                                                     caplog):
    gate = await start_server(engine_=load_policy_engine(library))
    req = workload_request(breaking_object())
    with caplog.at_level(logging.INFO):
        r = await gate.post("/validate", admission_review(req))
    assert r.status == 200
    resp = check_response(r.body, req["uid"])
    assert not resp["allowed"] and resp["status"]["code"] == 503, resp
    message = resp["status"]["message"]
    assert "[priority-class-prefix]" in message and "the policy failed on this object" in message
    assert "`startswith` expects string argument" in message
    assert not any(rec.exc_info for rec in caplog.records), "no traceback is logged"
    metrics = await gate.metrics()
    assert 'decision="error"' not in metrics
    assert 'taugate_policy_runtime_failures_total{policy="priority-class-prefix",webhook="/validate"} 1.0' in metrics


async def test_a_failing_policy_enforced_as_warn_only_warns(library, start_server):
    (library / "enforcement.yaml").write_text("priority-class-prefix: warn\n")
    gate = await start_server(engine_=load_policy_engine(library))
    obj = breaking_object()
    req = workload_request(obj)
    r = await gate.post("/validate", admission_review(req))
    resp = check_response(r.body, req["uid"])
    assert any(w.startswith("[priority-class-prefix]") and "the policy failed" in w for w in resp.get("warnings", []))
    assert 'taugate_policy_runtime_failures_total{policy="priority-class-prefix",webhook="/validate"} 1.0' in (
        await gate.metrics())
    message = (resp.get("status") or {}).get("message", "")
    assert all("[priority-class-prefix]" not in line for line in message.splitlines())


def test_admit_reports_the_failure_in_one_line_and_exits_1(library, tmp_path, capsys):
    f = tmp_path / "obj.yaml"
    f.write_text(yaml.safe_dump(breaking_object()))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(library)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "priority-class-prefix" in err and "the policy failed on this object" in err
