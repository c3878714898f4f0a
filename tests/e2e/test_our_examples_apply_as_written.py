"""The project's own examples under ``kubectl apply -f``, as written and as a researcher of the
``vision`` workspace runs them (README: the headline example): the image-classifier RayJob is
created, queued and placed, applying it again changes nothing, the nine-GPU RayJob is refused with
the problems the README quotes, and ``kubectl delete -f`` removes what apply made. (The DRA example
is applied as written on the whole stack, where DRA GPUs are queued:
``test_gpus_through_dra_are_queued_placed_or_refused.py``.)"""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.workloads import WORKSPACE, admitted_problems
from tests.paths import REPO

EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def researcher(platform):
    return platform.cp.user_kubeconfig("carol", ("vision-researchers",))


def _readme_problems() -> list[str]:
    """The problem lines of the README's quoted `taugate admit` denial of the nine-GPU example."""
    block = (REPO / "README.md").read_text().split("$ taugate admit -f examples/rayjob-nine-gpus.yaml", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines() if line.startswith("- [")]


def test_the_image_classifier_example_applies_as_written_and_comes_out_queued_and_placed(platform, researcher):
    cp = platform.cp
    path = EXAMPLES / "rayjob-image-classifier.yaml"
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    try:
        out = cp.kubectl("apply", "-f", str(path), kubeconfig=researcher)
        assert out.stdout.strip() == f"rayjob.ray.io/{name} created"
        stored = cp.get_json("rayjob", name, "-n", WORKSPACE, kubeconfig=researcher)
        assert admitted_problems(stored) == []
        # Applied again: kubectl's three-way JSON merge patch (a CRD has no strategic merge) replaces
        # the worker and head group lists with the file's, which have none of taugate's placement;
        # taugate puts it back on the UPDATE and says so. The stored run is the same run.
        again = cp.kubectl("apply", "-f", str(path), kubeconfig=researcher)
        assert again.stdout.strip() in (f"rayjob.ray.io/{name} configured", f"rayjob.ray.io/{name} unchanged")
        print("second apply:", again.stdout.strip(), again.stderr.strip(), sep="\n")
        after = cp.get_json("rayjob", name, "-n", WORKSPACE)
        assert admitted_problems(after) == []
        assert after["metadata"]["labels"] == stored["metadata"]["labels"]
        assert after["spec"]["rayClusterSpec"] == stored["spec"]["rayClusterSpec"]
    finally:
        deleted = cp.kubectl("delete", "-f", str(path), "--ignore-not-found", kubeconfig=researcher)
    assert deleted.stdout.strip() == f'rayjob.ray.io "{name}" deleted from {WORKSPACE} namespace'


def test_the_nine_gpu_example_is_refused_at_apply_with_the_problems_the_readme_quotes(platform, researcher):
    cp = platform.cp
    refused = cp.kubectl("apply", "-f", str(EXAMPLES / "rayjob-nine-gpus.yaml"), kubeconfig=researcher, check=False)
    assert refused.returncode == 1
    assert "admission webhook" in refused.stderr and "denied the request" in refused.stderr
    quoted = _readme_problems()
    assert len(quoted) == 2
    for line in quoted:
        assert line[2:] in refused.stderr
    assert cp.kubectl("get", "rayjob", "resnet-nine-gpus", "-n", WORKSPACE, check=False).returncode != 0
