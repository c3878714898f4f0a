"""The webhook follows the cluster: the watch-based state provider rebuilds its ClusterState when
Nodes or ClusterQueues change in the API (no restart, no API call per request), is not ready
before its first full sync, fails closed on a stale profile set, and shows an outage as age."""

from __future__ import annotations

import asyncio
import copy
import math
import time

import pytest

from taugate.kube import Kube
from taugate.state_objects import usable_objects
from taugate.webhook.state_watch import WatchStateProvider
from tests.controllers.conftest import pick
from tests.kubedouble import DRA_RESOURCES, RESOURCES, KubeDouble

TAU = "tau.azure.com/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
SYS = "tau-platform"


def _vision_only(example_objects: list[dict]) -> list[dict]:
    """The vision workspace's slice of the example: TauCluster, workspace, its queues and flavors,
    the profiles' WorkloadPriorityClass and two healthy H100 nodes."""
    keep = {("TauCluster", "cluster"), ("TauWorkspace", "vision"), ("LocalQueue", "vision-queue"),
            ("ClusterQueue", "vision-cq"), ("ResourceFlavor", "h100"), ("ResourceFlavor", "cpu"),
            ("WorkloadPriorityClass", "tau-train-default"), ("Node", "aks-h100-0"), ("Node", "aks-h100-1")}
    return [o for o in example_objects if (o["kind"], o["metadata"]["name"]) in keep]


