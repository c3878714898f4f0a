"""A TauQuotaRequest's phase follows the platform's approval annotations; an approved Apply
request raises the ClusterQueue quota once. Pure functions over plain objects."""

from __future__ import annotations

import pytest
import yaml

from taugate import labels
from taugate.controllers import resources as R
from taugate.controllers.taugrid.quotarequest import decide_phase, reconcile_quota_request
from tests.controllers.conftest import pick
from tests.controllers.memstore import MemKube, MemStore
from tests.paths import TAUGRID

NOW, LATER = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
SYS = "tau-platform"


def _request(annotations: dict | None = None, **spec) -> dict:
    return {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
            "metadata": {"name": "nlp-burst", "namespace": SYS, "annotations": annotations or {}},
            "spec": {"workspace": "nlp", "resource": "nvidia.com/gpu", "requested": 24, "reason": "sweep",
                     "mutationMode": "Apply", "flavor": "a100", **spec}}


APPROVED = {labels.APPROVED: "true", labels.REVIEWED_BY: "alice"}


def _kube(small_cluster: list[dict], request: dict) -> tuple[MemKube, MemStore]:
    store = MemStore([o for o in small_cluster if o["kind"] != "Node"] + [request])
    return MemKube(store), store


def _nominal(store: MemStore, cq: str, flavor: str, resource: str = "nvidia.com/gpu") -> object:
    for g in store.get("ClusterQueue", cq)["spec"]["resourceGroups"]:
        for f in g["flavors"]:
            if f["name"] == flavor:
                return next(r["nominalQuota"] for r in f["resources"] if r["name"] == resource)
    raise AssertionError(flavor)


@pytest.mark.parametrize("annotations,phase", [
    ({}, "PendingApproval"),
    ({labels.APPROVED: "true"}, "Approved"),
    ({labels.APPROVED: "True", labels.REVIEWED_BY: "alice"}, "Approved"),
    ({labels.APPROVED: "false"}, "PendingApproval"),
    ({labels.REJECTED: "true"}, "Rejected"),
    ({labels.APPROVED: "true", labels.REJECTED: "true"}, "Rejected"),  # rejection wins
])
def test_the_phase_follows_the_approval_annotations_and_rejection_wins(annotations, phase):
    assert decide_phase(annotations)[0] == phase


def test_an_approved_apply_request_raises_the_cluster_queue_and_records_before_and_after(small_cluster, settings):
    kube, store = _kube(small_cluster, _request(APPROVED))
    plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    assert _nominal(store, "nlp-cq", "a100") == 24
    assert _nominal(store, "nlp-cq", "cpu", "cpu") == "32"  # the other flavor is untouched
    assert _nominal(store, "nlp-cq", "a100", "cpu") == "384"  # and the flavor's other resources
    assert plan.status["phase"] == "Approved" and plan.status["approvedBy"] == "alice"
    assert plan.status["quotaChange"] == {"clusterQueue": "nlp-cq", "flavor": "a100", "resource": "nvidia.com/gpu",
                                          "before": 16, "after": 24}
    applied = next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")
    assert applied["reason"] == "Applied" and "16 -> 24" in applied["message"]
    # Applied once: the next reconcile writes nothing and keeps the record.
    again = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=LATER)
    assert again.actions == [] and again.status == plan.status


def test_a_pending_or_rejected_request_changes_no_quota(small_cluster, settings):
    for given, phase in (({}, "PendingApproval"), ({labels.REJECTED: "true", labels.REVIEWED_BY: "bob"}, "Rejected")):
        kube, store = _kube(small_cluster, _request(given))
        plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
        assert plan.status["phase"] == phase
        assert [a.resource for a in plan.actions] == [R.TAU_QUOTA_REQUESTS]
        assert _nominal(store, "nlp-cq", "a100") == 16


def test_a_withdrawn_or_rejected_approval_keeps_no_approver_and_a_second_pass_writes_nothing(small_cluster, settings):
    kube, store = _kube(small_cluster, _request(APPROVED))
    reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    assert store.get("TauQuotaRequest", "nlp-burst", SYS)["status"]["approvedBy"] == "alice"
    for given, phase, reviewer in (({labels.REVIEWED_BY: "bob"}, "PendingApproval", "bob"),
                                   ({labels.REJECTED: "true", labels.REVIEWED_BY: "carol"}, "Rejected", "carol"),
                                   ({}, "PendingApproval", None)):
        request = store.get("TauQuotaRequest", "nlp-burst", SYS)
        request["metadata"]["annotations"] = given
        store.put(request)
        reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=LATER)
        status = store.get("TauQuotaRequest", "nlp-burst", SYS)["status"]
        assert (status["phase"], status.get("reviewedBy"), "approvedBy" in status) == (phase, reviewer, False)
        assert reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=LATER).actions == []


