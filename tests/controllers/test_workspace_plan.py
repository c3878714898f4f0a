"""A TauWorkspace's namespace, LocalQueue, access, service account and data volume, decided by a
pure function over plain objects (run to a fixed point against an in-memory store)."""

from __future__ import annotations

import copy

import pytest

from taugate import labels
from taugate.controllers import resources as R
from taugate.controllers.taugrid.workspace import (
    FINALIZER,
    WorkspaceObservation,
    observe_workspace,
    plan_workspace,
    reconcile_workspace,
)
from taugate.models import WorkspaceDefaults
from tests.controllers.conftest import pick, without
from tests.controllers.memstore import MemKube, MemStore

NOW, LATER = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
SYS = "tau-platform"


def _store(objects: list[dict]) -> MemStore:
    return MemStore([o for o in objects if o["kind"] != "Node"])


def _cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def _created(plan) -> dict[str, dict]:
    return {a.resource.kind: a.body for a in plan.actions if a.verb == "create"}


def test_a_new_workspace_gets_its_namespace_access_account_and_data_volume(small_cluster, settings):
    kube = MemKube(_store(small_cluster))
    plan = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert plan.actions[0].body == {"metadata": {"finalizers": [FINALIZER]}}  # before anything is created
    made = _created(plan)
    assert made["Namespace"]["metadata"]["labels"] == {
        labels.WORKSPACE: "vision", labels.KUEUE_QUEUE_NAME: "vision-queue", labels.MANAGED_BY: "taugate"}
    assert made["RoleBinding"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                              "name": "tau-researcher-v1"}
    assert made["RoleBinding"]["subjects"] == [{"kind": "Group", "name": "vision-researchers",
                                                "apiGroup": "rbac.authorization.k8s.io"}]
    assert made["ServiceAccount"]["metadata"]["name"] == "tau-workload"
    pvc = made["PersistentVolumeClaim"]
    assert pvc["metadata"]["name"] == "vision-data"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}},
                           "storageClassName": "azurefile-csi-premium"}
    assert "LocalQueue" not in made  # the example's LocalQueue exists: adopted, not recreated
    assert plan.status["phase"] == "Ready"
    assert plan.status["queue"] == {"localQueue": "vision-queue", "clusterQueue": "vision-cq"}
    assert plan.status["dataVolume"]["claimName"] == "vision-data"
    assert "(adopted)" in _cond(plan.status, "QueueReady")["message"]


def test_a_second_reconcile_of_an_unchanged_workspace_writes_nothing(small_cluster, settings):
    kube = MemKube(_store(small_cluster))
    first = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    writes = kube.writes
    second = reconcile_workspace(kube, settings, SYS, "vision", now=LATER)
    assert second.actions == [] and kube.writes == writes
    assert second.status == first.status


def test_a_missing_local_queue_is_created_for_the_workspaces_cluster_queue(small_cluster, settings):
    objs = without(small_cluster, "LocalQueue", "nlp-queue")
    pick(objs, "TauWorkspace", "nlp")["spec"]["clusterQueue"] = "nlp-cq"
    plan = reconcile_workspace(MemKube(_store(objs)), settings, SYS, "nlp", now=NOW)
    lq = _created(plan)["LocalQueue"]
    assert lq["metadata"] == {"name": "nlp-queue", "namespace": "nlp",
                              "labels": {labels.MANAGED_BY: "taugate", labels.WORKSPACE: "nlp"}}
    assert lq["spec"] == {"clusterQueue": "nlp-cq"}
    assert plan.status["phase"] == "Ready"


def test_without_a_cluster_queue_field_the_local_queue_feeds_the_default_queue(small_cluster, settings):
    objs = without(small_cluster, "LocalQueue", "nlp-queue")
    del pick(objs, "TauWorkspace", "nlp")["spec"]["clusterQueue"]
    plan = reconcile_workspace(MemKube(_store(objs)), settings, SYS, "nlp", now=NOW)
    assert _created(plan)["LocalQueue"]["spec"] == {"clusterQueue": "jobqueue"}  # workspaceDefaults.defaultQueue
    queue = _cond(plan.status, "QueueReady")
    assert queue["reason"] == "ClusterQueueNotFound" and "'jobqueue'" in queue["message"]
    assert plan.status["phase"] == "Pending"


def test_a_cluster_queue_whose_namespace_selector_skips_the_namespace_degrades_the_workspace(small_cluster, settings):
    pick(small_cluster, "ClusterQueue", "vision-cq")["spec"]["namespaceSelector"] = {
        "matchLabels": {"kubernetes.io/metadata.name": "somewhere-else"}}
    plan = reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW)
    assert _cond(plan.status, "QueueReady")["reason"] == "NamespaceNotSelected"
    assert plan.status["phase"] == "Degraded"


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "default", "taugate-system",
                                       "tau-platform"])
