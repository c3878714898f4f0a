"""The TauCluster's desired state, decided by a pure function over plain objects."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.controllers import resources as R
from taugate.controllers.taugrid.cluster import ClusterObservation, plan_cluster, reconcile_cluster
from taugate.models import NodeLabelRule, TauCluster
from taugate.profiles import profile_set_hash
from taugate.snapshot import build_state, rule_matches
from tests.controllers.conftest import pick, without
from tests.controllers.memstore import MemKube, MemStore

NOW, LATER = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"


def _obs(objects: list[dict]) -> ClusterObservation:
    by = lambda kind: [o for o in objects if o["kind"] == kind]  # noqa: E731
    return ClusterObservation(cluster=pick(objects, "TauCluster"), nodes=by("Node"), local_queues=by("LocalQueue"),
                              cluster_queues=by("ClusterQueue"), flavors=by("ResourceFlavor"),
                              priority_classes=by("WorkloadPriorityClass"))


def _profile(status: dict, name: str) -> dict:
    return next(p for p in status["workloadProfiles"]["profiles"] if p["name"] == name)


def _cond(conds: list[dict], type_: str) -> dict:
    return next(c for c in conds if c["type"] == type_)


def test_the_example_cluster_resolves_every_profile_with_the_hash_admission_checks(example_objects, settings):
    plan = plan_cluster(_obs(example_objects), settings, NOW)
    status = plan.status
    cluster = TauCluster.model_validate(pick(example_objects, "TauCluster"))
    assert status["phase"] == "Ready"
    assert status["workloadProfiles"]["profileSetHash"] == profile_set_hash(cluster.spec.workload_profiles)
    assert status["workloadProfiles"]["observed"] == status["workloadProfiles"]["ready"] == 5
    h100 = _profile(status, "h100-8gpu")
    assert h100["clusterQueues"] == ["vision-cq"] and h100["resourceFlavors"] == ["cpu", "h100"]
    assert {c["type"] for c in h100["conditions"]} == {"Ready", "QueueResolved", "FlavorsResolved", "GpuClassAvailable",
                                                     "PriorityClassFound"}
    # The status round-trips through the model and admission accepts the profile set as current.
    with_status = dict(pick(example_objects, "TauCluster"), status=status)
    TauCluster.model_validate(with_status)
    state = build_state([with_status, *[o for o in example_objects if o["kind"] != "TauCluster"]], settings)
    assert state.profile_set_problem is None
    assert state.profiles["h100-8gpu"].is_ready()


def test_the_gpu_inventory_counts_the_failing_h100_node_as_unhealthy(example_objects, settings):
    inventory = {s["name"]: s for s in plan_cluster(_obs(example_objects), settings, NOW).status["gpuInventory"]}
    assert inventory["h100"]["nodes"] == 4 and inventory["h100"]["unhealthyNodes"] == 1
    assert inventory["h100"]["problems"] == {"aks-h100-3": ["GpuXid"]}
    assert inventory["a100"]["healthyGpus"] == 16 and inventory["a100"]["maxGpusPerNode"] == 4


def test_a_profile_whose_local_queue_is_missing_is_not_ready_and_says_which(example_objects, settings):
    plan = plan_cluster(_obs(without(example_objects, "LocalQueue", "nlp-queue")), settings, NOW)
    a100 = _profile(plan.status, "a100-4gpu")
    ready = _cond(a100["conditions"], "Ready")
    assert ready["status"] == "False" and "LocalQueue 'nlp-queue' not found" in ready["message"]
    assert _cond(a100["conditions"], "QueueResolved")["reason"] == "QueueNotFound"
    assert plan.status["phase"] == "Degraded"
    assert "a100-4gpu" in _cond(plan.status["conditions"], "ProfilesResolved")["message"]
    assert plan.status["workloadProfiles"]["ready"] == 4


def test_a_profile_whose_workload_priority_class_is_missing_is_not_ready(example_objects, settings):
    # Kueue builds no Workload for a job naming a missing WorkloadPriorityClass (jobframework
    # ExtractPriority): the job would sit suspended, so the profile is not Ready.
    objects = without(example_objects, "WorkloadPriorityClass", "tau-train-default")
    plan = plan_cluster(_obs(objects), settings, NOW)
    h100 = _profile(plan.status, "h100-8gpu")
    missing = _cond(h100["conditions"], "PriorityClassFound")
    assert missing["status"] == "False" and missing["reason"] == "PriorityClassMissing"
    assert ("WorkloadPriorityClass 'tau-train-default' (priorities.workloadPriorityClassName) not found"
            in missing["message"])
    assert _cond(h100["conditions"], "Ready")["status"] == "False"
    assert _profile(plan.status, "cpu-small")["conditions"][0]["status"] == "True"  # it names no class
    assert plan.status["phase"] == "Degraded" and plan.status["workloadProfiles"]["ready"] == 1
    state = build_state([dict(pick(objects, "TauCluster"), status=plan.status),
                         *[o for o in objects if o["kind"] != "TauCluster"]], settings)
    assert not state.profiles["h100-8gpu"].is_ready()
    assert _cond(_profile(plan_cluster(_obs(example_objects), settings, LATER).status, "h100-8gpu")["conditions"],
                 "PriorityClassFound")["status"] == "True"


def test_a_gpu_flavor_that_pins_another_class_disagrees_with_the_profile(example_objects, settings):
    pick(example_objects, "ResourceFlavor", "h100")["spec"]["nodeLabels"][labels.GPU_CLASS] = "a100"
    status = plan_cluster(_obs(example_objects), settings, NOW).status
    flavors = _cond(_profile(status, "h100-4gpu")["conditions"], "FlavorsResolved")
    assert flavors["status"] == "False" and "h100=a100" in flavors["message"]
    assert _cond(_profile(status, "cpu-small")["conditions"], "Ready")["status"] == "True"  # no GPU class asked


def test_a_profile_whose_gpu_class_is_on_no_node_is_not_ready(example_objects, settings):
    nodes_gone = [o for o in example_objects if not (o["kind"] == "Node" and "a100" in o["metadata"]["name"])]
    status = plan_cluster(_obs(nodes_gone), settings, NOW).status
    cond = _cond(_profile(status, "a100-4gpu")["conditions"], "GpuClassAvailable")
    assert cond["status"] == "False" and cond["message"] == "no node has GPU class 'a100'"


def _unlabelled(example_objects: list[dict], mode: str) -> list[dict]:
    objs = copy.deepcopy(example_objects)
    pick(objs, "TauCluster")["spec"]["managementMode"] = mode
    for o in objs:
        if o["kind"] == "Node":
            o["metadata"]["labels"].pop(labels.GPU_CLASS, None)
    # one A100 node is found by its GPU Feature Discovery product only (no VM size label)
    pick(objs, "Node", "aks-a100-0")["metadata"]["labels"].pop("node.kubernetes.io/instance-type")
    return objs


def test_node_label_rules_label_gpu_nodes_in_reconcile_mode(example_objects, settings):
    plan = plan_cluster(_obs(_unlabelled(example_objects, "Reconcile")), settings, NOW)
    node_patches = {a.name: a.body for a in plan.actions if a.resource == R.NODES}
    assert node_patches["aks-h100-0"] == {"metadata": {"labels": {labels.GPU_CLASS: "h100"}}}
    assert node_patches["aks-a100-0"] == {"metadata": {"labels": {labels.GPU_CLASS: "a100"}}}  # by GFD product
    assert "aks-cpu-0" not in node_patches  # no rule matches a CPU VM size
    assert plan.status["nodes"] == {"observed": 10, "ready": 10, "drifted": 0}
    assert _cond(plan.status["conditions"], "NodeLabelsApplied")["status"] == "True"


def test_node_label_rules_only_report_drift_in_observe_mode(example_objects, settings):
    plan = plan_cluster(_obs(_unlabelled(example_objects, "Observe")), settings, NOW)
    assert not [a for a in plan.actions if a.resource == R.NODES]
    assert plan.status["nodes"]["drifted"] == 8
    cond = _cond(plan.status["conditions"], "NodeLabelsApplied")
    assert cond["reason"] == "ObserveOnly" and "managementMode is Observe" in cond["message"]
    assert plan.status["phase"] == "Degraded"


def test_a_rule_with_no_vm_sizes_and_no_products_matches_every_node():
    rule = NodeLabelRule.model_validate({"labels": {"pool": "gpu"}})
    assert rule_matches(rule, {}) and rule_matches(rule, {"node.kubernetes.io/instance-type": "x"})
    gfd = NodeLabelRule.model_validate({"labels": {"a": "b"}, "gpuProducts": ["NVIDIA-H100-80GB-HBM3"]})
    assert rule_matches(gfd, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert not rule_matches(gfd, {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"})


def test_a_second_reconcile_of_an_unchanged_cluster_writes_nothing(example_objects, settings):
    kube = MemKube(MemStore(_unlabelled(example_objects, "Reconcile")))
    first = reconcile_cluster(kube, settings, now=NOW)
    assert first.actions and kube.writes == len(first.actions) + 1  # and the API server policy's parameter
    second = reconcile_cluster(kube, settings, now=LATER)
    assert second.actions == []
    # and the condition times did not move, since nothing changed
    assert second.status == first.status


def test_condition_times_move_only_when_a_condition_changes(example_objects, settings):
    store = MemStore(example_objects)
    kube = MemKube(store)
    reconcile_cluster(kube, settings, now=NOW)
    store.objects.pop(("LocalQueue", "nlp", "nlp-queue"))
    plan = reconcile_cluster(kube, settings, now=LATER)
    a100 = _profile(plan.status, "a100-4gpu")
    assert _cond(a100["conditions"], "Ready")["lastTransitionTime"] == LATER
    assert _cond(_profile(plan.status, "h100-1gpu")["conditions"], "Ready")["lastTransitionTime"] == NOW


def test_an_invalid_taucluster_is_reported_in_status_not_crashed_on(example_objects, settings):
    pick(example_objects, "TauCluster")["spec"]["workloadProfiles"][0]["mode"] = "sometimes"
    plan = plan_cluster(_obs(example_objects), settings, NOW)
    assert plan.status["phase"] == "Degraded"
    ready = _cond(plan.status["conditions"], "Ready")
    assert ready["reason"] == "InvalidSpec" and "workloadProfiles[0].mode" in ready["message"]
    assert [a.subresource for a in plan.actions] == ["status"]


def test_a_changed_profile_gets_a_new_hash_in_status(example_objects, settings):
    before = plan_cluster(_obs(example_objects), settings, NOW).status["workloadProfiles"]["profileSetHash"]
    pick(example_objects, "TauCluster")["spec"]["workloadProfiles"][0]["workerCount"] = 3
    after = plan_cluster(_obs(example_objects), settings, NOW).status["workloadProfiles"]["profileSetHash"]
    assert before != after and len(after) == 64


def test_without_rbac_to_label_nodes_reconcile_mode_reports_the_drift(example_objects, settings):
    kube = MemKube(MemStore(_unlabelled(example_objects, "Reconcile")), forbidden={"Node"})
    plan = reconcile_cluster(kube, settings, now=NOW)
    cond = _cond(plan.status["conditions"], "NodeLabelsApplied")
    assert cond["reason"] == "Forbidden" and "grant it patch on nodes" in cond["message"]
    assert plan.status["nodes"]["drifted"] == 8
    assert kube.store.get("TauCluster", "cluster")["status"]["phase"] == "Degraded"
