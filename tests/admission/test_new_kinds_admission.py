"""Every workload kind issue 17 adds gets what RayJob and Job get, on its own upstream samples: the
workspace's Kueue queue label, ``suspend`` where Kueue suspends that kind, one run-id on the object
and on every pod template, the profile's placement on GPU pod templates only, an admitted object
still valid under the kind's real CRD schema, reinvocation without a patch, and ``taugate admit``
printing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from taugate import labels
from taugate.cli import main
from taugate.kinds import kind_of
from taugate.webhook.review import admit, mutate, request_for
from tests import workload_samples as ws
from tests.crdschema import crd_errors
from tests.paths import (
    EXAMPLE_CLUSTER,
    JOBSET_CRD,
    LWS_CRD,
    LWS_VLLM_GPU,
    PYTORCH_MNIST_NCCL,
    PYTORCHJOB_CRD,
    RAYSERVICE_CRD,
    STABLE_DIFFUSION,
    TRAINJOB_CRD,
    TRAINJOB_TORCH_DDP,
)


@dataclass(frozen=True)
class Case:
    """One kind's runnable upstream sample and the CRD (file, version) it must satisfy."""

    sample: Callable[[], dict[str, Any]]
    crd: Path
    version: str


CASES = {
    "JobSet": Case(lambda: ws.runnable(ws.load(ws.JOBSET_FINE_TUNE), gpus=4, profile="h100-4gpu"), JOBSET_CRD,
                   "v1alpha2"),
    "LeaderWorkerSet": Case(lambda: ws.one_group(ws.load(LWS_VLLM_GPU)), LWS_CRD, "v1"),
    "PyTorchJob": Case(lambda: ws.runnable(ws.load(PYTORCH_MNIST_NCCL)), PYTORCHJOB_CRD, "v1"),
    "RayService": Case(lambda: ws.load(STABLE_DIFFUSION), RAYSERVICE_CRD, "v1"),
    "TrainJob": Case(lambda: ws.sized(ws.runnable(ws.load(TRAINJOB_TORCH_DDP), gpus=1), ("spec", "trainer", "numNodes"),
                                      2), TRAINJOB_CRD, "v1alpha1"),
}
"""By kind: JobSet KEP 672's fine-tune JobSet (4 GPUs per trainer pod, profile h100-4gpu); LWS's
vLLM LeaderWorkerSet with one group (a leader and a worker of 8 GPUs: the h100-8gpu profile's 2);
training-operator's NCCL MNIST PyTorchJob (a Master and a Worker of 1 GPU) with requests;
KubeRay's stable-diffusion RayService (a CPU head, one 1-GPU worker) as written; the trainer
proposal's torch-ddp TrainJob on 2 nodes (of its 5: the default profile's 4 workers) at 1 GPU a
node, with requests."""


@pytest.fixture(params=sorted(CASES))
def case(request) -> tuple[Case, dict[str, Any]]:
    c = CASES[request.param]
    obj = c.sample()
    assert crd_errors(obj, c.crd, c.version) == [], "the sample itself must be valid"
    return c, obj


def test_a_runnable_sample_is_admitted_queued_and_still_valid_under_its_crd(case, state, settings, engine):
    c, obj = case
    decision = admit(obj, state=state, settings=settings, engine=engine, namespace="vision")
    assert decision.allowed, decision.message
    admitted = decision.object
    assert crd_errors(admitted, c.crd, c.version) == []
    assert jsonpatch.apply_patch(obj, decision.patch) == admitted
    kind = kind_of(admitted)
    assert admitted["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    if kind.suspend_path is not None:
        assert ws.at(admitted, kind.suspend_path) is True
    again = mutate(request_for(admitted, namespace="vision"), state, settings, engine)
    assert again.allowed and again.patch is None


def test_one_run_id_is_on_the_object_and_on_every_pod_template(case, state, settings, engine):
    _, obj = case
    admitted = admit(obj, state=state, settings=settings, engine=engine, namespace="vision").object
    run_id = admitted["metadata"]["labels"][labels.RUN_ID]
    assert len(run_id) == 24
    assert [t[labels.RUN_ID] for t in ws.template_labels(admitted)] == [run_id] * len(ws.template_labels(admitted))


def test_the_profiles_placement_goes_on_gpu_pod_templates_only(case, state, settings, engine):
    _, obj = case
    admitted = admit(obj, state=state, settings=settings, engine=engine, namespace="vision").object
    templates = kind_of(admitted).pod_templates(admitted)
    gpu = [t for t in templates if t.gpus_per_pod > 0]
    assert gpu, "the sample has a GPU pod template"
    for t in templates:
        selector = t.spec.get("nodeSelector") or {}
        if t.gpus_per_pod > 0:
            assert selector.get(settings.gpu_class_label) == "h100", t.group
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in t.spec["tolerations"]
        else:
            assert settings.gpu_class_label not in selector and not t.spec.get("tolerations"), t.group


def test_taugate_admit_prints_the_admitted_object(case, tmp_path, capsys):
    _, obj = case
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump(obj))
    code = main(["admit", "-f", str(path), "--cluster", str(EXAMPLE_CLUSTER)])
    out = capsys.readouterr()
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert printed["kind"] == obj["kind"]
    assert printed["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert all(t[labels.RUN_ID] == printed["metadata"]["labels"][labels.RUN_ID] for t in ws.template_labels(printed))


def test_taugate_admit_on_the_lws_vllm_file_denies_the_leaderworkerset_naming_its_field_and_passes_the_service(
        capsys):
    # The upstream file as shipped: the LeaderWorkerSet (2 groups x 2 pods x 8 GPUs) and its Service.
    code = main(["admit", "-f", str(LWS_VLLM_GPU), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision"])
    out = capsys.readouterr()
    assert code == 1
    assert "LeaderWorkerSet" in out.err and "spec.replicas: asks for 4 workers (leader: 2, worker: 2)" in out.err
    assert "Service" in out.err and "unchanged" in out.err
