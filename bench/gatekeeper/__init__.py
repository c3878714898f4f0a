"""taugate's policy library (``policies/``) as Gatekeeper ConstraintTemplates and Constraints, and
Gatekeeper's own install objects from its pinned module (``tests/e2e/gomod/gatekeeper``).

Gatekeeper evaluates a template's Rego on ``input.review`` (the AdmissionRequest: the object after
every mutating webhook) and the Constraint's ``input.parameters``; it has no workload profile
resolution, node summary or Kueue quota in its input. So:

- ``lib.rego`` (package ``lib.taugate``, each template's ``libs``) derives the pod templates, pods
  and GPUs per pod from the object, as ``taugate/policy_input.py`` does;
- the cluster facts taugate reads live (profiles, the GPU classes' largest node and products, the
  ClusterQueues' GPU quota) are computed once from ``examples/cluster.yaml`` with taugate's own
  snapshot code and frozen into the Constraints' parameters (``parameters()``): the nearest
  equivalent; a change in the cluster needs the Constraints re-made (Gatekeeper's ``data.inventory``
  sync could replace part of it, at the cost of caching every Node and ClusterQueue);
- the profile is the one the object's ``tau.azure.com/workload-profile`` label names, else the
  smallest of the workspace's applicable profiles whose ``gpusPerWorker`` holds the largest pod
  (taugate's resolution, ``taugate/profiles.py``, weighs more than the shape).

``TRANSLATED`` lists the policies translated (one template each), ``NOT_TRANSLATED`` the others
and why. The Constraints match what taugate's webhooks match: RayJob/RayCluster (``ray.io``) and
batch Jobs in namespaces labelled ``tau.azure.com/workspace``.
"""

from __future__ import annotations

import base64
import copy
import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from tests import upstream
from tests.e2e.controlplane import LOOPBACK
from tests.paths import EXAMPLE_CLUSTER, REPO

HERE = Path(__file__).resolve().parent
GOMOD = REPO / "tests" / "e2e" / "gomod" / "gatekeeper" / "go.mod"
MODULE = "github.com/open-policy-agent/gatekeeper/v3"
NAMESPACE = "gatekeeper-system"
WORKSPACE_LABEL = "tau.azure.com/workspace"
TRANSLATED = ("requests-required", "head-without-gpu", "gpu-per-pod-within-profile", "gpu-per-pod-fits-node",
              "gpu-class-matches-profile", "gpu-total-fits-queue", "workers-match-profile")
"""Policies with a template here (``<policy>.rego``): the same checks on the same objects, with
the cluster facts from the Constraint's parameters."""
NOT_TRANSLATED = {
    "gpu-healthy-capacity": "a warning on the live count of healthy nodes (Node conditions), which Gatekeeper's "
                            "input lacks; frozen parameters would make it wrong the first time a node fails",
    "mig-slices-fit": "MIG slice resources per node and per ClusterQueue flavor; none of the benchmark's objects "
                      "asks for MIG, so it would cost nothing in this table",
}
ENFORCEMENT = {"head-without-gpu": "warn"}
"""As ``policies/enforcement.yaml`` ships it."""


def version() -> str:
    """The Gatekeeper version pinned in ``tests/e2e/gomod/gatekeeper/go.mod``."""
    for line in GOMOD.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == MODULE:
            return parts[1]
    raise RuntimeError(f"{GOMOD} pins no {MODULE}")


@functools.cache
def _deploy() -> list[dict]:
    """Gatekeeper's release manifest from its module (``deploy/gatekeeper.yaml``)."""
    root = upstream.module_dir("gatekeeper", MODULE)
    return [d for d in yaml.safe_load_all((root / "deploy" / "gatekeeper.yaml").read_text()) if d]


def crds() -> list[dict]:
    """Gatekeeper's CRDs as its release manifest ships them (ConstraintTemplate, Config, ...)."""
    return [copy.deepcopy(d) for d in _deploy() if d["kind"] == "CustomResourceDefinition"]


