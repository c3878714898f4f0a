"""KubeRay's kubectl plugin (v1.5.0) used by a researcher in a workspace, against the real API
server: the exact objects `kubectl ray job submit` and `kubectl ray create cluster` apply
(recorded fixtures, ``tests/data/kuberay-kubectl-plugin``, each naming the plugin's source lines),
sent as the plugin sends them (a server-side apply with its field manager, ``ray-kubectl-plugin``)
through the built kubectl with the researcher's credentials. They work unmodified: queued, placed,
one run-id, and where Kueue needs a field the plugin does not set (``shutdownAfterJobFinishes`` of
a queued RayJob) taugate sets it and kubectl prints the warning saying so."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.workloads import WORKSPACE, admitted_problems, pod_templates
from tests.paths import REPO

PLUGIN = REPO / "tests" / "data" / "kuberay-kubectl-plugin"
PROFILE = "tau.azure.com/workload-profile"
FIELD_MANAGER = "ray-kubectl-plugin"  # kubectl-plugin/pkg/util/constant.go FieldManager
SHUTDOWN_WARNING = ("Warning: taugate set spec.shutdownAfterJobFinishes: true (it was false): "
                    "Kueue refuses a queued RayJob")


@pytest.fixture(scope="module")
def researcher(platform):
    return platform.cp.user_kubeconfig("ray-plugin-user", ("vision-researchers",))


def _apply_as_the_plugin(platform, researcher, name: str):
    """The plugin's ``RayJobs(ns).Apply`` / ``RayClusters(ns).Apply`` (field manager
    ``ray-kubectl-plugin``, no force) as the built kubectl sends it: ``apply --server-side``."""
    obj = yaml.safe_load((PLUGIN / name).read_text())
    out = platform.cp.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", str(PLUGIN / name),
                              kubeconfig=researcher)
    kind = obj["kind"].lower()
    return obj, out, platform.cp.get_json(kind, obj["metadata"]["name"], "-n", WORKSPACE, "--show-managed-fields",
                                          kubeconfig=researcher)


@pytest.mark.parametrize("name, profile", [("rayjob-submit.yaml", "cpu-small"),
                                           ("rayjob-submit-worker-gpu.yaml", "h100-1gpu")])
def test_the_rayjob_of_kubectl_ray_job_submit_is_admitted_queued_and_kubectl_prints_why_shutdown_is_set(
        platform, researcher, name, profile):
    sent, out, stored = _apply_as_the_plugin(platform, researcher, name)
    print(f"kubectl apply --server-side --field-manager={FIELD_MANAGER} -f {name}:\n{out.stdout}{out.stderr}")
    assert f"rayjob.ray.io/{sent['metadata']['name']} serverside-applied" in out.stdout
    assert SHUTDOWN_WARNING in out.stderr, out.stderr
    assert "a kueue managed job should delete the cluster after finishing" in out.stderr
    assert admitted_problems(stored) == []  # queue, suspend, one run-id, GPU class on GPU templates only
    assert stored["metadata"]["labels"][PROFILE] == profile
    spec = stored["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["suspend"] is True
    assert spec["submissionMode"] == "InteractiveMode" and spec["jobId"] == sent["spec"]["jobId"]
    assert spec["entrypoint"] == sent["spec"]["entrypoint"] and "submitterPodTemplate" not in spec
    # What the plugin asked for is kept: images, resources, replicas.
    for (_, have), (_, asked) in zip(pod_templates(stored), pod_templates(sent), strict=True):
        for c_have, c_asked in zip(have["spec"]["containers"], asked["spec"]["containers"], strict=True):
            assert c_have["image"] == c_asked["image"] and c_have["resources"] == c_asked["resources"]
    workers = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    assert workers["replicas"] == sent["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"]
    managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
    assert FIELD_MANAGER in managers


@pytest.mark.parametrize("name, profile", [("raycluster-create.yaml", "cpu-small"),
                                           ("raycluster-create-worker-gpu.yaml", "h100-1gpu")])
def test_the_raycluster_of_kubectl_ray_create_cluster_is_admitted_queued_and_placed_without_a_warning(
        platform, researcher, name, profile):
    sent, out, stored = _apply_as_the_plugin(platform, researcher, name)
    print(f"kubectl apply --server-side --field-manager={FIELD_MANAGER} -f {name}:\n{out.stdout}{out.stderr}")
    assert f"raycluster.ray.io/{sent['metadata']['name']} serverside-applied" in out.stdout
    assert "Warning" not in out.stderr, out.stderr
    assert admitted_problems(stored) == []
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"][PROFILE] == profile


def test_the_plugins_rayjob_applied_again_keeps_shutdown_true_and_kubectl_prints_that_it_was_kept(platform, researcher):
    """The same apply again (the plugin's ``job submit`` under a name it used before, or the file
    applied twice) sends false again: an UPDATE Kueue's ``ValidateUpdate`` would refuse; taugate
    keeps true, says so, and the run-id stays."""
    name = "rayjob-submit.yaml"
    _, _, stored = _apply_as_the_plugin(platform, researcher, name)
    _, again, updated = _apply_as_the_plugin(platform, researcher, name)
    print(f"kubectl apply --server-side --field-manager={FIELD_MANAGER} -f {name} (again):\n"
          f"{again.stdout}{again.stderr}")
    assert again.returncode == 0
    assert "Warning: taugate kept spec.shutdownAfterJobFinishes: true (this update set false)" in again.stderr
    assert updated["spec"]["shutdownAfterJobFinishes"] is True and admitted_problems(updated) == []
    assert updated["metadata"]["labels"]["tau.azure.com/run-id"] == stored["metadata"]["labels"]["tau.azure.com/run-id"]
