"""Real manifests of the workload kinds issue 17 adds (JobSet, LeaderWorkerSet, Kubeflow PyTorchJob,
RayService), read from their upstream Go modules (``tests/paths.py``) or, where a module ships none,
from the copies in ``tests/data/admission`` (origins in ``tests/data/README.md``), and the changes a
test makes to them: the requests taugate's policies require and a GPU count the workspace's
profiles allow."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from taugate import labels
from taugate.kinds import kind_of

JOBSET_DATA = Path(__file__).resolve().parent / "data" / "admission" / "jobset"
JOBSET_FINE_TUNE = JOBSET_DATA / "fine-tune-llm.yaml"
"""JobSet KEP 672's ``fine-tune-llm``: an ``initializer`` replicated job (1 CPU pod) and
``trainer-node`` (parallelism 3, 5 GPUs per pod), no requests."""
JOBSET_DRIVER_WORKERS = JOBSET_DATA / "driver-ready-worker-start.yaml"
"""JobSet KEP 104's ``driver-ready-worker-start``: a ``driver`` (1 pod) and ``workers`` (2 pods), CPU only."""

REQUESTS = {"cpu": "2", "memory": "8Gi"}
"""The cpu and memory requests ``requests-required`` wants on every container."""


def load(path: Path, index: int = 0) -> dict[str, Any]:
    """The ``index``-th document of a YAML file, in workspace namespace ``vision``."""
    obj = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)][index]
    obj.setdefault("metadata", {})["namespace"] = "vision"
    return obj


def containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container of every pod template of ``obj`` (its kind's ``pod_templates``)."""
    kind = kind_of(obj)
    assert kind is not None
    for t in kind.pod_templates(obj):
        yield from t.spec.get("containers") or []


def runnable(obj: dict[str, Any], gpus: int | None = None, profile: str | None = None) -> dict[str, Any]:
    """A copy of ``obj`` every container of which requests cpu and memory; with ``gpus``, each
    container that asked for GPUs asks for ``gpus`` (request and limit); with ``profile``, the
    workload-profile label."""
    obj = copy.deepcopy(obj)
    for c in containers(obj):
        res = c.setdefault("resources", {})
        asked = any(labels.GPU_RESOURCE in (res.get(k) or {}) for k in ("requests", "limits"))
        res.setdefault("requests", {}).update({k: v for k, v in REQUESTS.items() if k not in res["requests"]})
        if gpus is not None and asked:
            res["requests"][labels.GPU_RESOURCE] = res.setdefault("limits", {})[labels.GPU_RESOURCE] = gpus
    if profile:
        obj["metadata"].setdefault("labels", {})[labels.WORKLOAD_PROFILE] = profile
    return obj


def sized(obj: dict[str, Any], path: tuple[str, ...], count: int) -> dict[str, Any]:
    """``obj`` with the pod count at ``path`` (``("spec", "trainer", "numNodes")``) set to ``count``."""
    holder = obj
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = count
    return obj


def template_labels(obj: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of every pod template of ``obj``."""
    kind = kind_of(obj)
    assert kind is not None
    return [(t.template.get("metadata") or {}).get("labels") or {} for t in kind.pod_templates(obj)]


def at(obj: dict[str, Any], path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in ``obj``, None when a part is missing."""
    for part in path:
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def one_group(lws: dict[str, Any]) -> dict[str, Any]:
    """A copy of a LeaderWorkerSet with ``spec.replicas: 1`` (one leader-and-workers group)."""
    lws = copy.deepcopy(lws)
    lws["spec"]["replicas"] = 1
    return lws
