"""``taugate admit --cluster live`` as a researcher runs it: a server-side dry run through the real
API server with the researcher's own kubeconfig (no snapshot, which researchers may not export),
so every webhook, RBAC and the CRD schemas judge it; nothing is stored."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.e2e.workloads import WORKSPACE, admitted_problems
from tests.paths import REPO

EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def researcher(platform):
    return platform.cp.user_kubeconfig("dana", ("vision-researchers",))


def _admit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taugate.cli", "admit", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_a_researcher_admits_the_example_live_and_gets_the_object_the_api_server_would_store(platform, researcher):
    out = _admit("-f", str(EXAMPLES / "rayjob-image-classifier.yaml"), "--cluster", "live",
                 "--kubeconfig", str(researcher), "-o", "json")
    assert out.returncode == 0, out.stderr
    admitted = json.loads(out.stdout)
    assert admitted["metadata"]["uid"] and admitted_problems(admitted) == []
    assert "managedFields" not in admitted["metadata"]  # hidden, as kubectl get -o json hides them
    name = yaml.safe_load((EXAMPLES / "rayjob-image-classifier.yaml").read_text())["metadata"]["name"]
    assert platform.cp.kubectl("get", "rayjob", name, "-n", WORKSPACE, check=False).returncode != 0  # a dry run


def test_a_live_denial_prints_the_webhooks_problems_and_exits_1(researcher):
    out = _admit("-f", str(EXAMPLES / "rayjob-nine-gpus.yaml"), "--cluster", "live", "--kubeconfig", str(researcher))
    assert out.returncode == 1 and out.stdout == ""
    assert "RayJob resnet-nine-gpus denied:" in out.stderr
    assert "[gpu-per-pod-fits-node]" in out.stderr and "[gpu-per-pod-within-profile]" in out.stderr
    assert "Warning: no workload profile in workspace 'vision' matches 9 GPU(s) per pod" in out.stderr


def test_a_live_admit_the_user_may_not_make_says_what_rbac_refused(platform, researcher):
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "elsewhere", "namespace": "kube-public"},
           "spec": {"template": {"spec": pod}}}
    out = subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "-f", "-", "--cluster", "live",
                          "--kubeconfig", str(researcher)], input=json.dumps(job), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert 'Job elsewhere denied: ' in out.stderr and 'User "dana" cannot' in out.stderr


def test_a_live_admit_without_a_usable_kubeconfig_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "nope.kubeconfig"
    out = _admit("-f", str(EXAMPLES / "rayjob-image-classifier.yaml"), "--cluster", "live", "--kubeconfig",
                 str(missing))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert str(missing) in out.stderr