def test_an_approval_with_spaces_around_true_is_an_approval_for_the_controller_and_the_freeze_alike(settings):
    from taugate.tau_admission import validate_tau_object

    assert decide_phase({labels.APPROVED: " true "})[0] == "Approved"
    old = _request({labels.APPROVED: " true ", labels.REVIEWED_BY: "carol"})
    raised = _request({labels.APPROVED: " true ", labels.REVIEWED_BY: "carol"}, requested=4800)
    review = {"kind": {"kind": "TauQuotaRequest"}, "operation": "UPDATE", "object": raised, "oldObject": old,
              "userInfo": {"username": "mallory", "groups": ["vision-researchers"]}}
    assert [v.field for v in validate_tau_object(review, settings)] == ["spec"]


def test_report_only_records_the_decision_and_leaves_the_quota_to_an_admin(small_cluster, settings):
    kube, store = _kube(small_cluster, _request(APPROVED, mutationMode="ReportOnly"))
    plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    assert plan.status["decision"].startswith("approved by alice")
    assert _nominal(store, "nlp-cq", "a100") == 16
    assert next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")["reason"] == "ReportOnly"


def test_apply_never_lowers_a_quota(small_cluster, settings):
    kube, store = _kube(small_cluster, _request(APPROVED, requested=8))
    plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    assert _nominal(store, "nlp-cq", "a100") == 16
    assert plan.status["quotaChange"]["before"] == plan.status["quotaChange"]["after"] == 16
    assert next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")["reason"] == "AlreadySatisfied"


def test_apply_needs_a_cluster_in_reconcile_mode(small_cluster, settings):
    pick(small_cluster, "TauCluster")["spec"]["managementMode"] = "Observe"
    kube, store = _kube(small_cluster, _request(APPROVED))
    plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    assert plan.status["phase"] == "Approved"
    assert next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")["reason"] == "ApplyNotPermitted"
    assert _nominal(store, "nlp-cq", "a100") == 16


def test_a_resource_that_names_a_flavor_means_gpus_on_that_flavor(small_cluster, settings):
    # TauGrid's sample asks for ``resource: h200``: a GPU series, i.e. a flavor.
    sample = yaml.safe_load((TAUGRID / "samples/tauquotarequest.yaml").read_text())
    sample["spec"].update(workspace="nlp", resource="a100", requested=20, mutationMode="Apply")
    sample["metadata"]["annotations"] = APPROVED
    kube, store = _kube(small_cluster, sample)
    plan = reconcile_quota_request(kube, settings, SYS, sample["metadata"]["name"], now=NOW)
    assert plan.status["quotaChange"]["resource"] == "nvidia.com/gpu" and plan.status["quotaChange"]["flavor"] == "a100"
    assert _nominal(store, "nlp-cq", "a100") == 20


def test_an_unknown_workspace_or_flavor_is_explained_not_applied(small_cluster, settings):
    for spec, reason in (({"workspace": "ghost"}, "WorkspaceNotFound"), ({"flavor": "h100"}, "FlavorNotFound")):
        kube, store = _kube(small_cluster, _request(APPROVED, **spec))
        plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
        assert next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")["reason"] == reason
        assert _nominal(store, "nlp-cq", "a100") == 16


def test_without_rbac_to_patch_cluster_queues_the_request_says_so_instead_of_retrying(small_cluster, settings):
    kube, store = _kube(small_cluster, _request(APPROVED))
    kube.forbidden = {"ClusterQueue"}
    plan = reconcile_quota_request(kube, settings, SYS, "nlp-burst", now=NOW)
    applied = next(c for c in plan.status["conditions"] if c["type"] == "QuotaApplied")
    assert applied["reason"] == "Forbidden" and "operator.quotaRaise" in applied["message"]
    assert "quotaChange" not in plan.status and plan.status["phase"] == "Approved"
    assert store.get("TauQuotaRequest", "nlp-burst", SYS)["status"]["conditions"] == plan.status["conditions"]
    assert _nominal(store, "nlp-cq", "a100") == 16