def webhook_configuration(port: int, ca_pem: bytes) -> dict:
    """Gatekeeper's ValidatingWebhookConfiguration from its release manifest with only the
    ``validation.gatekeeper.sh`` webhook (the ``check-ignore-label`` one guards Namespaces, which
    the benchmark does not create), its ``clientConfig`` pointed at ``https://127.0.0.1:port``;
    rules (every group and resource), failurePolicy, timeout and namespaceSelector as shipped."""
    vwc = copy.deepcopy(next(d for d in _deploy() if d["kind"] == "ValidatingWebhookConfiguration"))
    vwc["webhooks"] = [w for w in vwc["webhooks"] if w["name"] == "validation.gatekeeper.sh"]
    for w in vwc["webhooks"]:
        w["clientConfig"] = {"url": f"https://{LOOPBACK}:{port}{w['clientConfig']['service']['path']}",
                             "caBundle": base64.b64encode(ca_pem).decode()}
    return vwc


def _kind(policy: str) -> str:
    return "Taugate" + "".join(part.capitalize() for part in policy.split("-"))


def templates() -> list[dict]:
    """One ConstraintTemplate per ``TRANSLATED`` policy: its Rego, ``lib.rego`` as a lib, and a
    parameters schema that keeps whatever it is given."""
    lib = (HERE / "lib.rego").read_text()
    out = []
    for policy in TRANSLATED:
        kind = _kind(policy)
        out.append({
            "apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
            "metadata": {"name": kind.lower()},
            "spec": {"crd": {"spec": {"names": {"kind": kind}, "validation": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
                     "targets": [{"target": "admission.k8s.gatekeeper.sh",
                                  "rego": (HERE / f"{policy}.rego").read_text(), "libs": [lib]}]}})
    return out


def _number(d: Decimal) -> int | float:
    return int(d) if d == d.to_integral_value() else float(d)


@functools.cache
def parameters() -> dict[str, Any]:
    """The cluster facts the templates read, from ``examples/cluster.yaml`` through taugate's own
    snapshot code: ``profiles`` (ordered by gpusPerWorker, then name), ``workspaceProfiles`` (the
    profiles that apply to each workspace namespace, ``ClusterState.applicable_profiles``), ``gpuClasses`` (largest
    node, products), ``gpuClassLabel`` and ``queueMaxGpus[namespace][gpu class]`` (nominalQuota +
    borrowingLimit of the ClusterQueue's ``nvidia.com/gpu`` quota in the flavor named as the class;
    absent when borrowing is unbounded)."""
    state = load_snapshot(EXAMPLE_CLUSTER)
    profiles = sorted(state.profiles.values(), key=lambda p: (p.gpus_per_worker, p.name))
    queue_max: dict[str, dict[str, int | float]] = {}
    for (ns, _lq), quotas in state.queue_quotas.items():
        for q in quotas:
            if q.resource == "nvidia.com/gpu" and q.flavor in state.gpu_classes and q.borrowing_limit is not None:
                queue_max.setdefault(ns, {})[q.flavor] = _number(q.nominal + q.borrowing_limit)
    label = Settings().gpu_class_label
    return {
        "profiles": [{"name": p.name, "gpusPerWorker": p.gpus_per_worker, "workerCount": p.worker_count,
                      "mode": p.mode, "gpuClass": p.gpu_class,
                      **({"maxGpusPerPod": p.max_gpus_per_pod} if p.max_gpus_per_pod is not None else {})}
                     for p in profiles],
        "gpuClasses": {n: {"maxGpusPerNode": s.max_gpus_per_node, "products": list(s.products)}
                       for n, s in state.gpu_classes.items()},
        "gpuClassLabel": label,
        "workspaceProfiles": {ns: sorted(p.name for p in state.applicable_profiles(ws, ""))
                              for ns, ws in state.workspaces.items()},
        "queueMaxGpus": queue_max,
    }


def constraints() -> list[dict]:
    """One Constraint per template, matching RayJobs, RayClusters and batch Jobs in workspace
    namespaces, with ``parameters()`` and the enforcement action of ``ENFORCEMENT`` (else deny)."""
    out = []
    for policy in TRANSLATED:
        out.append({
            "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": _kind(policy),
            "metadata": {"name": f"taugate-{policy}"},
            "spec": {"enforcementAction": ENFORCEMENT.get(policy, "deny"),
                     "match": {"kinds": [{"apiGroups": ["ray.io"], "kinds": ["RayJob", "RayCluster"]},
                                         {"apiGroups": ["batch"], "kinds": ["Job"]}],
                               "namespaceSelector": {"matchExpressions": [
                                   {"key": WORKSPACE_LABEL, "operator": "Exists"}]}},
                     "parameters": parameters()}})
    return out
