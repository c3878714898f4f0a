"""The recorder's I/O around ``recorder/run/``: kopf wiring, lifecycle, observation, the worker.
It watches, read-only, every registered kind's roots and members with the run-id label,
ReplicaSets, Pods, Kueue Workloads and Nodes, and writes only TauRuns and the evidence directory.
Kueue Workloads join a run by ``kueue.x-k8s.io/job-uid`` or their owner reference, never by
rebuilding Kueue's name hash. Previous conditions come from the evidence, so a restart records
nothing twice.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from taugate import labels
from taugate.controllers.recorder.config import FilesystemProbe, RecorderConfig, RunProbe
from taugate.controllers.recorder.evidence.records import EvidenceError, EvidenceStore, Signer
from taugate.controllers.recorder.index import (
    INDEX_IDS,
    IX_NODES,
    IX_PODS,
    IX_WORKLOADS,
    RunEntry,
    Snapshot,
    child_index,
    root_index,
    take_snapshot,
)
from taugate.controllers.recorder.objects import (
    CHILD_RESOURCES,
    RunKey,
    gvr,
    is_member_child,
    is_root,
    name_of,
    run_key,
    trim_node,
    uid_of,
)
from taugate.controllers.recorder.reconcile import RunReconciler
from taugate.controllers.recorder.run import membership as members
from taugate.controllers.recorder.run.admitted import workload_owner_uid
from taugate.controllers.recorder.run.completion import pod_terminations
from taugate.controllers.recorder.run.logtails import log_targets
from taugate.controllers.recorder.writer import TauRunWriter
from taugate.kinds import KINDS, pod
from taugate.kube import Kube, KubeError
from taugate.kubeaccess import SECRETS
from taugate.settings import Settings
from taugate.workqueue import WorkQueue, cancel

log = logging.getLogger("taugate.recorder")
POLL = ("poll", "")  # the queue key that marks every active run

_Watch = tuple[str, tuple[str, ...], dict[str, Any], Callable[..., Any], Callable[[str | None, dict], None]]
"""kopf index id, resource (group, [version,] plural), kopf filters, the indexer and the observer."""


def _now() -> datetime:
    return datetime.now(UTC)




class Recorder:
    """kopf indices hold the watched objects, events mark runs dirty, ``config.workers`` workers
    reconcile them, never one run in two at once.

    kopf fills every index from its initial listing before it calls any event handler, so the
    first reconcile after a (re)start already sees every pod, Workload and owner of the run; a
    partial view cannot produce a spurious transition. ``clock`` returns an aware datetime.
    """

    def __init__(self, config: RecorderConfig, settings: Settings, kube: Kube,
                 signer: Signer, probe: RunProbe | None = None, clock: Callable[[], datetime] = _now) -> None:
        self.config = config
        self.settings = settings
        self.writer = TauRunWriter(kube)
        self.store = EvidenceStore(config.storage(), signer)
        self.reconciler = RunReconciler(config, settings, self.writer, self.store,
                                        probe if probe is not None else FilesystemProbe(config), clock)
        self.runs: dict[RunKey, RunEntry] = {}
        self.by_uid: dict[str, RunKey] = {}  # owner uid -> run
        self.indices: dict[str, Any] = {}
        self._nodes_seen: dict[str, dict | None] = {}
        self.queue = WorkQueue()
        self._task: asyncio.Task | None = None
        self.errors: list[str] = []

    @classmethod
    def create(cls, config: RecorderConfig, settings: Settings, cfg: Any) -> Recorder:
        """Raises EvidenceError when no usable signing key is configured (the operator then fails
        to start rather than record unsigned evidence)."""
        kube = Kube.from_configuration(cfg)
        try:
            signer = cls.load_signer(config, kube)
        except Exception:
            kube.close()
            raise
        return cls(config, settings, kube, signer)

    def close(self) -> None:
        """Close the API client."""
        self.writer.kube.close()

    @staticmethod
    def load_signer(config: RecorderConfig, kube: Kube | None = None) -> Signer:
        """``signing_key_file``, else the Secret ``signing_key_secret`` (``namespace/name[/key]``,
        key default ``ed25519.pem``). Raises EvidenceError if neither is configured or the key is
        unusable."""
        if config.signing_key_file is not None:
            return Signer.from_file(config.signing_key_file)
        if config.signing_key_secret and kube is not None:
            parts = config.signing_key_secret.split("/")
            if len(parts) not in (2, 3):
                raise EvidenceError(f"signing_key_secret {config.signing_key_secret!r}: expected namespace/name[/key]")
            ns, name = parts[0], parts[1]
            key = parts[2] if len(parts) == 3 else "ed25519.pem"
            try:
                secret = kube.get(SECRETS, name, ns) or {}
            except KubeError as e:
                raise EvidenceError(f"Secret {ns}/{name}: cannot read ({e.status} {e})") from None
            if not secret:
                raise EvidenceError(f"Secret {ns}/{name}: cannot read (404 not found)")
            data = (secret.get("data") or {}).get(key)
            if not data:
                raise EvidenceError(f"Secret {ns}/{name} has no key {key!r}")
            return Signer.from_pem(base64.b64decode(data), f"Secret {ns}/{name}[{key}]")
        raise EvidenceError("no evidence signing key: set signing_key_file or signing_key_secret")

    def register(self, registry: Any) -> None:
        """Add the recorder's indices, ``on.event`` handlers and the activities that start and stop
        the worker to a kopf ``OperatorRegistry``. Nothing here writes to the watched objects (no
        kopf annotations or finalizers). The handlers are coroutines, so they run on the event loop
        (kopf runs a plain function in a thread pool): they share ``runs``, ``by_uid`` and the
        ``WorkQueue`` with the loop. In threads, a Node event iterating ``runs`` while another
        event added a run failed ("dictionary changed size during iteration", bench/fleet.py at
        5,000 Nodes)."""
        import kopf

        present = {labels.RUN_ID: kopf.PRESENT}

        def root(body: Any, **_: Any) -> bool:
            return is_root(dict(body))

        def child(body: Any, **_: Any) -> bool:
            return is_member_child(dict(body))

        def by_run_id(body: Any, **_: Any) -> dict | None:
            key = run_key(dict(body))
            return {key: dict(body)} if key else None

        def by_owner_uid(body: Any, **_: Any) -> dict | None:
            uid = workload_owner_uid(dict(body))
            return {uid: dict(body)} if uid else None

        def by_node_name(body: Any, **_: Any) -> dict:
            return {name_of(dict(body)): trim_node(dict(body))}

        # A Pod's members are IX_PODS. No version for Kueue: kopf watches the preferred one
        # (v1beta2 or v1beta1; the status fields read here are the same in both).
        roots: list[_Watch] = [(root_index(k), gvr(k), {"labels": present, "when": root}, by_run_id,
                                self.observe_owner) for k in KINDS]
        children: list[_Watch] = [(child_index(k.resource), gvr(k), {"labels": present, "when": child}, by_run_id,
                                   self.observe_child) for k in KINDS if k is not pod.KIND]
        children += [(child_index(r[2]), r, {"labels": present, "when": child}, by_run_id, self.observe_child)
                     for r in CHILD_RESOURCES]
        specs: tuple[_Watch, ...] = (
            *roots,
            (IX_WORKLOADS, ("kueue.x-k8s.io", "workloads"), {}, by_owner_uid, self.observe_workload),
            (IX_PODS, gvr(pod.KIND), {"labels": present}, by_run_id, self.observe_pod),
            *children,
            (IX_NODES, ("", "v1", "nodes"), {}, by_node_name, self.observe_node),
        )
        for ix_id, resource, filters, indexer, observe in specs:
            kopf.index(*resource, registry=registry, id=ix_id, **filters)(indexer)

            async def handler(type: str | None, body: Any, _observe: Callable = observe, **kwargs: Any) -> None:
                for k in INDEX_IDS:
                    if k in kwargs:
                        self.indices[k] = kwargs[k]
                _observe(type, dict(body))

            kopf.on.event(*resource, registry=registry, id=ix_id.replace("recorder_", "recorder-"), **filters)(handler)

        @kopf.on.startup(registry=registry, id="recorder-start")
        async def _start(**_: Any) -> None:
            self.start()

        @kopf.on.cleanup(registry=registry, id="recorder-stop")
        async def _stop(**_: Any) -> None:
            await self.stop()

    def start(self) -> None:
        """Start the worker on the running event loop (it also marks every active run each
        ``poll_seconds``)."""
        self.queue.add(POLL, self.config.poll_seconds)
        self._task = asyncio.create_task(self.queue.run(self._handle, self.config.workers), name="recorder-workers")

    async def stop(self) -> None:
        """A reconcile in progress finishes first (its thread cannot be interrupted, and a second
        recorder must never write the same record at once)."""
        self.queue.stop()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=30)  # not wait_for: it can swallow a cancel (CPython gh-86296)
        if not done:
            log.warning("the recorder's workers did not stop within 30 s: cancelled")
            await cancel(task)
        elif not task.cancelled() and task.exception() is not None:
            log.error("the recorder's workers failed: %r", task.exception())

    # called from watch handlers on the event loop: cheap, no I/O
    def _entry(self, key: RunKey) -> RunEntry:
        e = self.runs.get(key)
        if e is None:
            e = self.runs[key] = RunEntry(key[1], key[0])
        return e

    def mark(self, key: RunKey) -> None:
        """Queue a run for reconciling."""
        self.queue.add(key)

    def observe_owner(self, event_type: str | None, obj: dict) -> None:
        """An event of a root (``recorder.objects.is_root``)."""
        key = run_key(obj)
        if key is None or not is_root(obj):
            return
        self._entry(key)
        uid = uid_of(obj)
        if uid:
            self.by_uid[uid] = key  # for its Workloads' events; binding is the reconcile's
        self.mark(key)

    def observe_child(self, event_type: str | None, obj: dict) -> None:
        """A member candidate (a registered kind or a ReplicaSet whose controller is governed):
        its run is marked; membership is decided on reconcile, from the ownerReference chain."""
        key = run_key(obj)
        if key is not None:
            self._entry(key)
            self._follow(obj, key)
            self.mark(key)

    def _follow(self, obj: dict, key: RunKey) -> None:
        """Remember which run ``obj``'s uid is for, so the events of a Kueue Workload it owns (a
        Deployment's pods', a RayService's RayCluster's) mark that run; binding is the reconcile's."""
        uid = uid_of(obj)
        if uid:
            self.by_uid.setdefault(uid, key)

    def observe_workload(self, event_type: str | None, obj: dict) -> None:
        """The run of the Workload's owner (known once the owner was seen) is marked."""
        uid = workload_owner_uid(obj)
        key = self.by_uid.get(uid or "")
        if key is not None:
            self.mark(key)

    def observe_pod(self, event_type: str | None, obj: dict) -> None:
        """Termination records and the ended container instances whose log tails the evidence
        keeps are noted at once (a DELETED event carries the pod's last state, so a failure is
        never lost to the pod's deletion, and a tail not read by then is recorded unavailable)."""
        key = run_key(obj)
        if key is None:
            return
        e = self._entry(key)
        self._follow(obj, key)
        # a pod's failure counts when its controller is the run's (a bare Pod: itself, the root)
        holder = members.controller_uid(obj) or uid_of(obj)
        for f in pod_terminations(obj):
            e.pending_failures.setdefault(f["key"], (f, holder))
        for t in log_targets(obj):
            # once deleted, a pod's ended containers have no log left to read (recorded unavailable)
            e.pending_logs[t.key] = (t.gone() if event_type == "DELETED" else t, holder)
        self.mark(key)

    def observe_node(self, event_type: str | None, obj: dict) -> None:
        """A Node event that changed its conditions: runs with a pod on that node are marked."""
        name = name_of(obj)
        trimmed = None if event_type == "DELETED" else trim_node(obj)
        if self._nodes_seen.get(name) == trimmed:
            return  # a kubelet heartbeat, nothing the recorder reads changed
        self._nodes_seen[name] = trimmed
        pods = self.indices.get(IX_PODS)
        if pods is None:
            return
        for key, e in self.runs.items():
            if not e.final and any((p.get("spec") or {}).get("nodeName") == name for p in pods.get(key, ())):
                self.mark(key)

    def snapshot(self, e: RunEntry) -> Snapshot:
        """The run's objects from kopf's indices (on the event loop; ``take_snapshot``)."""
        return take_snapshot(self.indices, e)

    async def _handle(self, key: Any) -> None:
        if key == POLL:
            for run, e in list(self.runs.items()):
                if not e.final:
                    self.mark(run)
            self.queue.add(POLL, self.config.poll_seconds)
            return
        try:
            await self.reconcile(key)
        except Exception as ex:  # one run's trouble never stops the others
            msg = f"run {key[1]} in {key[0]}: {type(ex).__name__}: {ex}"
            self.errors.append(msg)
            log.exception("recorder: %s", msg)

    async def reconcile(self, key: RunKey) -> None:
        """Re-derive one run, append what changed to its evidence, update its TauRun."""
        e = self.runs.get(key)
        if e is None or e.final:
            return
        await asyncio.to_thread(self.reconciler.bind, e)
        await asyncio.to_thread(self.reconciler.reconcile, e, self.snapshot(e))
