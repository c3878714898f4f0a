"""``kubectl scale`` on the real API server (the ``scale`` subresource, which an HPA uses too) is
judged exactly as the UPDATE of the replicas through the object (issue 27): the chart's
validating webhook names each kind's ``scale`` subresource, and the webhook, running under the
chart's RBAC, reads the stored parent to judge it. Built-in kinds (Deployment, StatefulSet) and
CRDs with a scale subresource (LeaderWorkerSet's ``spec.replicas``, a PyTorchJob's
``spec.pytorchReplicaSpecs.Worker.replicas``) alike. The example's ``h100-1gpu`` profile allows at
most 4 workers of 1 GPU."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_every_gpu_kind_is_governed import RESEARCHER_GROUP, SAMPLES
from tests.e2e.workloads import WORKSPACE

CASES = {
    # kind: (kubectl resource, replicas path, a scale that fits the profile, one that does not)
    "Deployment": ("deployment.apps", ("spec", "replicas"), 4, 5),
    "StatefulSet": ("statefulset.apps", ("spec", "replicas"), 3, 64),
    "LeaderWorkerSet": ("leaderworkerset.leaderworkerset.x-k8s.io", ("spec", "replicas"), 0, 2),
    "PyTorchJob": ("pytorchjob.kubeflow.org", ("spec", "pytorchReplicaSpecs", "Worker", "replicas"), 3, 4),
}


def _at(obj: dict, path: tuple[str, ...]) -> object:
    for key in path:
        obj = obj[key]
    return obj


def _replicas_patch(path: tuple[str, ...], replicas: int) -> str:
    patch: dict = {path[-1]: replicas}
    for key in reversed(path[:-1]):
        patch = {key: patch}
    return json.dumps(patch)


def _violations(stderr: str) -> list[str]:
    """The violation lines of a denial as kubectl prints it, without the request's own words."""
    return sorted(line.strip() for line in stderr.splitlines() if line.strip().startswith("- ["))


@pytest.mark.parametrize("kind", sorted(CASES))
def test_kubectl_scale_by_a_researcher_is_judged_exactly_as_a_patch_of_the_replicas(platform, kind):
    cp = platform.cp
    resource, path, fits, too_many = CASES[kind]
    obj = SAMPLES[kind]()
    name = f"scale-{kind.lower()}"
    obj["metadata"]["name"] = name
    researcher = cp.user_kubeconfig("alice", (RESEARCHER_GROUP,))
    cp.kubectl("create", "-f", "-", input=json.dumps(obj), kubeconfig=researcher)
    before = _at(cp.get_json(resource, name, "-n", WORKSPACE), path)

    refused = cp.kubectl("scale", f"{resource}/{name}", f"--replicas={too_many}", "-n", WORKSPACE,
                         kubeconfig=researcher, check=False)
    assert refused.returncode != 0
    assert "denied the request" in refused.stderr and "[workers-match-profile]" in refused.stderr, refused.stderr
    assert _at(cp.get_json(resource, name, "-n", WORKSPACE), path) == before
    patched = cp.kubectl("patch", resource, name, "-n", WORKSPACE, "--type=merge", "-p",
                         _replicas_patch(path, too_many), kubeconfig=researcher, check=False)
    assert patched.returncode != 0
    assert _violations(refused.stderr) == _violations(patched.stderr) != []

    cp.kubectl("scale", f"{resource}/{name}", f"--replicas={fits}", "-n", WORKSPACE, kubeconfig=researcher)
    assert _at(cp.get_json(resource, name, "-n", WORKSPACE), path) == fits


def test_kubectl_scale_outside_a_workspace_is_not_sent_to_taugate(platform):
    cp = platform.cp
    cp.kubectl("create", "namespace", "scale-outside")
    obj = SAMPLES["Deployment"]()
    obj["metadata"].update(name="outside", namespace="scale-outside")
    cp.kubectl("create", "-f", "-", input=json.dumps(obj))
    cp.kubectl("scale", "deployment.apps/outside", "--replicas=64", "-n", "scale-outside")
    assert cp.get_json("deployment.apps", "outside", "-n", "scale-outside")["spec"]["replicas"] == 64