def test_a_workspace_may_not_take_a_reserved_namespace_and_creates_nothing(small_cluster, settings, namespace):
    pick(small_cluster, "TauWorkspace", "vision")["spec"]["target"]["namespace"] = namespace
    plan = reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW)
    assert [a.verb for a in plan.actions if a.verb == "create"] == []
    cond = _cond(plan.status, "NamespaceReady")
    assert cond["reason"] == "NamespaceRefused" and "reserved" in cond["message"]
    assert plan.status["phase"] == "Degraded"


def test_a_namespace_that_belongs_to_another_workspace_is_refused(small_cluster, settings):
    store = _store(small_cluster)
    kube = MemKube(store)
    reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    intruder = copy.deepcopy(pick(small_cluster, "TauWorkspace", "nlp"))
    intruder["metadata"]["name"] = "intruder"
    intruder["spec"]["target"]["namespace"] = "vision"
    store.put(intruder)
    writes = kube.writes
    plan = reconcile_workspace(kube, settings, SYS, "intruder", now=NOW)
    assert "belongs to TauWorkspace 'vision'" in _cond(plan.status, "NamespaceReady")["message"]
    assert [a.resource for a in plan.actions] == [R.TAU_WORKSPACES, R.TAU_WORKSPACES]  # finalizer + status only
    assert store.get("Namespace", "vision")["metadata"]["labels"][labels.WORKSPACE] == "vision"
    assert kube.writes == writes + 2


class _ListCounting(MemKube):
    def __init__(self, store: MemStore) -> None:
        super().__init__(store)
        self.listed: list[str] = []

    def list(self, res, namespace=None, labels=None):
        self.listed.append(res.kind)
        return super().list(res, namespace, labels)


def test_a_workspace_reads_the_other_workspaces_only_until_its_namespace_is_labelled_its_own(
        small_cluster, settings):
    # Listing every TauWorkspace on every reconcile made a fleet's cold start quadratic.
    store = _store(small_cluster)
    kube = _ListCounting(store)
    reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert store.get("Namespace", "vision")["metadata"]["labels"][labels.WORKSPACE] == "vision"
    kube.listed.clear()
    again = reconcile_workspace(kube, settings, SYS, "vision", now=LATER)
    assert kube.listed == [] and again.status["phase"] == "Ready"
    intruder = copy.deepcopy(pick(small_cluster, "TauWorkspace", "nlp"))
    intruder["metadata"]["name"] = "intruder"
    intruder["spec"]["target"]["namespace"] = "vision"
    store.put(intruder)
    refused = reconcile_workspace(kube, settings, SYS, "intruder", now=NOW)
    assert kube.listed == ["TauWorkspace"]  # not yet its own: the rivals are read
    assert "belongs to TauWorkspace 'vision'" in _cond(refused.status, "NamespaceReady")["message"]


def test_of_two_new_workspaces_for_one_namespace_the_older_one_gets_it(small_cluster, settings):
    older = pick(small_cluster, "TauWorkspace", "vision")
    older["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    younger = copy.deepcopy(older)
    younger["metadata"].update(name="vision-2", creationTimestamp="2026-02-01T00:00:00Z")
    obs = WorkspaceObservation(workspace=younger, other_workspaces=[older])
    plan = plan_workspace(obs, settings, NOW)
    assert "older TauWorkspace 'vision'" in _cond(plan.status, "NamespaceReady")["message"]
    assert plan_workspace(WorkspaceObservation(workspace=older, other_workspaces=[younger]), settings,
                          NOW).status["phase"] != "Degraded"


def test_a_workspace_that_may_not_create_its_namespace_waits_for_it(small_cluster, settings):
    pick(small_cluster, "TauWorkspace", "vision")["spec"]["target"]["createNamespace"] = False
    plan = reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW)
    assert _cond(plan.status, "NamespaceReady")["reason"] == "NamespaceMissing"
    assert plan.status["phase"] == "Pending" and not _created(plan)


def test_cluster_wide_authorization_binds_nobody_and_workload_identity_annotates_the_account(small_cluster, settings):
    spec = pick(small_cluster, "TauWorkspace", "vision")["spec"]
    for k in ("principalRef", "kubernetesSubject", "role"):
        spec.pop(k)
    spec["authorization"] = {"mode": "cluster-wide"}
    spec["workloadIdentity"] = {"serviceAccountName": "vision-runner", "clientId": "0000-1111"}
    plan = reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW)
    made = _created(plan)
    assert "RoleBinding" not in made
    assert made["ServiceAccount"]["metadata"]["name"] == "vision-runner"
    assert made["ServiceAccount"]["metadata"]["annotations"] == {"azure.workload.identity/client-id": "0000-1111"}
    assert _cond(plan.status, "AccessReady")["reason"] == "ClusterWide"


