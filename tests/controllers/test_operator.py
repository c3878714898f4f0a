"""The operator, running in process with kopf against the kmock Kubernetes API over HTTP, turns
the example cluster into Ready workspaces with every child object, cleans up on delete, and
follows quota approvals."""

from __future__ import annotations

import copy

import jsonschema

from taugate import admission_policy, labels
from taugate.controllers.crds import CRD_KINDS, build_crd
from taugate.controllers.taugrid.cluster import reconcile_cluster
from taugate.controllers.taugrid.quotarequest import reconcile_quota_request
from taugate.controllers.taugrid.workspace import FINALIZER, reconcile_workspace
from taugate.kube import Kube
from taugate.models import TauCluster
from taugate.profiles import profile_set_hash
from taugate.tau_admission import validate_tau_object
from tests.controllers.conftest import pick, without
from tests.crdschema import translate

TAU = "tau.azure.com/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
RBAC = "rbac.authorization.k8s.io/v1"
SYS = "tau-platform"
ADMIN = {"username": "alice@contoso.com", "groups": ["tau-platform-admins"]}
RESEARCHER = {"username": "nina@contoso.com", "groups": ["nlp-researchers"]}


def _fixture(small_cluster: list[dict]) -> list[dict]:
    """The example cluster; the nlp LocalQueue is left for taugate to create (spec.clusterQueue),
    the vision one exists already (adopted)."""
    objs = without(copy.deepcopy(small_cluster), "LocalQueue", "nlp-queue")
    pick(objs, "TauWorkspace", "nlp")["spec"]["clusterQueue"] = "nlp-cq"
    return objs


def _phase(kd, name: str) -> str | None:
    ws = kd.get(TAU, "TauWorkspace", name, SYS)
    return ((ws or {}).get("status") or {}).get("phase")