async def _until(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def engine(settings):
    from taugate.webhook.engines import load_policy_engine

    return load_policy_engine(settings.policy_dir)


def _admit(classifier, provider, settings, engine):
    from taugate.webhook.review import admit

    return admit(copy.deepcopy(classifier), state=provider.state, settings=settings, engine=engine, namespace="vision")


async def test_the_state_and_the_webhooks_decision_follow_node_and_cluster_queue_changes(
        kube_double, example_objects, classifier, settings, engine):
    kd = kube_double
    kd.apply(_vision_only(example_objects))
    provider = WatchStateProvider(Kube.from_configuration(kd.configuration), settings, debounce_seconds=0.02)
    with kd.operator(settings):  # the operator writes the TauCluster's status, the webhook checks its hash
        await provider.start()
        try:
            assert await provider.wait_ready(10)
            await _until(lambda: provider.state.cluster.status is not None, what="the operator's TauCluster status")
            assert provider.state.profile_set_problem is None
            first = _admit(classifier, provider, settings, engine)
            assert first.allowed, first.message

            # The ClusterQueue shrinks: the same RayJob can now never be admitted.
            generation = provider.generation
            cq = kd.get(KUEUE, "ClusterQueue", "vision-cq")
            gpu = next(r for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "h100"
                       for r in f["resources"] if r["name"] == "nvidia.com/gpu")
            gpu.update(nominalQuota=2, borrowingLimit=0)
            kd.patch(KUEUE, "ClusterQueue", "vision-cq", {"spec": {"resourceGroups": cq["spec"]["resourceGroups"]}})
            await _until(lambda: provider.generation > generation and
                         any(q.nominal == 2 for q in provider.state.queue_quotas[("vision", "vision-queue")]),
                         what="the smaller quota")
            denied = _admit(classifier, provider, settings, engine)
            assert not denied.allowed
            assert "gpu-total-fits-queue" in {v.policy for v in denied.violations}

            # Both H100 nodes fail a GPU health check: the summary and the warnings follow.
            for node in ("aks-h100-0", "aks-h100-1"):
                conds = kd.get("v1", "Node", node)["status"]["conditions"]
                for c in conds:
                    if c["type"] == "GpuXid":
                        c.update(status="True", reason="GpuXidHasIssues")
                kd.patch("v1", "Node", node, {"status": {"conditions": conds}})
            await _until(lambda: provider.state.gpu_classes["h100"].unhealthy_nodes == 2, what="unhealthy nodes")
            assert provider.state.gpu_classes["h100"].healthy_gpus == 0
            warned = _admit(classifier, provider, settings, engine)
            assert any("gpu-healthy-capacity" in w for w in warned.warnings)
        finally:
            await provider.stop()


async def test_the_provider_is_not_ready_before_its_first_full_sync_and_then_serves_from_memory(
        kube_double, example_objects, settings, classifier, engine):
    kube_double.apply(_vision_only(example_objects))
    provider = WatchStateProvider(Kube.from_configuration(kube_double.configuration), settings, debounce_seconds=0.02)
    assert provider.ready is False and provider.state is None and math.isinf(provider.age_seconds())
    await provider.start()
    try:
        assert await provider.wait_ready(10)
        assert provider.ready and provider.state.workspace_for("vision").metadata.name == "vision"
        assert provider.age_seconds() == 0.0  # every watch is connected
        before = kube_double.request_count()
        decisions = [_admit(classifier, provider, settings, engine) for _ in range(20)]
        assert all(d.allowed for d in decisions)
        calls = [r for r in kube_double.request_log(before) if r[2].get("watch") != "true"]
        assert calls == []  # no API call per admission request (watch streams opening are not calls)
    finally:
        await provider.stop()


async def test_a_stale_profile_set_hash_fails_closed(kube_double, example_objects, settings, classifier, engine):
    objs = _vision_only(example_objects)
    cluster = pick(objs, "TauCluster")
    cluster["status"] = {"workloadProfiles": {"profileSetHash": "0" * 64, "profiles": [
        {**p, "conditions": [{"type": "Ready", "status": "True", "reason": "Resolved", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        for p in cluster["spec"]["workloadProfiles"]]}}
    kube_double.apply(objs)
    provider = WatchStateProvider(Kube.from_configuration(kube_double.configuration), settings, debounce_seconds=0.02)
    await provider.start()
    try:
        assert await provider.wait_ready(10)
        assert "stale" in provider.state.profile_set_problem
        decision = _admit(classifier, provider, settings, engine)
        assert not decision.allowed and "stale" in decision.message
    finally:
        await provider.stop()


async def test_a_cluster_that_does_not_serve_dra_is_ready_with_no_dra_objects(example_objects, settings):
    with KubeDouble(tuple(r for r in RESOURCES if r not in DRA_RESOURCES)) as kd:  # a cluster before 1.34
        kd.apply(_vision_only(example_objects))
        provider = WatchStateProvider(Kube.from_configuration(kd.configuration), settings, debounce_seconds=0.02)
        await provider.start()
        try:
            assert await provider.wait_ready(10)
            assert provider.age_seconds() == 0.0  # an API that is not served is no watch that is down
            assert provider.state.device_classes == {} and provider.state.claim_templates == {}
        finally:
            await provider.stop()


async def test_claim_templates_and_device_classes_follow_the_cluster(kube_double, example_objects, settings):
    kube_double.apply(_vision_only(example_objects))
    provider = WatchStateProvider(Kube.from_configuration(kube_double.configuration), settings, debounce_seconds=0.02)
    await provider.start()
    try:
        assert await provider.wait_ready(10)
        kube_double.apply([
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}},
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "four", "namespace": "vision"}, "spec": {"spec": {"devices": {"requests": [
                 {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}])
        await _until(lambda: ("vision", "four") in provider.state.claim_templates, what="the claim template")
        assert set(provider.state.device_classes) == {"gpu.nvidia.com"}
        assert provider.state.claim_templates[("vision", "four")]["devices"]["requests"][0]["exactly"]["count"] == 4
    finally:
        await provider.stop()


async def test_a_claim_template_the_watch_has_not_delivered_yet_is_read_from_the_api_server(
        kube_double, example_objects, settings):
    kube_double.apply(_vision_only(example_objects))
    provider = WatchStateProvider(Kube.from_configuration(kube_double.configuration), settings, debounce_seconds=0.02)
    await provider.start()
    try:
        assert await provider.wait_ready(10)
        state = provider.state  # built before the template exists, as one a review is decided with
        kube_double.apply([{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                            "metadata": {"name": "just-made", "namespace": "vision"},
                            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {
                                "deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}}])
        assert ("vision", "just-made") not in state.claim_templates
        spec = await asyncio.to_thread(state.claim_spec, "template", "vision", "just-made")
        assert spec == {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                            "count": 2}}]}}
        assert await asyncio.to_thread(state.claim_spec, "template", "vision", "never-made") is None
        assert await asyncio.to_thread(state.claim_spec, "claim", "vision", "just-made") is None
    finally:
        await provider.stop()


async def test_an_api_outage_shows_as_a_growing_state_age(example_objects, settings):
    kd = KubeDouble().__enter__()
    provider = None
    try:
        kd.apply(_vision_only(example_objects))
        provider = WatchStateProvider(Kube.from_configuration(kd.configuration), settings, debounce_seconds=0.02)
        await provider.start()
        assert await provider.wait_ready(10)
        assert provider.age_seconds() == 0.0
    finally:
        kd.__exit__(None, None, None)  # the API server goes away
    try:
        await _until(lambda: provider.age_seconds() > 0.2, what="a growing age")
        assert provider.state is not None  # the last state keeps serving
    finally:
        await provider.stop()


def test_an_invalid_workspace_or_a_second_claim_on_a_namespace_is_left_out(example_objects):
    ws = pick(example_objects, "TauWorkspace", "vision")
    ws["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    rival = copy.deepcopy(ws)
    rival["metadata"].update(name="vision-2", creationTimestamp="2026-03-01T00:00:00Z")
    broken = copy.deepcopy(pick(example_objects, "TauWorkspace", "nlp"))
    broken["metadata"]["name"] = "broken"
    broken["spec"]["role"] = "owner"
    other_cluster = copy.deepcopy(pick(example_objects, "TauCluster"))
    other_cluster["metadata"]["name"] = "prod"
    elsewhere = copy.deepcopy(pick(example_objects, "TauWorkspace", "nlp"))
    elsewhere["metadata"].update(name="squatter", namespace="team-x")
    elsewhere["spec"]["target"]["namespace"] = "payments"
    kept, skipped = usable_objects([rival, *example_objects, broken, other_cluster, elsewhere], SYS)
    names = {(o["kind"], o["metadata"]["name"]) for o in kept}
    assert ("TauWorkspace", "vision") in names and ("TauWorkspace", "vision-2") not in names
    assert ("TauWorkspace", "broken") not in names and ("TauCluster", "prod") not in names
    assert ("TauWorkspace", "squatter") not in names  # only the system namespace's workspaces claim namespaces
    assert any("namespace 'vision' already belongs to TauWorkspace vision" in s for s in skipped)
    assert len(skipped) == 4
    # the example's pod PriorityClass passes through: usable_objects leaves kinds it does not judge alone
    assert {o["kind"] for o in kept} == {"TauCluster", "TauWorkspace", "Node", "LocalQueue", "ClusterQueue",
                                         "ResourceFlavor", "WorkloadPriorityClass", "PriorityClass",
                                         "DeviceClass"}


def test_the_provider_reads_a_scale_requests_parent_from_the_api_and_says_why_it_cannot(settings):
    from taugate.kinds import deployment
    from taugate.kubeaccess import Resource
    from taugate.webhook.scale import ObjectUnreadable

    res = Resource("apps", "v1", deployment.KIND.resource, "Deployment", True)
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve", "namespace": "vision"},
           "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    with KubeDouble() as kd:
        kd.apply([obj])
        provider = WatchStateProvider(Kube.from_configuration(kd.configuration), settings)
        assert provider.read_object(res, "vision", "serve")["spec"]["replicas"] == 2
        assert provider.read_object(res, "vision", "missing") is None
    with pytest.raises(ObjectUnreadable):  # the API server is gone: unreachable, one line
        provider.read_object(res, "vision", "serve")


def test_a_heartbeat_or_a_queue_counter_leaves_the_state_as_it_is_and_a_real_change_does_not(example_objects):
    """kwok's heartbeat stage (``node-heartbeat-with-lease``) rewrites each Node's conditions'
    ``lastHeartbeatTime``; Kueue rewrites a queue's pending and admitted counts for every workload
    it sees. Neither changes a decision, so the trimmed object the store compares is the same
    (no rebuild); an allocatable change or a ClusterQueue's usage is a change."""
    from taugate.state_objects import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, trim

    node = pick(example_objects, "Node", "aks-h100-0")
    node["metadata"]["resourceVersion"] = "100"
    beat = copy.deepcopy(node)
    beat["metadata"]["resourceVersion"] = "101"
    for c in beat["status"]["conditions"]:
        c["lastHeartbeatTime"] = "2026-12-06T04:00:00Z"
    assert trim(NODES, beat) == trim(NODES, node)
    bigger = copy.deepcopy(node)
    bigger["status"]["allocatable"]["nvidia.com/gpu"] = "16"
    assert trim(NODES, bigger) != trim(NODES, node)

    lq = pick(example_objects, "LocalQueue", "vision-queue")
    counted = copy.deepcopy(lq)
    counted["metadata"]["resourceVersion"] = "7"
    counted["status"] = {"pendingWorkloads": 41, "reservingWorkloads": 0, "admittedWorkloads": 0,
                         "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "",
                                         "lastTransitionTime": "2026-12-06T04:00:00Z"}]}
    assert trim(LOCAL_QUEUES, counted) == trim(LOCAL_QUEUES, lq)

    cq = pick(example_objects, "ClusterQueue", "vision-cq")
    pending = copy.deepcopy(cq)
    pending["metadata"]["resourceVersion"] = "8"
    pending["status"]["pendingWorkloads"] = 41
    assert trim(CLUSTER_QUEUES, pending) == trim(CLUSTER_QUEUES, cq)
    used = copy.deepcopy(cq)
    used["status"]["flavorsUsage"][0]["resources"][0]["total"] = "16"
    assert trim(CLUSTER_QUEUES, used) != trim(CLUSTER_QUEUES, cq)
