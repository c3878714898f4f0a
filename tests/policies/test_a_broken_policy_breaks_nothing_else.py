"""A policy that fails at run time affects only itself (issue 29 item 3): its result is "failed"
with its name and the engine's message, every other policy's results are the ones the set without
it gives (warnings stay warnings), on both backends, and no engine state carries a failure from
one evaluation into the next. ``taugate policy eval`` shows the failure instead of a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from taugate.cli import main
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy.engine import PolicyEvaluationError
from tests.paths import EXAMPLE_CLUSTER, POLICIES

ALWAYS_BROKEN = """# starts-broken: startswith() on a number, a Rego type error on every workload.
package taugate.policies.starts_broken

import data.taugate.lib

name := "starts-broken"

deny contains lib.violation(name, t.field, "never") if {
	some t in input.object.podTemplates
	startswith(t.gpusPerPod, "x")
}
"""

CONFLICTING = """# conflicting: a complete rule with two values on every workload (an eval_conflict_error in OPA
# and regorus alike; OPA leaves a built-in's type error undefined instead of failing).
package taugate.policies.conflicting

import data.taugate.lib

name := "conflicting"

c := 1 if count(input.object.podTemplates) >= 0

c := 2 if count(input.object.podTemplates) >= 0

deny contains lib.violation(name, "spec", "never") if c == 3
"""

ONLY_ON_PRIORITY = """# odd-priority: fails only on a pod template whose priorityClassName is a number.
package taugate.policies.odd_priority

import data.taugate.lib

name := "odd-priority"

deny contains lib.violation(name, t.field, "never") if {
	some t in input.object.podTemplates
	t.priorityClassName != null
	startswith(t.priorityClassName, "never-")
}
"""


def _library(tmp_path, policies: dict[str, str], enforcement: dict[str, str] | None = None):
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    for name, source in policies.items():
        (root / name).mkdir()
        (root / name / "policy.rego").write_text(source)
        package = name.replace("-", "_")
        (root / name / "policy_test.rego").write_text(f"package taugate.policies.{package}\n\ntest_loads if true\n")
    if enforcement:
        with (root / "enforcement.yaml").open("a") as f:
            f.writelines(f"{k}: {v}\n" for k, v in enforcement.items())
    return root


@pytest.fixture(scope="module")
def healthy():
    return load_policy_engine(POLICIES)


def test_a_policy_failing_on_every_workload_leaves_every_other_result_unchanged(tmp_path, sample_inputs, healthy):
    engine = load_policy_engine(_library(tmp_path, {"starts-broken": ALWAYS_BROKEN}))
    reported = 0
    for doc in sample_inputs:
        with pytest.raises(PolicyEvaluationError) as e:
            engine.evaluate(doc)
        assert list(e.value.failed) == ["starts-broken"]
        assert "`startswith` expects string argument" in e.value.failed["starts-broken"]
        assert "starts-broken/policy.rego:10" in e.value.failed["starts-broken"]
        assert e.value.results == healthy.evaluate(doc)
        reported += len(e.value.results)
    assert reported > 20  # the samples' denials and warnings are all there, not just an empty list


def test_a_warn_policys_results_stay_warnings_beside_a_failing_policy(tmp_path, sample_inputs, healthy):
    engine = load_policy_engine(_library(tmp_path, {"starts-broken": ALWAYS_BROKEN}))
    warned = [doc for doc in sample_inputs if any(v.action == "warn" for v in healthy.evaluate(doc))]
    assert warned
    for doc in warned:
        with pytest.raises(PolicyEvaluationError) as e:
            engine.evaluate(doc)
        assert [v for v in e.value.results if v.action == "warn"] == [v for v in healthy.evaluate(doc)
                                                                       if v.action == "warn"]


def test_a_failure_on_one_request_does_not_reach_the_next(tmp_path, sample_inputs, healthy):
    engine = load_policy_engine(_library(tmp_path, {"odd-priority": ONLY_ON_PRIORITY}))
    for doc in sample_inputs:
        bad = json.loads(json.dumps(doc))
        for t in bad["object"]["podTemplates"]:
            t["priorityClassName"] = 7
        with pytest.raises(PolicyEvaluationError) as e:
            engine.evaluate(bad)
        assert list(e.value.failed) == ["odd-priority"]
        assert engine.evaluate(doc) == healthy.evaluate(doc)


def test_the_opa_backend_names_the_failing_policy_and_keeps_the_others(tmp_path, opa_server, sample_inputs,
                                                                       healthy):
    root = _library(tmp_path, {"conflicting": CONFLICTING})
    embedded = load_policy_engine(root)
    remote = load_policy_engine(root, backend="opa", opa_url=opa_server.url)
    try:
        for doc in sample_inputs[:12]:
            for engine in (embedded, remote):
                with pytest.raises(PolicyEvaluationError) as e:
                    engine.evaluate(doc)
                assert list(e.value.failed) == ["conflicting"], e.value.failed
                assert e.value.results == healthy.evaluate(doc)
    finally:
        remote.close()


def test_policy_eval_shows_a_failing_policy_beside_the_others_results(tmp_path, capsys):
    root = _library(tmp_path, {"starts-broken": ALWAYS_BROKEN})
    sample = POLICIES / "requests-required" / "samples" / "example_disallowed_worker_without_memory.yaml"
    code = main(["policy", "eval", "-f", str(sample), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(root)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    assert "  starts-broken: failed at run time: " in out and "`startswith` expects string argument" in out
    assert "  requests-required: deny: spec.rayClusterSpec.workerGroupSpecs[0]" in out
    assert "  head-without-gpu: pass" in out


def test_policy_eval_as_json_lists_the_failure_apart_from_the_results(tmp_path, capsys):
    root = _library(tmp_path, {"starts-broken": ALWAYS_BROKEN})
    sample = POLICIES / "requests-required" / "samples" / "example_disallowed_worker_without_memory.yaml"
    code = main(["policy", "eval", "-f", str(sample), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(root),
                 "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and list(doc["failed"]) == ["starts-broken"] and "starts-broken" not in doc["results"]
    assert doc["results"]["requests-required"] and doc["results"]["head-without-gpu"] == []