def test_a_service_account_subject_is_bound_with_its_namespace(small_cluster, settings):
    pick(small_cluster, "TauWorkspace", "vision")["spec"]["kubernetesSubject"] = {
        "kind": "ServiceAccount", "name": "system:serviceaccount:ci:pipeline"}
    made = _created(reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW))
    assert made["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline", "namespace": "ci"}]


def test_a_foreign_role_binding_of_the_same_name_is_left_alone_and_reported(small_cluster, settings):
    store = _store(small_cluster)
    store.put({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tau-researcher", "namespace": "vision"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
               "subjects": [{"kind": "User", "name": "mallory"}]})
    plan = reconcile_workspace(MemKube(store), settings, SYS, "vision", now=NOW)
    assert "RoleBinding" not in _created(plan)
    assert _cond(plan.status, "AccessReady")["reason"] == "RoleBindingConflict"
    assert store.get("RoleBinding", "tau-researcher", "vision")["roleRef"]["name"] == "admin"


def test_an_invalid_workspace_is_reported_in_status(small_cluster, settings):
    pick(small_cluster, "TauWorkspace", "vision")["spec"]["role"] = "superuser"
    plan = reconcile_workspace(MemKube(_store(small_cluster)), settings, SYS, "vision", now=NOW)
    spec_valid = _cond(plan.status, "SpecValid")
    assert spec_valid["reason"] == "InvalidSpec" and "role" in spec_valid["message"]
    assert not _created(plan)


def test_deleting_a_workspace_removes_what_taugate_made_and_keeps_namespace_and_data(small_cluster, settings):
    objs = without(small_cluster, "LocalQueue", "nlp-queue")
    pick(objs, "TauWorkspace", "nlp")["spec"]["clusterQueue"] = "nlp-cq"
    store = _store(objs)
    kube = MemKube(store)
    reconcile_workspace(kube, settings, SYS, "nlp", now=NOW)
    reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    ws = store.get("TauWorkspace", "nlp", SYS)
    ws["metadata"]["deletionTimestamp"] = LATER
    store.put(ws)
    plan = reconcile_workspace(kube, settings, SYS, "nlp", now=LATER)
    deleted = {(a.resource.kind, a.name) for a in plan.actions if a.verb == "delete"}
    assert deleted == {("LocalQueue", "nlp-queue"), ("RoleBinding", "tau-researcher"),
                       ("ServiceAccount", "tau-workload")}
    assert plan.actions[-1].body == {"metadata": {"finalizers": []}}  # the finalizer goes last
    assert store.get("Namespace", "nlp") is not None
    assert store.get("PersistentVolumeClaim", "nlp-data", "nlp") is not None
    assert labels.WORKSPACE not in store.get("Namespace", "nlp")["metadata"]["labels"]  # the claim is released
    # the other workspace is untouched
    assert store.get("RoleBinding", "tau-researcher", "vision") is not None
    # a finished cleanup does nothing more
    assert plan_workspace(observe_workspace(kube, SYS, "nlp"), settings, LATER).actions == []


def test_cleanup_keeps_an_adopted_local_queue(small_cluster, settings):
    store = _store(small_cluster)
    kube = MemKube(store)
    reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    ws = store.get("TauWorkspace", "vision", SYS)
    ws["metadata"]["deletionTimestamp"] = LATER
    store.put(ws)
    plan = reconcile_workspace(kube, settings, SYS, "vision", now=LATER)
    assert ("LocalQueue", "vision-queue") not in {(a.resource.kind, a.name) for a in plan.actions if a.verb == "delete"}
    assert store.get("LocalQueue", "vision-queue", "vision") is not None


# ---- reserved namespaces and adoption (issue 27) ------------------------------------------------------

