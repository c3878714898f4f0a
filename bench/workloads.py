"""AdmissionReview bodies for the benchmark, built from KubeRay's and Kueue's own samples, read from
the Go modules the tests pin (``tests/paths.py``: ``go`` downloads them on first use).

Each workload is (name, webhook path, body): the GPU image-classifier RayJob CREATE on
``/mutate`` and, as the API server would send it after mutation, on ``/validate``; a Kueue
example Job CREATE; a RayCluster CREATE; a RayJob UPDATE with ``oldObject`` on ``/validate``.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import jsonpatch
import yaml

from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.webhook.review import mutate, request_for
from tests.paths import IMAGE_CLASSIFIER as CLASSIFIER
from tests.paths import KUBERAY_SAMPLES, KUEUE_JOB

RAYCLUSTER = KUBERAY_SAMPLES / "ray-cluster.complete.yaml"


def _first(path: Path, kind: str) -> dict:
    return next(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == kind)


def _review(req: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {**req, "uid": str(uuid.uuid4()), "dryRun": False}}).encode()


def build(state: ClusterState, settings: Settings, namespace: str = "vision") -> list[tuple[str, str, bytes]]:
    """The benchmark rows' request bodies, for a workspace ``namespace`` of ``state``."""
    rayjob = _first(CLASSIFIER, "RayJob")
    rayjob["metadata"]["namespace"] = namespace
    create = request_for(rayjob, namespace=namespace, dry_run=False)
    patch = mutate(create, state, settings).patch
    if patch is None:
        raise RuntimeError("the benchmark's RayJob must be changed by /mutate at CREATE; it was not")
    admitted = jsonpatch.apply_patch(rayjob, patch)
    job = _first(KUEUE_JOB, "Job")
    job["metadata"]["namespace"] = namespace
    job["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name", None)
    cluster = _first(RAYCLUSTER, "RayCluster")
    cluster["metadata"]["namespace"] = namespace
    updated = copy.deepcopy(admitted)
    updated["spec"]["suspend"] = False
    return [
        ("RayJob CREATE", "/mutate", _review(create)),
        ("RayJob CREATE", "/validate", _review(request_for(admitted, namespace=namespace, dry_run=False))),
        ("Job CREATE (Kueue sample)", "/mutate", _review(request_for(job, namespace=namespace, dry_run=False))),
        ("RayCluster CREATE", "/mutate", _review(request_for(cluster, namespace=namespace, dry_run=False))),
        ("RayJob UPDATE", "/validate", _review(request_for(updated, namespace=namespace, operation="UPDATE",
                                                          old=admitted, dry_run=False))),
    ]
