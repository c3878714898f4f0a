"""Real-shaped manifests for the upstream-rule tests (issue 12), built from the KubeRay and Kueue
samples (KubeRay's ``config/samples`` and Kueue's example Jobs from their pinned Go modules, and
the Kueue-shaped Jobs in ``tests/data/kueue``) and changed only where a rule needs it, plus the stored
objects and the UPDATEs that controllers send (the garbage collector, Kueue, KubeRay), as they
send them: the whole object, with what the controller changed."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from taugate import labels
from taugate.snapshot import read_objects
from tests.paths import DATA, EXAMPLE_CLUSTER, IMAGE_CLASSIFIER, KUBERAY_SAMPLES, KUEUE_JOB

GPU = labels.GPU_RESOURCE
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GC = "system:serviceaccount:kube-system:generic-garbage-collector"
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"
RUN_ID = "0123456789abcdef01234567"


def _resources(cpu: str, memory: str, **extra: str) -> dict:
    r = {"cpu": cpu, "memory": memory, **extra}
    return {"requests": dict(r), "limits": dict(r)}


def in_workspace(obj: dict, namespace: str = "vision") -> dict:
    """The sample in a workspace namespace, without the sample's own ``user-queue`` label
    (taugate gives every workload its workspace's LocalQueue)."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta["namespace"] = namespace
    (meta.get("labels") or {}).pop(labels.KUEUE_QUEUE_NAME, None)
    return obj


def classifier() -> dict:
    """KubeRay's GPU image-classifier RayJob (4 workers x 1 GPU) in workspace ``vision``."""
    return in_workspace(yaml.safe_load(IMAGE_CLASSIFIER.read_text()))


def worker_group(obj: dict, i: int = 0) -> dict:
    return obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][i]


def set_worker_gpus(obj: dict, gpus: int) -> dict:
    """Every worker container of a RayJob asks for ``gpus`` GPUs (request == limit)."""
    for g in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        res = g["template"]["spec"]["containers"][0]["resources"]
        res["requests"][GPU] = res["limits"][GPU] = str(gpus)
    return obj


def kueue_job() -> dict:
    """Kueue's example Job (``cmd/kueueviz/examples/03-agi-job.yaml``: 3 CPU pods, a queue and a
    priority-class label) in ``vision``, without the labels naming Kueue objects this cluster lacks."""
    job = in_workspace(yaml.safe_load(KUEUE_JOB.read_text()))
    job["metadata"]["labels"].pop("kueue.x-k8s.io/priority-class", None)
    return job


def kueue_ray_job() -> dict:
    """KubeRay's Kueue sample RayJob (``ray-job.kueue-toy-sample.yaml``: CPU head, one worker
    group of 1..5) in ``vision``, with the memory requests a workspace requires."""
    obj = in_workspace(yaml.safe_load((KUBERAY_SAMPLES / "ray-job.kueue-toy-sample.yaml").read_text()))
    spec = obj["spec"]["rayClusterSpec"]
    for t in (spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])):
        t["spec"]["containers"][0]["resources"] = _resources("1", "2Gi")
    return obj


def kueue_ray_cluster() -> dict:
    """KubeRay's ``ray-cluster.sample.yaml`` (a CPU RayCluster) in ``vision``."""
    obj = in_workspace(yaml.safe_load((KUBERAY_SAMPLES / "ray-cluster.sample.yaml").read_text()))
    spec = obj["spec"]
    for t in (spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])):
        for c in t["spec"]["containers"]:
            c["resources"] = _resources("1", "2Gi")
    return obj


def partial_job(parallelism: int = 12, completions: int | None = 12, minimum: str | None = "5",
                gpus: int = 4) -> dict:
    """The Kueue-shaped partial-admission Job (``tests/data/kueue``) in ``vision`` as a GPU Job: ``parallelism``
    pods of ``gpus`` GPUs, ``completions``, and ``kueue.x-k8s.io/job-min-parallelism`` =
    ``minimum`` (None: no annotation)."""
    job = in_workspace(yaml.safe_load((DATA / "kueue" / "job-partial-admission.yaml").read_text()))
    notes = job["metadata"].setdefault("annotations", {})
    if minimum is None:
        notes.pop("kueue.x-k8s.io/job-min-parallelism", None)
    else:
        notes["kueue.x-k8s.io/job-min-parallelism"] = minimum
    job["spec"]["parallelism"] = parallelism
    if completions is None:
        job["spec"].pop("completions", None)
    else:
        job["spec"]["completions"] = completions
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = _resources("8", "64Gi", **{GPU: str(gpus)})
    pod["tolerations"] = [dict(GPU_TOLERATION)]
    return job


