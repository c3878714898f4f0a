"""The recorder's only Kubernetes writes: TauRuns (create, then the ``status`` subresource), and the
TauRun's status and identity built from a run's evidence and conditions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from taugate import labels
from taugate.controllers.recorder.evidence.records import EvidenceStore, RunRecord
from taugate.controllers.recorder.index import RunEntry, Snapshot
from taugate.controllers.recorder.run.diagnosis import diagnose, phase
from taugate.controllers.recorder.run.gpu_health import run_nodes
from taugate.controllers.resources import Resource
from taugate.kube import Kube
from taugate.state_objects import CLUSTER_NAME, TAU_CLUSTERS

TAU_RUNS = Resource(labels.GROUP, labels.VERSION, "tauruns", "TauRun", True)
MAX_FAILURES_IN_STATUS = 20
CLUSTER_REUSE_SECONDS = 10.0
"""How long a TauCluster read for one run's record serves the next runs' records."""


class TauRunWriter:
    """Creates and updates TauRuns and reads pod logs (sync; called from the worker thread).

    Create sends metadata + spec; the status goes through the ``status`` subresource as a JSON
    merge patch (``taugate.kube.Kube``).
    """

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self._known: set[tuple[str, str]] = set()
        self._clock = clock
        self._cluster_lock = threading.Lock()
        self._cluster: tuple[float, dict | None] | None = None

    def get(self, namespace: str, name: str) -> dict | None:
        """The TauRun, or None when there is none."""
        return self.kube.get(TAU_RUNS, name, namespace)

    def apply(self, namespace: str, name: str, metadata: dict, spec: dict, status: dict) -> None:
        """Create the TauRun if it does not exist yet, then merge-patch its status. Raises KubeError."""
        key = (namespace, name)
        if key not in self._known:
            if self.get(namespace, name) is None:
                self.kube.create(TAU_RUNS, {"metadata": metadata, "spec": spec})
            self._known.add(key)
        self.kube.patch(TAU_RUNS, name, {"status": status}, namespace, "status")

    def pod_log(self, namespace: str, pod: str, container: str | None, tail: int, previous: bool = False) -> str:
        """The last ``tail`` lines of a pod's log (text; its container's previous instance with
        ``previous``). Raises KubeError."""
        return self.kube.pod_log(namespace, pod, container=container, tail_lines=tail, previous=previous)

    def tau_cluster(self) -> dict | None:
        """The TauCluster (its status holds the resolved workload profiles), None when there is none,
        as read at most ``CLUSTER_REUSE_SECONDS`` ago: the TauCluster of a fleet is megabytes (500
        profiles with their conditions) and every new run's record asks for it, so a burst of runs
        reads it once. (The record says whether its ``profileSetHash`` is the one the run's
        admission recorded.) Raises KubeError."""
        with self._cluster_lock:
            now = self._clock()
            if self._cluster is not None and now - self._cluster[0] < CLUSTER_REUSE_SECONDS:
                return self._cluster[1]
            obj = self.kube.get(TAU_CLUSTERS, CLUSTER_NAME)
            self._cluster = (now, obj)
            return obj


_FAILURE_FIELDS = ("key", "pod", "podUid", "container", "node", "reason", "exitCode", "signal", "message", "startedAt",
                   "finishedAt")


def taurun_status(e: RunEntry, snap: Snapshot, rec: RunRecord, state: dict, conditions: list[dict],
                  store: EvidenceStore) -> dict:
    """The TauRun's ``status``: phase, the stage and what it says (``run.diagnosis.diagnose``),
    conditions, the current Workload, nodes, at most ``MAX_FAILURES_IN_STATUS`` failure records,
    progress, the artifact summary (count, bytes) and where the evidence is (path, events, head,
    signing key id, final). Fields without a value are left out."""
    diag = diagnose(conditions, namespace=e.namespace, run_id=e.run_id)
    failures = [{k: v for k, v in f.items() if k in _FAILURE_FIELDS}
                for f in (state.get("failures") or [])[:MAX_FAILURES_IN_STATUS]]
    art = e.artifacts
    wl_names = snap.workload_names
    status = {
        "phase": phase(conditions),
        "stage": diag.stage,
        "reason": diag.reason,
        "message": diag.message[:1024],
        "conditions": conditions,
        "workload": wl_names[-1] if wl_names else None,
        "nodes": run_nodes(snap.pods),
        "failures": failures,
        "progress": e.progress.wire() if e.progress else None,
        "artifacts": ({"root": art.root, "index": art.index is not None, "files": len(art.files),
                       "bytes": sum(int(f.get("size") or 0) for f in art.files)} if art else None),
        "evidence": {"path": store.location(e.run_id), "events": len(rec.events), "head": rec.head,
                     "keyId": store.signer.key_id if store.signer else None, "final": bool(state.get("final"))},
    }
    return {k: v for k, v in status.items() if v is not None}


def taurun_identity(e: RunEntry, state: dict) -> tuple[dict, dict]:
    """The TauRun's ``(metadata, spec)``: named by run-id in the run's namespace, labelled with
    the run-id, managed-by and workspace; the spec names the root object and the run's
    workspace, queue, profile and profile-set hash as the evidence recorded them."""
    ref = state.get("object") or {}
    spec = {"runId": e.run_id,
            "object": {k: ref.get(k) for k in ("apiVersion", "kind", "name", "namespace", "uid") if ref.get(k)}}
    for k in ("workspace", "queue", "profile", "profileSetHash"):
        if state.get(k):
            spec[k] = state[k]
    meta_labels = {labels.RUN_ID: e.run_id, labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    if state.get("workspace"):
        meta_labels[labels.WORKSPACE] = str(state["workspace"])
    return {"name": e.run_id, "namespace": e.namespace, "labels": meta_labels}, spec
