"""A generated cluster snapshot at scale: the example cluster plus enough GPU nodes, workload
profiles and workspaces to reach ``nodes`` / ``profiles`` / ``workspaces`` (default 5,000 GPU
nodes, 300 profiles, 500 workspaces). The example's vision workspace and its profiles stay, so
the same AdmissionReviews are decided against a small and a large cluster.

Usage: ``python bench/scale.py OUT.yaml|OUT.json [--nodes 5000 --profiles 300 --workspaces 500]``
(a ``.json`` name writes a ``kind: List``, which ``taugate`` loads far faster than YAML).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import orjson
import yaml

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cluster.yaml"
CLASSES = [("h100", "NVIDIA-H100-80GB-HBM3", 8), ("a100", "NVIDIA-A100-80GB-PCIe", 4),
           ("l40s", "NVIDIA-L40S", 4), ("h200", "NVIDIA-H200", 8), ("a10", "NVIDIA-A10", 1)]


def generate(nodes: int = 5000, profiles: int = 300, workspaces: int = 500) -> list[dict]:
    """The snapshot's objects (pure)."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    cluster = next(d for d in docs if d["kind"] == "TauCluster")
    gpu_nodes = [d for d in docs if d["kind"] == "Node" and "nvidia.com/gpu" in d["status"]["allocatable"]]
    template = gpu_nodes[0]
    for i in range(nodes - len(gpu_nodes)):
        cls, product, gpus = CLASSES[i % len(CLASSES)]
        n = copy.deepcopy(template)
        name = f"gen-{cls}-{i:05d}"
        n["metadata"]["name"] = name
        n["metadata"]["labels"].update({"kubernetes.io/hostname": name, "tau.azure.com/gpu-class": cls,
                                        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)})
        n["status"]["allocatable"]["nvidia.com/gpu"] = n["status"]["capacity"]["nvidia.com/gpu"] = str(gpus)
        docs.append(n)
    existing_ws = sum(1 for d in docs if d["kind"] == "TauWorkspace")
    for i in range(workspaces - existing_ws):
        ws = f"team-{i:03d}"
        docs.append({"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace",
                     "metadata": {"name": ws, "namespace": "tau-platform"},
                     "spec": {"target": {"namespace": ws}, "queue": f"{ws}-queue", "teamRef": {"name": ws},
                              "kubernetesSubject": {"kind": "Group", "name": f"{ws}-researchers"},
                              "principalRef": {"provider": "entra", "name": f"{ws}-researchers"},
                              "role": "tau-researcher-v1"}})
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                     "metadata": {"name": f"{ws}-queue", "namespace": ws}, "spec": {"clusterQueue": f"{ws}-cq"}})
        cls = CLASSES[i % len(CLASSES)][0]
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": f"{ws}-cq"},
                     "spec": {"cohort": "research", "resourceGroups": [
                         {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                             {"name": cls if cls in ("h100", "a100") else "h100",
                              "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}})
    profs = cluster["spec"]["workloadProfiles"]
    for i in range(profiles - len(profs)):
        ws = f"team-{i % max(workspaces - existing_ws, 1):03d}"
        cls, _, gpus = CLASSES[i % len(CLASSES)]
        profs.append({"name": f"{ws}-{cls}-{i}", "applicability": {"namespaces": [ws]}, "gpusPerWorker": gpus,
                      "workerCount": 4, "mode": "elastic", "placement": "unconstrained",
                      "defaultLocalQueue": f"{ws}-queue", "gpuClass": cls,
                      "priorities": {"disableDefaultPriorities": True}})
    return docs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--profiles", type=int, default=300)
    p.add_argument("--workspaces", type=int, default=500)
    a = p.parse_args()
    docs = generate(a.nodes, a.profiles, a.workspaces)
    if a.out.suffix == ".json":
        a.out.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    else:
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        a.out.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))


if __name__ == "__main__":
    main()