def _valid_under_our_crd(obj: dict) -> list[str]:
    kind = next(k for k in CRD_KINDS if k.kind == obj["kind"])
    schema = translate(copy.deepcopy(build_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]


def test_the_example_cluster_yields_ready_workspaces_and_deleting_one_keeps_its_namespace_and_data(
        kube_double, small_cluster, settings):
    kd = kube_double
    kd.apply(_fixture(small_cluster))
    with kd.operator(settings):
        kd.wait_for(lambda: _phase(kd, "vision") == "Ready" and _phase(kd, "nlp") == "Ready",
                    message="both workspaces Ready")
        cluster = kd.wait_for(lambda: (kd.get(TAU, "TauCluster", "cluster").get("status") or {}).get("phase") == "Ready"
                              and kd.get(TAU, "TauCluster", "cluster"), message="TauCluster Ready")
        spec_profiles = TauCluster.model_validate(cluster).spec.workload_profiles
        assert cluster["status"]["workloadProfiles"]["profileSetHash"] == profile_set_hash(spec_profiles)
        assert {g["name"]: g["unhealthyNodes"] for g in cluster["status"]["gpuInventory"]} == {"h100": 1, "a100": 0}

        for ws, queue in (("vision", "vision-queue"), ("nlp", "nlp-queue")):
            ns = kd.get("v1", "Namespace", ws)
            assert ns["metadata"]["labels"][labels.WORKSPACE] == ws
            assert ns["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == queue
            assert kd.get(KUEUE, "LocalQueue", queue, ws)["spec"]["clusterQueue"] == f"{ws}-cq"
            rb = kd.get(RBAC, "RoleBinding", "tau-researcher", ws)
            assert rb["subjects"][0]["name"] == f"{ws}-researchers" and rb["roleRef"]["name"] == "tau-researcher-v1"
            assert kd.get("v1", "ServiceAccount", "tau-workload", ws) is not None
            pvc = kd.get("v1", "PersistentVolumeClaim", f"{ws}-data", ws)
            assert pvc["spec"]["resources"]["requests"]["storage"] == "1Ti"
            assert pvc["spec"]["storageClassName"] == "azurefile-csi-premium"
            stored = kd.get(TAU, "TauWorkspace", ws, SYS)
            assert FINALIZER in stored["metadata"]["finalizers"]
            assert _valid_under_our_crd(stored) == []
        assert _valid_under_our_crd(cluster) == []
        assert labels.MANAGED_BY not in (kd.get(KUEUE, "LocalQueue", "vision-queue",
                                                "vision")["metadata"].get("labels") or {})

        # A second reconcile of unchanged objects writes nothing.
        before = kd.request_count()
        kube = Kube.from_configuration(kd.configuration)
        try:
            assert reconcile_cluster(kube, settings).actions == []
            assert reconcile_workspace(kube, settings, SYS, "vision").actions == []
            assert reconcile_workspace(kube, settings, SYS, "nlp").actions == []
        finally:
            kube.close()
        assert kd.writes(before) == []

        # Delete nlp: what taugate made goes, the namespace and the data stay.
        kd.delete(TAU, "TauWorkspace", "nlp", SYS)
        kd.wait_for(lambda: kd.get(TAU, "TauWorkspace", "nlp", SYS) is None, message="nlp workspace gone")
        assert kd.get(KUEUE, "LocalQueue", "nlp-queue", "nlp") is None
        assert kd.get(RBAC, "RoleBinding", "tau-researcher", "nlp") is None
        assert kd.get("v1", "ServiceAccount", "tau-workload", "nlp") is None
        assert kd.get("v1", "PersistentVolumeClaim", "nlp-data", "nlp") is not None
        ns = kd.get("v1", "Namespace", "nlp")
        assert ns is not None and labels.WORKSPACE not in (ns["metadata"].get("labels") or {})
        # vision is untouched, its adopted LocalQueue too
        assert _phase(kd, "vision") == "Ready"
        assert kd.get(KUEUE, "LocalQueue", "vision-queue", "vision") is not None


def _quota_fixture(small_cluster: list[dict]) -> list[dict]:
    keep = {("TauCluster", "cluster"), ("TauWorkspace", "nlp"), ("LocalQueue", "nlp-queue"),
            ("ClusterQueue", "nlp-cq"), ("ResourceFlavor", "a100"), ("ResourceFlavor", "cpu")}
    objs = [o for o in copy.deepcopy(small_cluster) if (o["kind"], o["metadata"]["name"]) in keep]
    objs.append({"apiVersion": TAU, "kind": "TauQuotaRequest",
                 "metadata": {"name": "nlp-burst", "namespace": SYS},
                 "spec": {"workspace": "nlp", "resource": "nvidia.com/gpu", "flavor": "a100", "requested": 24,
                          "reason": "70B checkpoint sweep", "mutationMode": "Apply"}})
    return objs


def _a100_nominal(kd) -> object:
    cq = kd.get(KUEUE, "ClusterQueue", "nlp-cq")
    return next(r["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                if f["name"] == "a100" for r in f["resources"] if r["name"] == "nvidia.com/gpu")


def test_an_admin_approved_apply_request_raises_the_cluster_queue_and_a_researchers_approval_is_denied(
        kube_double, small_cluster, settings):
    kd = kube_double
    kd.apply(_quota_fixture(small_cluster))
    status = lambda: (kd.get(TAU, "TauQuotaRequest", "nlp-burst", SYS).get("status") or {})  # noqa: E731
    with kd.operator(settings):
        kd.wait_for(lambda: status().get("phase") == "PendingApproval", message="PendingApproval")
        assert _a100_nominal(kd) == 16

        old = kd.get(TAU, "TauQuotaRequest", "nlp-burst", SYS)
        approved = copy.deepcopy(old)
        approved["metadata"]["annotations"] = {labels.APPROVED: "true", labels.REVIEWED_BY: "alice@contoso.com"}
        review = {"uid": "u1", "kind": {"group": "tau.azure.com", "version": "v1alpha1", "kind": "TauQuotaRequest"},
                  "operation": "UPDATE", "object": approved, "oldObject": old, "namespace": SYS, "name": "nlp-burst"}
        denied = validate_tau_object({**review, "userInfo": RESEARCHER}, settings)
        assert [v.policy for v in denied] == ["quota-approval"]  # the API server would refuse the researcher
        assert validate_tau_object({**review, "userInfo": ADMIN}, settings) == []

        kd.patch(TAU, "TauQuotaRequest", "nlp-burst",
                 {"metadata": {"annotations": approved["metadata"]["annotations"]}},
                 SYS)
        kd.wait_for(lambda: status().get("phase") == "Approved" and status().get("quotaChange"), message="Approved")
        assert _a100_nominal(kd) == 24
        assert status()["approvedBy"] == "alice@contoso.com"
        assert status()["quotaChange"] == {"clusterQueue": "nlp-cq", "flavor": "a100", "resource": "nvidia.com/gpu",
                                           "before": 16, "after": 24}
        assert _valid_under_our_crd(kd.get(TAU, "TauQuotaRequest", "nlp-burst", SYS)) == []

        before = kd.request_count()
        kube = Kube.from_configuration(kd.configuration)
        try:
            assert reconcile_quota_request(kube, settings, SYS, "nlp-burst").actions == []
        finally:
            kube.close()
        assert kd.writes(before) == []


def test_a_changed_default_queue_reaches_the_workspace_that_has_no_queue_of_its_own(
        kube_double, small_cluster, settings):
    # The operator keeps the TauCluster's workspaceDefaults.defaultQueue from its watch (no GET of
    # the TauCluster per workspace reconcile); a change must still reach every workspace.
    kd = kube_double
    objs = _fixture(small_cluster)
    for field in ("queue", "clusterQueue"):
        del pick(objs, "TauWorkspace", "nlp")["spec"][field]
    kd.apply(objs)

    def queue() -> dict:
        return ((kd.get(TAU, "TauWorkspace", "nlp", SYS) or {}).get("status") or {}).get("queue") or {}
    with kd.operator(settings):
        kd.wait_for(lambda: queue() == {"localQueue": "jobqueue", "clusterQueue": "jobqueue"},
                    message="nlp on the default queue 'jobqueue'")
        assert _phase(kd, "nlp") == "Pending"  # no ClusterQueue 'jobqueue'
        kd.patch(TAU, "TauCluster", "cluster", {"spec": {"workspaceDefaults": {"defaultQueue": "nlp-cq"}}})
        kd.wait_for(lambda: queue() == {"localQueue": "nlp-cq", "clusterQueue": "nlp-cq"}
                    and _phase(kd, "nlp") == "Ready", message="nlp moved to the new default queue 'nlp-cq', Ready")
        assert kd.get(KUEUE, "LocalQueue", "nlp-cq", "nlp")["spec"]["clusterQueue"] == "nlp-cq"
        assert _phase(kd, "vision") == "Ready"  # its own queue: unmoved
        assert kd.get(KUEUE, "LocalQueue", "vision-queue", "vision") is not None


def test_the_api_server_policys_parameter_deleted_or_edited_by_hand_is_put_back_within_seconds(
        kube_double, small_cluster, settings):
    # An uninstall's cleanup hook deletes it, as it deletes the policy and binding; the operator
    # puts it back (it watches it: tests/e2e/test_the_api_server_keeps_taugates_rule_while_taugate_is_down.py
    # shows it within seconds on kube-apiserver, where nothing else wakes the TauCluster's reconcile).
    kd = kube_double
    kd.apply(_fixture(small_cluster))
    want = admission_policy.parameters(TauCluster.model_validate(pick(small_cluster, "TauCluster")))["spec"]

    def placement() -> dict | None:
        return kd.get(TAU, "TauProfilePlacement", admission_policy.NAME)
    with kd.operator(settings):
        kd.wait_for(lambda: (placement() or {}).get("spec") == want, message="the policy's parameter written")
        kd.delete(TAU, "TauProfilePlacement", admission_policy.NAME)
        kd.wait_for(lambda: (placement() or {}).get("spec") == want, message="the deleted parameter put back")
        kd.patch(TAU, "TauProfilePlacement", admission_policy.NAME, {"spec": {"profiles": {"mine": {}}}})
        kd.wait_for(lambda: (placement() or {}).get("spec") == want, message="the edited parameter put back")