def sidecar_job(main: int = 8, sidecar: int = 1, *, native: bool = True) -> dict:
    """Kueue's example Job in ``vision`` as 2 pods of ``main`` GPUs, with a GPU telemetry
    init container holding ``sidecar`` GPUs: a native sidecar (``restartPolicy: Always``,
    KEP-753) when ``native``, else a classic init container."""
    job = kueue_job()
    job["spec"]["parallelism"] = job["spec"]["completions"] = 2
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = _resources("8", "64Gi", **{GPU: str(main)})
    init = {"name": "gpu-telemetry", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.0-ubuntu22.04",
            "resources": _resources("1", "1Gi", **{GPU: str(sidecar)})}
    if native:
        init["restartPolicy"] = "Always"
    pod["initContainers"] = [init]
    pod["tolerations"] = [dict(GPU_TOLERATION)]
    return job


def mig_job(slices: int = 1, resource: str = "nvidia.com/mig-1g.10gb") -> dict:
    """Kueue's example Job in ``vision`` whose pods ask only for MIG slices."""
    job = kueue_job()
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = _resources("2", "8Gi", **{resource: str(slices)})
    pod["tolerations"] = [dict(GPU_TOLERATION)]
    return job


def stored(admitted: dict, name: str) -> dict:
    """An admitted object as the API server stores it: named, with a uid."""
    obj = copy.deepcopy(admitted)
    obj["metadata"]["name"] = name
    obj["metadata"].pop("generateName", None)
    obj["metadata"]["uid"] = "5f1c0e9a-1b2c-4d3e-8f90-a1b2c3d4e5f6"
    obj["metadata"]["resourceVersion"] = "41230"
    return obj


def started_job(job: dict) -> dict:
    """A stored Job that runs: unsuspended, ``status.startTime`` set, pods active (its pod
    template is immutable now)."""
    job = copy.deepcopy(job)
    job["spec"]["suspend"] = False
    job["status"] = {"startTime": "2026-12-01T09:00:00Z", "active": job["spec"].get("parallelism", 1),
                     "ready": 0, "uncountedTerminatedPods": {}}
    return job


def legacy_started_job() -> dict:
    """A running Job whose pod template lacks the run-id (created before taugate was installed,
    or by a controller) while the Job itself carries one: the case where a template patch would
    make the API server reject every UPDATE."""
    job = kueue_job()
    job["metadata"].pop("generateName")
    job["metadata"].update(name="sample-job-x7k2p", uid="9d2b6c1e-0000-4000-8000-00000000c0de",
                           labels={labels.RUN_ID: RUN_ID, labels.KUEUE_QUEUE_NAME: "vision-queue"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = _resources("1", "200Mi")
    job["spec"]["template"]["metadata"] = {"labels": {"batch.kubernetes.io/job-name": "sample-job-x7k2p"}}
    return started_job(job)


def gc_finalizer_removal(job: dict) -> dict:
    """The garbage collector's UPDATE of a Job deleted with ``propagationPolicy: Foreground``:
    the whole object, ``deletionTimestamp`` set, the ``foregroundDeletion`` finalizer removed."""
    new = copy.deepcopy(job)
    new["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    new["metadata"]["finalizers"] = []
    return new


def with_snapshot_change(tmp_path: Path, change) -> Path:
    """``examples/cluster.yaml`` with ``change(objects)`` applied, written to ``tmp_path``."""
    objs = read_objects(EXAMPLE_CLUSTER)
    change(objs)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return path


def pick(objs: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def contradicting_flavor(objs: list[dict]) -> None:
    """Profile h100-8gpu places on ``tau.azure.com/pool=training``; the only GPU flavor of its
    ClusterQueue (ResourceFlavor h100) labels its nodes ``tau.azure.com/pool=interactive``."""
    cluster = pick(objs, "TauCluster", "cluster")
    profile = next(p for p in cluster["spec"]["workloadProfiles"] if p["name"] == "h100-8gpu")
    profile["nodeSelector"] = {"tau.azure.com/pool": "training"}
    pick(objs, "ResourceFlavor", "h100")["spec"]["nodeLabels"]["tau.azure.com/pool"] = "interactive"
