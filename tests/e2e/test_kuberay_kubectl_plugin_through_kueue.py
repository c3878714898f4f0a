"""KubeRay's kubectl plugin (v1.5.0) on the whole stack (``tests/e2e/stack``): what `kubectl ray
job submit` and `kubectl ray create cluster` apply (the recorded fixtures of
``tests/data/kuberay-kubectl-plugin``), applied by a researcher as the plugin applies them, pass
Kueue's own webhooks after taugate's, Kueue admits them and KubeRay makes the cluster. The
plugin's RayJob says ``shutdownAfterJobFinishes: false``, which Kueue's ``rayjob_webhook.go``
refuses for a queued RayJob: it gets through only because taugate set it (and said so)."""

from __future__ import annotations

import pytest

from tests.e2e.workloads import RUN_ID, WORKSPACE
from tests.paths import REPO

PLUGIN = REPO / "tests" / "data" / "kuberay-kubectl-plugin"


def _cond(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _admitted_workload(cp, kind: str, name: str) -> dict | None:
    for w in cp.get_json("workloads.kueue.x-k8s.io", "-n", WORKSPACE)["items"]:
        owners = w["metadata"].get("ownerReferences") or []
        admitted = _cond(w, "Admitted").get("status") == "True"
        if admitted and any(r["kind"] == kind and r["name"] == name for r in owners):
            return w
    return None


@pytest.fixture(scope="module")
def researcher(whole_stack):
    return whole_stack.cp.user_kubeconfig("ray-plugin-user", ("vision-researchers",))


def test_the_plugins_gpu_rayjob_passes_kueues_webhook_is_admitted_and_kuberay_makes_its_cluster(
        whole_stack, researcher):
    cp = whole_stack.cp
    out = cp.kubectl("apply", "--server-side", "--field-manager=ray-kubectl-plugin",
                     "-f", str(PLUGIN / "rayjob-submit-worker-gpu.yaml"), kubeconfig=researcher)
    print(out.stdout + out.stderr)
    assert "rayjob.ray.io/plugin-gpu-job serverside-applied" in out.stdout
    assert "Warning: taugate set spec.shutdownAfterJobFinishes: true (it was false)" in out.stderr
    job = cp.get_json("rayjob", "plugin-gpu-job", "-n", WORKSPACE)
    wl = whole_stack.wait_for("Kueue to admit the plugin's RayJob",
                              lambda: _admitted_workload(cp, "RayJob", "plugin-gpu-job"), 180)
    flavors = {a["name"]: a.get("flavors") for a in wl["status"]["admission"]["podSetAssignments"]}
    assert flavors["default-group"]["nvidia.com/gpu"] == "h100", flavors
    whole_stack.wait_for("Kueue to unsuspend the plugin's RayJob", lambda: not cp.get_json(
        "rayjob", "plugin-gpu-job", "-n", WORKSPACE)["spec"].get("suspend"), 60)
    cluster = whole_stack.wait_for("KubeRay to make the RayJob's RayCluster", lambda: next(
        (c for c in cp.get_json("rayclusters", "-n", WORKSPACE)["items"]
         if any(r["kind"] == "RayJob" and r["name"] == "plugin-gpu-job"
                for r in c["metadata"].get("ownerReferences") or [])), None), 120)
    assert cluster["metadata"]["labels"][RUN_ID] == job["metadata"]["labels"][RUN_ID]


def test_the_plugins_gpu_raycluster_is_admitted_by_kueue(whole_stack, researcher):
    cp = whole_stack.cp
    out = cp.kubectl("apply", "--server-side", "--field-manager=ray-kubectl-plugin",
                     "-f", str(PLUGIN / "raycluster-create-worker-gpu.yaml"), kubeconfig=researcher)
    print(out.stdout + out.stderr)
    assert "raycluster.ray.io/plugin-gpu-cluster serverside-applied" in out.stdout and "Warning" not in out.stderr
    whole_stack.wait_for("Kueue to admit the plugin's RayCluster",
                         lambda: _admitted_workload(cp, "RayCluster", "plugin-gpu-cluster"), 180)
    whole_stack.wait_for("Kueue to unsuspend the plugin's RayCluster", lambda: not cp.get_json(
        "raycluster", "plugin-gpu-cluster", "-n", WORKSPACE)["spec"].get("suspend"), 60)
