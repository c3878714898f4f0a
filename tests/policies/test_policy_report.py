"""PolicyReports (taugate/policy_report.py): the reports taugate builds are the Policy Reports
working group's ``wgpolicyk8s.io/v1alpha2`` objects as Kyverno's CRDs define them, map each
enforcement action to a result, count passes, and are stable so an unchanged audit writes
nothing."""

from __future__ import annotations

import random

import pytest

from taugate import labels
from taugate.policy_report import (
    MAX_RESULTS,
    REPORT_NAME,
    WorkloadAudit,
    build_reports,
    merge_patch,
    report_changed,
    what_if,
)
from taugate.violation import Violation
from tests.crdschema import crd_errors
from tests.paths import CLUSTER_POLICY_REPORT_CRD, POLICY_REPORT_CRD

POLICIES = frozenset({"gpu-per-pod-fits-node", "head-without-gpu", "requests-required"})
FIELD = 'spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'


def rayjob(name: str, namespace: str = "vision", uid: str = "") -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})}}


def audit(name: str, *violations: Violation, namespace: str = "vision", errors: dict | None = None) -> WorkloadAudit:
    return WorkloadAudit.of(rayjob(name, namespace, uid=f"uid-{name}"), violations, POLICIES, errors)


NINE = Violation("gpu-per-pod-fits-node", FIELD, "asks for 9 GPUs per pod; allowed: at most 8", "deny")
HEAD = Violation("head-without-gpu", "spec.rayClusterSpec.headGroupSpec", "the head asks for GPUs", "warn")
REQS = Violation("requests-required", "spec.x", "no cpu request", "dryrun")


def test_namespace_and_cluster_reports_are_valid_against_the_working_groups_crds():
    reports = build_reports([audit("a", NINE, HEAD), audit("b", REQS, namespace="nlp"), audit("c")], digest="d1")
    for report in reports.namespaced.values():
        assert crd_errors(report, POLICY_REPORT_CRD, "v1alpha2") == []
    assert crd_errors(reports.cluster, CLUSTER_POLICY_REPORT_CRD, "v1alpha2") == []
    assert sorted(reports.namespaced) == ["nlp", "vision"]


def test_a_report_that_breaks_the_crd_is_caught_by_the_schema_check():
    report = build_reports([audit("a", NINE)], digest="d1").namespaced["vision"]
    report["results"][0]["result"] = "denied"  # not in the CRD's enum
    report["results"][0]["properties"]["count"] = 3  # properties are strings
    errors = crd_errors(report, POLICY_REPORT_CRD, "v1alpha2")
    assert any("results.0.result" in e for e in errors) and any("properties.count" in e for e in errors)


def test_each_result_names_the_policy_the_object_the_field_and_the_message():
    report = build_reports([audit("a", NINE)], digest="d1").namespaced["vision"]
    (result,) = report["results"]
    assert result["policy"] == result["rule"] == "gpu-per-pod-fits-node"
    assert result["source"] == "taugate" and result["category"] == "taugate policy"
    assert result["resources"] == [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "a", "namespace": "vision",
                                    "uid": "uid-a"}]
    assert result["properties"] == {"action": "deny", "field": FIELD}
    assert result["message"] == NINE.message
    assert "timestamp" not in result


@pytest.mark.parametrize(("action", "result"), [("deny", "fail"), ("dryrun", "fail"), ("warn", "warn")])
def test_the_enforcement_action_decides_the_result_and_is_kept_in_properties(action, result):
    v = Violation("requests-required", "spec.x", "no cpu request", action)
    (r,) = build_reports([audit("a", v)], digest="d").namespaced["vision"]["results"]
    assert (r["result"], r["properties"]["action"]) == (result, action)


def test_passes_are_counted_per_workload_and_policy_but_not_listed():
    report = build_reports([audit("a", NINE, HEAD), audit("b")], digest="d").namespaced["vision"]
    # a: 3 policies evaluated, 2 found something -> 1 pass; b: 3 passes
    assert report["summary"] == {"pass": 4, "fail": 1, "warn": 1, "error": 0, "skip": 0}
    assert [r["result"] for r in report["results"]] == ["fail", "warn"]


def test_a_built_in_rule_is_categorised_apart_from_the_policy_library():
    builtin = Violation("gpu-whole-numbers", "spec.y", "asks for 0.5 GPUs")
    (r,) = build_reports([audit("a", builtin)], digest="d").namespaced["vision"]["results"]
    assert r["category"].startswith("built-in rule")


def test_a_workload_the_policies_never_ran_on_counts_no_pass():
    unresolved = WorkloadAudit.of(rayjob("a"), [Violation("workload-profile", "metadata.labels", "none applies")])
    report = build_reports([unresolved], digest="d").namespaced["vision"]
    assert report["summary"]["pass"] == 0 and report["summary"]["fail"] == 1


def test_a_policy_that_failed_on_a_workload_is_an_error_result():
    report = build_reports([audit("a", errors={"head-without-gpu": "index out of range"})], digest="d")
    (r,) = report.namespaced["vision"]["results"]
    assert r["result"] == "error" and "index out of range" in r["message"]
    assert report.failing


