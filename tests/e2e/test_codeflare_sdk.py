"""The CodeFlare SDK (``codeflare-sdk`` 0.40.1: how Kubeflow and OpenShift AI users create
RayClusters and RayJobs from Python) driven as its users drive it, ``ClusterConfiguration`` +
``Cluster(...).apply()`` and ``RayJob(cluster_config=...).submit()``, with a researcher's
kubeconfig in a workspace, against the real API server. The SDK lives in a venv of its own
(``tests/e2e/codeflare_sdk.sh``, cached by version; it pins ``ray[data,default]``), so it runs in a
subprocess (``tests/e2e/codeflare_driver.py``). What it creates is governed and works unmodified;
what the profile forbids is refused, and the SDK shows the user taugate's message."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.workloads import WORKSPACE, admitted_problems

HERE = Path(__file__).resolve().parent
PROFILE = "tau.azure.com/workload-profile"
SDK_FIELD_MANAGER = "codeflare-sdk"  # codeflare_sdk/ray/cluster/cluster.py CF_SDK_FIELD_MANAGER


@pytest.fixture(scope="module")
def sdk_python() -> str:
    """The SDK venv's Python, installed by ``tests/e2e/codeflare_sdk.sh`` (instant when cached);
    an install that fails fails the tests, with its output."""
    proc = subprocess.run(["bash", str(HERE / "codeflare_sdk.sh")], capture_output=True, text=True, timeout=1800)
    found = re.search(r"^codeflare-sdk: (\S+)$", proc.stdout, re.MULTILINE)
    assert proc.returncode == 0 and found, f"tests/e2e/codeflare_sdk.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return found.group(1)


@pytest.fixture(scope="module")
def notebook(platform, sdk_python, tmp_path_factory):
    """Runs ``codeflare_driver.py ARGS`` as a researcher of the ``vision`` workspace would from a
    notebook: ``KUBECONFIG`` their credentials, ``HOME`` their own (the SDK writes there)."""
    kubeconfig = platform.cp.user_kubeconfig("notebook-user", ("vision-researchers",))
    home = tmp_path_factory.mktemp("notebook-home")

    def run(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PYTHON", "VIRTUAL_ENV"))}
        env.update(KUBECONFIG=str(kubeconfig), HOME=str(home), NO_PROXY="127.0.0.1,localhost",
                   no_proxy="127.0.0.1,localhost")
        # -I: not the script's folder on sys.path (tests/e2e/platform.py would shadow the stdlib's platform)
        proc = subprocess.run([sdk_python, "-I", str(HERE / "codeflare_driver.py"), *args, "--namespace", WORKSPACE],
                              capture_output=True, text=True, timeout=300, env=env)
        print(f"codeflare_driver.py {' '.join(args)} (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc
    return run


def test_a_cluster_applied_with_the_sdk_is_queued_placed_and_labelled_in_the_workspace(platform, notebook):
    proc = notebook("cluster", "cf-gpu-cluster", "--gpus", "1", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Ray Cluster: 'cf-gpu-cluster' has successfully been applied" in proc.stdout
    stored = platform.cp.get_json("raycluster", "cf-gpu-cluster", "-n", WORKSPACE, "--show-managed-fields")
    assert admitted_problems(stored) == []  # queue, suspend, one run-id, GPU class on GPU templates only
    assert stored["metadata"]["labels"][PROFILE] == "h100-1gpu"
    assert SDK_FIELD_MANAGER in {m["manager"] for m in stored["metadata"]["managedFields"]}
    worker = stored["spec"]["workerGroupSpecs"][0]
    assert worker["replicas"] == 2
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert str(limits["nvidia.com/gpu"]) == "1"


def test_a_rayjob_submitted_with_the_sdk_and_its_own_cluster_is_queued_without_a_change_to_warn_about(
        platform, notebook):
    proc = notebook("rayjob", "cf-job", "--gpus", "1", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "submitted: cf-job" in proc.stdout
    stored = platform.cp.get_json("rayjob", "cf-job", "-n", WORKSPACE)
    assert admitted_problems(stored) == []
    assert stored["spec"]["shutdownAfterJobFinishes"] is True  # the SDK sets it for a cluster of its own
    assert stored["metadata"]["labels"][PROFILE] == "h100-1gpu"


def test_a_rayjob_submitted_with_the_sdk_to_an_existing_cluster_gets_a_run_id_and_is_not_queued_again(
        platform, notebook):
    """``RayJob(cluster_name=...)``: the SDK writes a ``clusterSelector`` and
    ``shutdownAfterJobFinishes: false``; Kueue does not manage such a RayJob (the RayCluster it runs
    on was queued itself: ``rayjob_webhook.go``), so taugate leaves both as they are."""
    proc = notebook("rayjob", "cf-on-existing", "--cluster", "cf-gpu-cluster")
    assert proc.returncode == 0, proc.stderr
    stored = platform.cp.get_json("rayjob", "cf-on-existing", "-n", WORKSPACE)
    assert stored["spec"]["clusterSelector"] == {"ray.io/cluster": "cf-gpu-cluster"}
    assert stored["spec"]["shutdownAfterJobFinishes"] is False and "suspend" not in stored["spec"]
    assert admitted_problems(stored) == []  # a run-id on the object, no queue label expected


def test_a_cluster_asking_for_more_gpus_than_any_profile_allows_is_refused_and_the_sdk_shows_why(
        platform, notebook):
    proc = notebook("cluster", "cf-nine-gpus", "--gpus", "9")
    out = proc.stdout + proc.stderr
    assert 'workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]' in out
    assert "asks for 9 GPUs per pod" in out and "allowed: at most 8 GPUs per pod" in out and "fix:" in out
    assert platform.cp.kubectl("get", "raycluster", "cf-nine-gpus", "-n", WORKSPACE, check=False).returncode != 0
