"""The operator's background audit (controllers/audit.py) against the kmock API over HTTP: it
writes a PolicyReport per workspace namespace and a ClusterPolicyReport, rewrites nothing when
nothing changed, removes what deleted workloads leave behind, pages its lists, counts violations
as Prometheus gauges, and audits again when the policy set changes."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import socket
import threading
import urllib.request

import pytest
import yaml

from taugate.controllers.audit import AuditLoop, AuditOptions, ProfileSetNotResolved
from taugate.controllers.taugrid.cluster import reconcile_cluster
from taugate.kube import Kube
from taugate.policy_report import REPORT_NAME
from taugate.webhook.audit import PolicyAuditor
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.review import admit
from tests.crdschema import crd_errors
from tests.paths import CLUSTER_POLICY_REPORT_CRD, POLICIES, POLICY_REPORT_CRD, REPO

WG = "wgpolicyk8s.io/v1alpha2"
TAU = "tau.azure.com/v1alpha1"
NINE_GPUS = REPO / "examples" / "rayjob-nine-gpus.yaml"
GPU_RULES = ("gpu-per-pod-fits-node", "gpu-per-pod-within-profile")


@pytest.fixture
def nine_gpu_rayjob(small_cluster, settings) -> dict:
    """A 9-GPU-per-worker RayJob in vision, admitted while the GPU rules were only dry-run."""
    from taugate.snapshot import build_state

    state = build_state(small_cluster, settings)
    decision = admit(yaml.safe_load(NINE_GPUS.read_text()), state=state, settings=settings, namespace="vision",
                     engine=load_policy_engine(POLICIES, enforcement=dict.fromkeys(GPU_RULES, "dryrun")))
    assert decision.allowed, decision.message
    obj = copy.deepcopy(decision.object)
    obj["metadata"].pop("generateName", None)
    obj["metadata"]["name"] = "resnet-nine"
    return obj


@pytest.fixture
def loop(kube_double, settings):
    kube = Kube(kube_double.api_client())
    yield AuditLoop(kube, settings, AuditOptions(auditor=PolicyAuditor(load_policy_engine(POLICIES), settings),
                                                 page_size=2))
    kube.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _violations(loop, policy: str, action: str) -> float | None:
    return loop.metrics.registry.get_sample_value("taugate_audit_violations", {"policy": policy, "action": action})


def test_a_violating_workload_gets_a_namespace_report_and_a_cluster_summary_valid_under_the_crds(
        kube_double, small_cluster, nine_gpu_rayjob, loop):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    loop.run_once()
    report = kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision")
    assert crd_errors(report, POLICY_REPORT_CRD, "v1alpha2") == []
    fits = [r for r in report["results"] if r["policy"] == "gpu-per-pod-fits-node"]
    assert fits[0]["result"] == "fail" and fits[0]["resources"][0]["name"] == "resnet-nine"
    assert kube_double.get(WG, "PolicyReport", REPORT_NAME, "nlp") is None  # no workload there
    cluster = kube_double.get(WG, "ClusterPolicyReport", REPORT_NAME)
    assert crd_errors(cluster, CLUSTER_POLICY_REPORT_CRD, "v1alpha2") == []
    assert cluster["summary"]["fail"] == report["summary"]["fail"] >= 2
    assert _violations(loop, "gpu-per-pod-fits-node", "deny") == 1
    assert loop.metrics.registry.get_sample_value("taugate_audit_workloads") == 1


def test_an_unchanged_cluster_is_audited_again_without_a_single_write(
        kube_double, small_cluster, nine_gpu_rayjob, loop):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    loop.run_once()
    since = kube_double.request_count()
    loop.run_once()
    assert kube_double.writes(since) == []


def test_each_kind_is_listed_across_the_cluster_in_pages_and_only_the_workspaces_objects_are_audited(
        kube_double, small_cluster, nine_gpu_rayjob, loop):
    outside = copy.deepcopy(nine_gpu_rayjob)
    outside["metadata"].update(namespace="default", name="not-a-workspaces")
    kube_double.apply([*small_cluster, nine_gpu_rayjob, outside])
    since = kube_double.request_count()
    loop.run_once()
    listed = [(path, q) for method, path, q in kube_double.request_log(since)
              if method == "GET" and path.endswith("/rayjobs")]
    # one paged list of the kind (a page of 2), not one per workspace (Gatekeeper's audit)
    assert listed and all(q.get("limit") == "2" for _, q in listed)
    assert {p for p, _ in listed} == {"/apis/ray.io/v1/rayjobs"}
    assert kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision") is not None
    assert kube_double.get(WG, "PolicyReport", REPORT_NAME, "default") is None
    summary = kube_double.get(WG, "ClusterPolicyReport", REPORT_NAME)
    assert "not-a-workspaces" not in json.dumps(summary)


def test_a_new_violation_updates_the_report_and_a_deleted_workload_takes_its_results_and_report_away(
        kube_double, small_cluster, nine_gpu_rayjob, loop):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    loop.run_once()
    second = copy.deepcopy(nine_gpu_rayjob)
    second["metadata"]["name"] = "resnet-nine-again"
    kube_double.apply([second])
    loop.run_once()
    names = {r["resources"][0]["name"] for r in kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision")["results"]}
    assert names == {"resnet-nine", "resnet-nine-again"}
    assert _violations(loop, "gpu-per-pod-fits-node", "deny") == 2

    kube_double.delete("ray.io/v1", "RayJob", "resnet-nine", "vision")
    loop.run_once()
    names = {r["resources"][0]["name"] for r in kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision")["results"]}
    assert names == {"resnet-nine-again"}

    kube_double.delete("ray.io/v1", "RayJob", "resnet-nine-again", "vision")
    loop.run_once()
    assert kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision") is None
    assert kube_double.get(WG, "ClusterPolicyReport", REPORT_NAME)["summary"]["fail"] == 0
    assert _violations(loop, "gpu-per-pod-fits-node", "deny") == 0


def test_reports_written_by_others_are_left_alone(kube_double, small_cluster, loop):
    kyverno = {"apiVersion": WG, "kind": "PolicyReport", "metadata": {"name": "kyverno-report", "namespace": "vision"},
               "summary": {"pass": 1}, "results": []}
    kube_double.apply([*small_cluster, kyverno])
    loop.run_once()
    assert kube_double.get(WG, "PolicyReport", "kyverno-report", "vision") is not None


def test_the_operator_audits_at_start_and_again_when_the_policy_set_changes(
        kube_double, small_cluster, nine_gpu_rayjob, settings, tmp_path):
    folder = tmp_path / "policies"
    shutil.copytree(POLICIES, folder)
    engine = load_policy_engine(folder)
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    port = _free_port()
    options = AuditOptions(auditor=PolicyAuditor(engine, settings), interval_seconds=600, poll_seconds=0.1,
                           metrics_port=port)
    with kube_double.operator(settings, audit=options):
        def action():
            report = kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision") or {}
            fits = [r for r in report.get("results") or [] if r["policy"] == "gpu-per-pod-fits-node"]
            return fits and fits[0]["properties"]["action"]
        # generous bounds: the first audit waits on the operator's start, which a loaded CI
        # machine (the e2e tier's control planes beside it) can slow past half a minute
        assert kube_double.wait_for(action, timeout=120, message="the first audit's report") == "deny"
        (folder / "enforcement.yaml").write_text("gpu-per-pod-fits-node: warn\nhead-without-gpu: warn\n")
        kube_double.wait_for(lambda: action() == "warn", timeout=120,
                             message="a report rewritten after the policy set changed")
        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        warned = 'taugate_audit_violations{action="warn",policy="gpu-per-pod-fits-node"} 1.0'
        denied = 'taugate_audit_violations{action="deny",policy="gpu-per-pod-fits-node"} 0.0'
        kube_double.wait_for(lambda: warned in scrape() and denied in scrape(), timeout=60,
                             message="the operator's /metrics counting the violation under its new action")


def _stale_profile_set(kube_double, loop, settings) -> None:
    """The operator resolved the profile set, then a profile was added while it was away (after
    a restart the spec is ahead of the status until the operator reconciles the TauCluster)."""
    reconcile_cluster(loop.kube, settings)
    profiles = kube_double.get(TAU, "TauCluster", "cluster")["spec"]["workloadProfiles"]
    extra = dict(copy.deepcopy(profiles[0]), name="h100-added-while-away")
    kube_double.patch(TAU, "TauCluster", "cluster", {"spec": {"workloadProfiles": [*profiles, extra]}})


def _profile_results(kube_double) -> list[dict]:
    report = kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision") or {}
    return [r for r in report.get("results") or [] if r["policy"] == "workload-profile"]


def test_an_audit_waits_for_the_operator_to_resolve_a_changed_profile_set_and_leaves_the_reports_alone(
        kube_double, small_cluster, nine_gpu_rayjob, loop, settings):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    loop.run_once()
    _stale_profile_set(kube_double, loop, settings)
    since = kube_double.request_count()
    with pytest.raises(ProfileSetNotResolved, match="profile set is stale"):
        loop.run_once()
    assert kube_double.writes(since) == []  # no report says every GPU workload fails for a moment
    reconcile_cluster(loop.kube, settings)  # the operator catches up
    loop.run_once()
    assert loop.waiting_since is None and _profile_results(kube_double) == []
    assert [r["policy"] for r in (kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision") or {})["results"]
            if r["result"] == "fail"]


def test_a_profile_set_left_unresolved_for_a_whole_interval_is_reported_as_admission_refuses_it(
        kube_double, small_cluster, nine_gpu_rayjob, loop, settings):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    _stale_profile_set(kube_double, loop, settings)
    loop.options.interval_seconds = 0.0  # the wait is over at once
    loop.run_once()
    (result,) = _profile_results(kube_double)
    assert result["result"] == "fail" and "profile set is stale" in result["message"]


def test_the_operator_started_after_a_profile_change_audits_once_the_profile_set_is_resolved(
        kube_double, small_cluster, nine_gpu_rayjob, loop, settings):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    _stale_profile_set(kube_double, loop, settings)
    options = AuditOptions(auditor=PolicyAuditor(load_policy_engine(POLICIES), settings), interval_seconds=600,
                           poll_seconds=0.1)
    with kube_double.operator(settings, audit=options):
        report = kube_double.wait_for(lambda: kube_double.get(WG, "PolicyReport", REPORT_NAME, "vision"),
                                      timeout=120, message="the first audit's report")
    assert any(r["policy"] == "gpu-per-pod-fits-node" for r in report["results"])
    assert _profile_results(kube_double) == []


class HeldKube:
    """The audit's client with its first paged list held after its first page, until the
    operator begins to stop: an audit in the middle of a fleet's reads when the pod is asked to
    stop."""

    def __init__(self, kube: Kube, until: threading.Event):
        self.kube, self.until, self.reached = kube, until, threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.kube, name)

    def list_pages(self, *args, **kwargs):
        for page in self.kube.list_pages(*args, **kwargs):
            if not self.reached.is_set():
                self.reached.set()
                assert self.until.wait(30), "the operator did not begin to stop"
            yield page


async def test_an_audit_running_when_the_operator_stops_ends_before_its_next_request_and_writes_nothing(
        kube_double, small_cluster, nine_gpu_rayjob, settings):
    kube_double.apply([*small_cluster, nine_gpu_rayjob])
    applied = kube_double.request_count()
    kube = Kube(kube_double.api_client())
    loop = AuditLoop(kube, settings, AuditOptions(auditor=PolicyAuditor(load_policy_engine(POLICIES), settings),
                                                  page_size=2))
    held = loop.kube = HeldKube(kube, until=loop.stopping)
    try:
        loop.task = asyncio.create_task(loop.run())
        assert await asyncio.to_thread(held.reached.wait, 30), "the audit never read"
        requests = kube_double.request_count()
        await asyncio.wait_for(loop.stop(), 30)  # the audit's thread has ended when stop returns
        # the held page was the audit's last request: no further page, no judging, no report
        assert kube_double.request_count() == requests
        assert kube_double.writes(since=applied) == []
        assert kube_double.get(WG, "ClusterPolicyReport", REPORT_NAME) is None
        assert loop.runs == 0
    finally:
        kube.close()