def test_results_are_sorted_and_identical_whatever_order_the_workloads_come_in():
    audits = [audit(f"job-{i}", NINE, REQS) for i in range(20)] + [audit("z", HEAD, namespace="nlp")]
    first = build_reports(audits, digest="d")
    shuffled = audits[:]
    random.Random(7).shuffle(shuffled)
    again = build_reports(shuffled, digest="d")
    assert first == again
    names = [r["resources"][0]["name"] for r in first.namespaced["vision"]["results"]]
    assert names == sorted(names)


def test_the_cluster_report_sums_the_namespaces_and_names_each_failing_policy_per_namespace():
    reports = build_reports([audit("a", NINE, HEAD), audit("b", NINE), audit("c", HEAD, namespace="nlp")], digest="d")
    cluster = reports.cluster
    assert cluster["summary"]["fail"] == 2 and cluster["summary"]["warn"] == 2
    rows = [(r["resources"][0]["name"], r["policy"], r["result"], r["properties"]["fail"]) for r in cluster["results"]]
    assert rows == [("nlp", "head-without-gpu", "warn", "0"), ("vision", "gpu-per-pod-fits-node", "fail", "2"),
                    ("vision", "head-without-gpu", "warn", "0")]
    assert f"kubectl get policyreport {REPORT_NAME} -n vision" in cluster["results"][1]["message"]


def test_only_failures_make_the_audit_fail():
    assert build_reports([audit("a", NINE)], digest="d").failing
    assert build_reports([audit("a", REQS)], digest="d").failing  # a dry-run violation is still a violation
    assert not build_reports([audit("a", HEAD), audit("b")], digest="d").failing


def test_a_namespace_with_more_results_than_a_report_holds_lists_the_first_and_counts_all():
    many = [audit(f"w{i:05d}", NINE) for i in range(MAX_RESULTS + 5)]
    report = build_reports(many, digest="d").namespaced["vision"]
    assert len(report["results"]) == MAX_RESULTS
    assert report["summary"]["fail"] == MAX_RESULTS + 5
    assert report["metadata"]["annotations"][labels.RESULTS_LEFT_OUT] == "5"


def test_a_stored_report_with_the_same_content_needs_no_write():
    desired = build_reports([audit("a", NINE)], digest="d").namespaced["vision"]
    stored = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "42", "uid": "x",
                                      "creationTimestamp": "2026-01-01T00:00:00Z",
                                      "labels": {**desired["metadata"]["labels"], "team": "vision"}}}
    assert not report_changed(stored, desired)


def test_a_changed_result_a_new_policy_digest_or_a_missing_report_needs_a_write():
    before = build_reports([audit("a", NINE)], digest="d").namespaced["vision"]
    assert report_changed(None, before)
    assert report_changed(before, build_reports([audit("a", NINE, HEAD)], digest="d").namespaced["vision"])
    assert report_changed(before, build_reports([audit("a", NINE)], digest="e").namespaced["vision"])
    truncated = {**before, "metadata": {**before["metadata"], "annotations": {
        **before["metadata"]["annotations"], labels.RESULTS_LEFT_OUT: "3"}}}
    assert report_changed(truncated, before)


def test_reports_are_labelled_as_taugates_and_carry_the_policy_digest():
    report = build_reports([audit("a")], digest="abc").namespaced["vision"]
    assert report["metadata"]["name"] == REPORT_NAME and report["metadata"]["namespace"] == "vision"
    assert report["metadata"]["labels"] == {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    assert report["metadata"]["annotations"] == {labels.POLICY_DIGEST: "abc"}
    assert report["scope"] == {"apiVersion": "v1", "kind": "Namespace", "name": "vision"}


def test_what_if_names_what_a_proposed_set_enforces_newly_and_what_it_stops_enforcing():
    dry = Violation("gpu-per-pod-fits-node", FIELD, "9 GPUs", "dryrun")
    current = [audit("a", dry, HEAD), audit("b", NINE)]
    proposed = [audit("a", NINE, errors={"requests-required": "boom"}), audit("b", HEAD)]
    enforced, relieved = what_if(current, proposed)
    assert [(c.workload, c.policy, c.action, c.before) for c in enforced] == [
        ("RayJob/a", "gpu-per-pod-fits-node", "deny", "dryrun"), ("RayJob/b", "head-without-gpu", "warn", "none"),
        ("RayJob/a", "requests-required", "error", "none")]
    assert [(c.workload, c.policy, c.action, c.before) for c in relieved] == [
        ("RayJob/b", "gpu-per-pod-fits-node", "deny", "none"), ("RayJob/a", "head-without-gpu", "warn", "none")]


def test_a_merge_patch_replaces_the_results_and_drops_a_truncation_note_no_longer_true():
    desired = build_reports([audit("a", NINE)], digest="d").namespaced["vision"]
    stored = {**desired, "results": [],
              "metadata": {**desired["metadata"], "annotations": {labels.RESULTS_LEFT_OUT: "3"}}}
    patch = merge_patch(stored, desired)
    assert patch["results"] == desired["results"] and patch["summary"] == desired["summary"]
    assert patch["metadata"]["annotations"] == {labels.POLICY_DIGEST: "d", labels.RESULTS_LEFT_OUT: None}
