"""PolicyReports through the real API server: the chart's operator audits at start and writes the
ClusterPolicyReport under the chart's RBAC, an audit creates, updates and removes a workspace's
PolicyReport as workloads come and go and as the policy set changes, kubectl shows the results
with the CRD's printer columns, and what-if previews a rule on the live cluster's workloads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import yaml

from taugate.controllers.audit import AuditLoop, AuditOptions
from taugate.kube import Kube, load_configuration
from taugate.policy_report import REPORT_NAME
from taugate.settings import Settings
from taugate.webhook.audit import PolicyAuditor
from taugate.webhook.engines import load_policy_engine
from tests.crdschema import crd_errors
from tests.e2e.platform import SYSTEM_NAMESPACE
from tests.paths import POLICIES, POLICY_REPORT_CRD, REPO

RESULT_LINES = ('{range .results[*]}{.policy}{"\\t"}{.properties.action}{"\\t"}{.resources[0].kind}/'
                '{.resources[0].name}{"\\t"}{.properties.field}{"\\t"}{.message}{"\\n"}{end}')
"""The jsonpath policies/README.md gives to list a report's results, one line each."""
GPU_HEAD = POLICIES / "head-without-gpu" / "samples" / "example_disallowed_head_one_gpu.yaml"


def _report(cp, namespace: str) -> dict | None:
    found = cp.kubectl("get", "policyreport", REPORT_NAME, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _head_results(report: dict) -> list[dict]:
    """The head-without-gpu results of this test's RayJob (other tests of the session may have left
    workloads in the namespace, with results of their own)."""
    return [r for r in report["results"]
            if r["policy"] == "head-without-gpu" and r["resources"][0]["name"] == "resnet-gpu-head"]


def test_the_charts_operator_writes_the_cluster_report_at_start_under_the_charts_rbac(platform):
    cp = platform.cp
    platform.wait_for("the operator's first audit (its ClusterPolicyReport)",
                      lambda: cp.kubectl("get", "clusterpolicyreport", REPORT_NAME, check=False).returncode == 0, 90)
    header = cp.kubectl("get", "clusterpolicyreports").stdout.splitlines()[0].split()
    assert header[:2] == ["NAME", "KIND"] and {"PASS", "FAIL", "WARN", "ERROR", "SKIP"} <= set(header)


def test_reports_are_created_updated_and_removed_as_workloads_and_policies_change(platform, tmp_path):
    cp = platform.cp
    settings = Settings(system_namespace=SYSTEM_NAMESPACE)
    folder = tmp_path / "policies"
    shutil.copytree(POLICIES, folder)
    engine = load_policy_engine(folder)
    kube = Kube.from_configuration(load_configuration(kubeconfig=str(platform.kubeconfigs["operator"])))
    loop = AuditLoop(kube, settings, AuditOptions(auditor=PolicyAuditor(engine, settings), page_size=1))
    sample = yaml.safe_load(GPU_HEAD.read_text())
    try:
        # A RayJob whose head asks for a GPU: admitted by the webhook with a warning (head-without-gpu: warn).
        created = cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(sample))
        assert json.loads(created.stdout)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]  # taugate mutated it
        loop.run_once()
        report = _report(cp, "vision")
        assert report is not None and crd_errors(report, POLICY_REPORT_CRD, "v1alpha2") == []
        head = _head_results(report)
        assert head and head[0]["result"] == "warn"
        assert head[0]["resources"][0]["uid"] == json.loads(created.stdout)["metadata"]["uid"]
        # One line per result, as policies/README.md shows it: policy, action, object, field path, message.
        lines = cp.kubectl("get", "policyreport", REPORT_NAME, "-n", "vision", "-o", "jsonpath=" + RESULT_LINES).stdout
        mine = [line.split("\t") for line in lines.splitlines() if "\tRayJob/resnet-gpu-head\t" in line]
        assert any(f[0] == "head-without-gpu" and f[1] == "warn" and f[3] == head[0]["properties"]["field"]
                   and f[4] == head[0]["message"] for f in mine), lines
        table = cp.kubectl("get", "policyreports", "-n", "vision").stdout.splitlines()
        row = dict(zip(table[0].split(), table[1].split(), strict=False))
        assert row["KIND"] == "Namespace" and int(row["WARN"]) >= 1

        version = report["metadata"]["resourceVersion"]
        loop.run_once()  # nothing changed: nothing written
        assert _report(cp, "vision")["metadata"]["resourceVersion"] == version

        # The policy set changes: head-without-gpu now denies; the next audit fails the same workload.
        (folder / "enforcement.yaml").write_text("head-without-gpu: deny\n")
        engine.store.check_for_changes()
        loop.run_once()
        head = _head_results(_report(cp, "vision"))
        assert (head[0]["result"], head[0]["properties"]["action"]) == ("fail", "deny")

        # The workload goes: its results go, and the namespace's report with them when it was the
        # last workload there (other tests of the session may have left theirs).
        cp.kubectl("delete", "rayjob", "resnet-gpu-head", "-n", "vision", "--wait=true")
        reports = loop.run_once()
        left = _report(cp, "vision")
        if "vision" in reports.namespaced:
            assert left is not None
            assert all(r["resources"][0]["name"] != "resnet-gpu-head" for r in left["results"])
        else:
            assert left is None
    finally:
        cp.kubectl("delete", "rayjob", "resnet-gpu-head", "-n", "vision", "--ignore-not-found")
        kube.close()


def test_what_if_previews_a_rule_on_the_live_clusters_workloads(platform, tmp_path):
    cp = platform.cp
    sample = yaml.safe_load(GPU_HEAD.read_text())
    sample["metadata"]["name"] = "resnet-gpu-head-preview"
    proposed = tmp_path / "proposed"
    shutil.copytree(POLICIES, proposed)
    (proposed / "enforcement.yaml").write_text("head-without-gpu: deny\n")
    cp.kubectl("create", "-f", "-", input=json.dumps(sample))
    try:
        run = subprocess.run([sys.executable, "-m", "taugate.cli", "policy", "what-if", str(proposed),
                              "--current", str(POLICIES), "--kubeconfig", str(cp.kubeconfig)],
                             capture_output=True, text=True, cwd=REPO, timeout=120)
        assert run.returncode == 1, run.stderr
        assert "head-without-gpu: would deny" in run.stdout
        assert "deny RayJob/resnet-gpu-head-preview" in run.stdout and "(today: warn)" in run.stdout
    finally:
        cp.kubectl("delete", "rayjob", "resnet-gpu-head-preview", "-n", "vision", "--ignore-not-found")