def _existing_namespace(name: str, **annotations: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


def _targeting(small_cluster, namespace: str) -> list[dict]:
    objs = copy.deepcopy(small_cluster)
    ws = pick(objs, "TauWorkspace", "vision")
    ws["spec"]["target"]["namespace"] = namespace
    return objs


@pytest.mark.parametrize("namespace", ["ray-system", "kueue-system", "jobset-system", "lws-system", "kubeflow",
                                       "kube-public", "kube-node-lease"])
def test_a_workspace_targeting_a_trusted_controllers_or_kubernetes_namespace_creates_nothing(
        small_cluster, settings, namespace):
    kube = MemKube(_store([*_targeting(small_cluster, namespace), _existing_namespace(namespace)]))
    plan = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert [a for a in plan.actions if a.resource.kind not in ("TauWorkspace",)] == []
    assert plan.status["phase"] == "Degraded"
    assert "reserved" in _cond(plan.status, "NamespaceReady")["message"]


def test_an_existing_namespace_taugate_did_not_create_is_adopted_only_with_an_admins_annotation(
        small_cluster, settings):
    kube = MemKube(_store([*_targeting(small_cluster, "legacy-ml"), _existing_namespace("legacy-ml")]))
    plan = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert [a.resource.kind for a in plan.actions if a.resource.kind != "TauWorkspace"] == []
    msg = _cond(plan.status, "NamespaceReady")["message"]
    assert plan.status["phase"] == "Degraded" and "was not created by taugate" in msg
    assert f"kubectl annotate namespace legacy-ml {labels.ADOPT_AS_WORKSPACE}=vision" in msg
    # an annotation naming another workspace is no opt-in for this one
    kube = MemKube(_store([*_targeting(small_cluster, "legacy-ml"),
                           _existing_namespace("legacy-ml", **{labels.ADOPT_AS_WORKSPACE: "nlp"})]))
    assert reconcile_workspace(kube, settings, SYS, "vision", now=NOW).status["phase"] == "Degraded"
    kube = MemKube(_store([*_targeting(small_cluster, "legacy-ml"),
                           _existing_namespace("legacy-ml", **{labels.ADOPT_AS_WORKSPACE: "vision"})]))
    plan = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert "RoleBinding" in _created(plan)
    assert any(a.resource.kind == "Namespace" and a.verb == "patch" for a in plan.actions)  # the claim labels


def test_a_namespace_taugate_created_for_the_workspace_needs_no_annotation(small_cluster, settings):
    kube = MemKube(_store(small_cluster))
    first = reconcile_workspace(kube, settings, SYS, "vision", now=NOW)
    assert "Namespace" in _created(first)
    created = _created(first)["Namespace"]
    again = MemKube(_store([*small_cluster, created]))
    assert reconcile_workspace(again, settings, SYS, "vision", now=LATER).status["phase"] == "Ready"


class _GetCounting(MemKube):
    def __init__(self, store: MemStore) -> None:
        super().__init__(store)
        self.read: list[str] = []

    def get(self, res, name, namespace=None):
        self.read.append(res.kind)
        return super().get(res, name, namespace)


def test_a_workspace_given_the_default_queue_by_the_operators_watch_reads_no_tau_cluster_and_decides_the_same(
        small_cluster, settings):
    # A GET of a TauCluster of hundreds of profiles for every workspace made a fleet's cold start slow.
    objs = without(small_cluster, "LocalQueue", "nlp-queue")
    for field in ("queue", "clusterQueue"):
        del pick(objs, "TauWorkspace", "nlp")["spec"][field]
    pick(objs, "TauCluster")["spec"]["workspaceDefaults"] = {"defaultQueue": "nlp-cq"}
    read = _GetCounting(_store(objs))
    given = _GetCounting(_store(objs))
    by_reading = reconcile_workspace(read, settings, SYS, "nlp", now=NOW)
    by_watch = reconcile_workspace(given, settings, SYS, "nlp", now=NOW, default_queue="nlp-cq")
    assert "TauCluster" in read.read and "TauCluster" not in given.read
    assert by_watch == by_reading
    assert _created(by_watch)["LocalQueue"]["metadata"]["name"] == "nlp-cq"
    assert by_watch.status["queue"] == {"localQueue": "nlp-cq", "clusterQueue": "nlp-cq"}


@pytest.mark.parametrize("mistake", ["a profile", "another workspaceDefaults field"])
def test_a_mistake_elsewhere_in_the_tau_cluster_does_not_move_the_default_queue(small_cluster, mistake):
    cluster = pick(small_cluster, "TauCluster")
    cluster["spec"]["workspaceDefaults"] = {"defaultQueue": "shared-cq"}
    if mistake == "a profile":
        cluster["spec"]["workloadProfiles"] = [{"name": 7, "gpuClass": ["not", "a", "name"]}]
    else:
        cluster["spec"]["workspaceDefaults"]["dataVolume"] = "1Ti"
    assert WorkspaceDefaults.default_queue_of(cluster) == "shared-cq"
    cluster["spec"]["workspaceDefaults"]["defaultQueue"] = 7
    assert WorkspaceDefaults.default_queue_of(cluster) == "jobqueue"
    assert WorkspaceDefaults.default_queue_of(None) == "jobqueue"
