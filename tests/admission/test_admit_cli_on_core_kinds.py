"""`taugate admit` on real manifests of the core kinds: the Kubernetes documentation's GPU Pod,
Kueue's serving Deployment sample given GPUs, a StatefulSet; a bare GPU ReplicaSet refused, or
warned under ``TAUGATE_UNMANAGED_GPU_WORKLOADS=warn``; a CPU-only Pod unchanged."""

from __future__ import annotations

import yaml

from taugate import labels
from tests.admission.conftest import EXAMPLE_CLUSTER
from tests.admission.test_admit_cli import run
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import CORE, gpu_deployment, gpu_statefulset
from tests.admission.test_pods_of_governed_workloads_and_unmanaged_kinds import replicaset


def _file(tmp_path, *objs: dict):
    for obj in objs:
        spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
        spec["containers"][0]["resources"].setdefault("requests", {}).update(cpu="4", memory="16Gi")
    f = tmp_path / "objects.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    return f


def test_the_kubernetes_docs_gpu_pod_is_refused_for_its_missing_requests_naming_the_pod(capsys):
    code, out, err = run(capsys, "admit", "-f", str(CORE / "gpu-pod.yaml"), "--cluster", str(EXAMPLE_CLUSTER),
                         "-n", "vision")
    assert code == 1 and out == ""
    assert "[requests-required] spec.containers[0].resources.requests.cpu: container example-vector-add of the Pod" \
        in err


def test_the_kubernetes_docs_gpu_pod_with_requests_is_admitted_queued_and_placed(tmp_path, capsys):
    f = _file(tmp_path, yaml.safe_load((CORE / "gpu-pod.yaml").read_text()))
    code, out, err = run(capsys, "admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision")
    assert code == 0, err
    pod = yaml.safe_load(out)
    assert pod["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert pod["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"
    assert "suspend" not in pod["spec"]


def test_a_gpu_deployment_and_statefulset_are_admitted_with_their_templates_placed(tmp_path, capsys):
    f = _file(tmp_path, gpu_deployment(2, 1), gpu_statefulset(2, 1))
    code, out, err = run(capsys, "admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision")
    assert code == 0, err
    dep, sts = yaml.safe_load_all(out)
    for obj in (dep, sts):
        template = obj["spec"]["template"]
        assert obj["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
        assert template["metadata"]["labels"][labels.RUN_ID] == obj["metadata"]["labels"][labels.RUN_ID]
        assert template["spec"]["nodeSelector"]["tau.azure.com/gpu-class"] == "h100"


def test_a_cpu_only_pod_is_printed_unchanged(capsys):
    code, out, err = run(capsys, "admit", "-f", str(CORE / "kueue-pod.yaml"), "--cluster", str(EXAMPLE_CLUSTER),
                         "-n", "vision")
    assert code == 0, err
    expected = yaml.safe_load((CORE / "kueue-pod.yaml").read_text())
    expected["metadata"]["namespace"] = "vision"  # as -n gives it, and nothing else
    assert yaml.safe_load(out) == expected


def test_a_bare_gpu_replicaset_is_refused_naming_the_managed_kinds(tmp_path, capsys):
    code, out, err = run(capsys, "admit", "-f", str(_file(tmp_path, replicaset())), "--cluster",
                         str(EXAMPLE_CLUSTER), "-n", "vision")
    assert code == 1 and out == ""
    assert "[unmanaged-kind] spec.template: a ReplicaSet asks for GPUs" in err and "Deployment (apps/v1)" in err


def test_a_bare_gpu_replicaset_is_admitted_with_a_warning_when_the_platform_says_warn(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TAUGATE_UNMANAGED_GPU_WORKLOADS", "warn")
    code, out, err = run(capsys, "admit", "-f", str(_file(tmp_path, replicaset())), "--cluster",
                         str(EXAMPLE_CLUSTER), "-n", "vision")
    assert code == 0, err
    assert yaml.safe_load(out)["kind"] == "ReplicaSet"
    assert "[unmanaged-kind] spec.template: a ReplicaSet asks for GPUs" in err
