"""The run recorder: watches taugate-managed runs and keeps one TauRun and one evidence record per run-id.

Runs in the operator process (kopf). It watches, read-only:

- RayJobs (``ray.io``) and Jobs (``batch``) with the ``tau.azure.com/run-id`` label (a Job whose
  controller is a RayJob is KubeRay's submitter, part of the RayJob's run, not a run itself);
- Kueue Workloads, matched to a run through the ``kueue.x-k8s.io/job-uid`` label or their owner
  reference (never by rebuilding Kueue's name hash);
- RayClusters and KubeRay's submitter Jobs with the run-id label, and Pods with the run-id label
  (their termination records are kept as soon as they are seen, so a failure reason survives the
  pod's deletion); a child or pod joins its run only through its controller ownerReference
  chain to the run's root object, and a run is bound to its first root object's uid
  (``controllers/run_membership.py``), so a copied run-id label joins nothing;
- Nodes (conditions only, for ``GPUHealthy``).

The root object's admission record (``tau.azure.com/admission``) is kept as evidence only when
it verifies (``taugate.record``: signed with ``TAUGATE_ADMISSION_KEY``, bound to that object);
otherwise the evidence says why it is not trusted, and the workspace, profile and queue come from
the labels the webhook pins.

and writes only two things: the ``TauRun`` (namespace of the run, named by run-id) and the
evidence directory (``controllers/evidence.py``). Every decision is
``controllers/run_conditions.py`` over the observed objects; this module is the I/O around it.

One worker task reconciles runs one at a time (events mark a run dirty, a poll marks every
active run dirty every ``poll_seconds`` for metrics, artifacts and the stall clock). The previous
conditions come from the evidence record, so after a restart nothing already recorded is
recorded again.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
from kubernetes.client.rest import ApiException

from taugate import labels
from taugate import record as admission_record
from taugate.controllers import run_conditions as rc
from taugate.controllers import run_membership as members
from taugate.controllers.evidence import EvidenceError, EvidenceStore, Signer
from taugate.controllers.kube import Kube, KubeError
from taugate.controllers.recorder_config import FilesystemProbe, RecorderConfig, RunProbe
from taugate.controllers.resources import Resource
from taugate.kinds import KIND_NAMES, WorkloadKind, job, raycluster, rayjob
from taugate.settings import Settings

log = logging.getLogger("taugate.recorder")

TAU_RUNS = Resource(labels.GROUP, labels.VERSION, "tauruns", "TauRun", True)
MAX_FAILURES_IN_STATUS = 20
_DROP_META = ("managedFields", "resourceVersion", "generation", "selfLink")


def _now() -> datetime:
    return datetime.now(UTC)


# --------------------------------------------------------------------------------------------
# pure helpers for the admission record and the admitted object


def parse_admission_record(obj: dict, key: bytes | None = None) -> dict:
    """The webhook's record of what it changed and why, kept only when it can be trusted.

    The annotation ``tau.azure.com/admission`` holds JSON ``{"profile", "profileSetHash",
    "workspace", "queue", "changes": [...], "policyDigest", "decisions": [...], "object",
    "runId", "signature"}``. When ``taugate.record.verify`` trusts it (signed with ``key``, bound
    to ``obj``) it is returned with ``"trusted": true``; otherwise only ``{"trusted": false,
    "untrusted": <why>, "claimed": <the annotation, at most 4 KiB>}`` (nothing of it is used).
    Either way, missing keys fall back to the labels the webhook pins on the object
    (``tau.azure.com/workload-profile``, ``tau.azure.com/workload-profile-set-hash``,
    ``tau.azure.com/workspace``, ``kueue.x-k8s.io/queue-name``).
    """
    meta = obj.get("metadata") or {}
    lbl = meta.get("labels") or {}
    raw = (meta.get("annotations") or {}).get(labels.ADMISSION_RECORD)
    rec: dict[str, Any] = {}
    if isinstance(raw, str) and raw.strip():
        check = admission_record.verify(admission_record.decode(raw), obj, key)
        if check.trusted:
            rec = {**json.loads(raw), "trusted": True}
        else:
            rec = {"trusted": False, "untrusted": check.reason, "claimed": raw[:4096]}
    else:
        rec = {"trusted": False, "untrusted": f"the object carries no {labels.ADMISSION_RECORD} annotation"}
    for key, label in (("profile", labels.WORKLOAD_PROFILE), ("profileSetHash", labels.PROFILE_SET_HASH),
                       ("workspace", labels.WORKSPACE), ("queue", labels.KUEUE_QUEUE_NAME)):
        if not isinstance(rec.get(key), str) or not rec.get(key):
            if lbl.get(label):
                rec[key] = lbl[label]
    for key in ("changes", "decisions"):
        if key in rec and not isinstance(rec[key], list):
            rec[key] = [rec[key]]
    return rec


def trimmed_object(obj: dict) -> dict:
    """The object without ``status`` and server bookkeeping (managedFields, resourceVersion)."""
    out = copy.deepcopy({k: v for k, v in obj.items() if k != "status"})
    meta = out.get("metadata") or {}
    for k in _DROP_META:
        meta.pop(k, None)
    return out


def _gvr(kind: WorkloadKind) -> tuple[str, str, str]:
    """``(group, version, resource)`` of a workload kind (``taugate.kinds``), as kopf names it."""
    return (kind.group, kind.version, kind.resource)


def _is_child_job(obj: dict) -> bool:
    """KubeRay's submitter Job (controller owner a RayJob, or any workload kind) belongs to its
    owner's run."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") in KIND_NAMES:
            return True
    return False


def _run_id(obj: dict) -> str | None:
    rid = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.RUN_ID)
    return rid if isinstance(rid, str) and rc.RUN_ID_RE.match(rid) else None


def _name(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _ns(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _uid(obj: dict) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _trim_node(node: dict) -> dict:
    """What the recorder keeps of a Node: name, labels and conditions without the kubelet's
    heartbeat times (so a heartbeat is not a change)."""
    meta = node.get("metadata") or {}
    conds = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
             for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    return {"kind": "Node", "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
            "status": {"conditions": conds}}


# --------------------------------------------------------------------------------------------
# Kubernetes writes (the only ones the recorder does)


class TauRunWriter:
    """Creates and updates TauRuns and reads pod logs (sync; called from the worker thread).

    Create sends metadata + spec; the status goes through the ``status`` subresource as a JSON
    merge patch (``controllers.kube.Kube``).
    """

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.kube = Kube(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self._known: set[tuple[str, str]] = set()

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

    def pod_log(self, namespace: str, pod: str, container: str | None, tail: int) -> str:
        """The last ``tail`` lines of a pod's log (text). Raises ApiException."""
        kwargs: dict[str, Any] = {"tail_lines": tail, "_request_timeout": (5, 15)}
        if container:
            kwargs["container"] = container
        return self.core.read_namespaced_pod_log(pod, namespace, **kwargs)


# --------------------------------------------------------------------------------------------
# the in-memory index


@dataclass
class RunEntry:
    """What the recorder holds about one run between reconciles (the objects themselves are in
    kopf's indices, read when the run is reconciled)."""

    run_id: str
    namespace: str
    owner_uid: str | None = None  # the root object the run is bound to (run_membership)
    member_uids: set[str] = field(default_factory=set)  # the root and its children, as ever seen
    pending_failures: dict[str, tuple[dict, str | None]] = field(default_factory=dict)  # key -> (failure, pod's controller uid)
    ignored: set[str] = field(default_factory=set)  # uids of intruders already logged
    progress: rc.ProgressState | None = None
    progress_loaded: bool = False
    artifacts: rc.ArtifactListing | None = None
    terminal_since: datetime | None = None
    last_log_read: datetime | None = None
    final: bool = False
    last_status: dict | None = None


@dataclass(frozen=True)
class Snapshot:
    """A copy of one run's observed objects, taken on the event loop for the worker thread."""

    owner: dict | None
    pods: list[dict]
    workloads: list[dict]
    pending_failures: dict[str, dict]  # the run's own (pod controller among its members)
    nodes: dict[str, dict]
    workload_names: list[str]


# kopf index ids (also the names under which kopf passes them to handlers)
IX_RAYJOBS = "recorder_rayjobs"      # run-id -> RayJob
IX_JOBS = "recorder_jobs"            # run-id -> Job (not KubeRay's submitter Job)
IX_WORKLOADS = "recorder_workloads"  # owner uid -> Kueue Workload
IX_PODS = "recorder_pods"            # run-id -> Pod
IX_CLUSTERS = "recorder_rayclusters"  # run-id -> RayCluster (KubeRay's, for a RayJob)
IX_CHILD_JOBS = "recorder_child_jobs"  # run-id -> Job owned by a controller (KubeRay's submitter)
IX_NODES = "recorder_nodes"          # node name -> Node (name, labels, conditions)
INDEX_IDS = (IX_RAYJOBS, IX_JOBS, IX_WORKLOADS, IX_PODS, IX_NODES, IX_CLUSTERS, IX_CHILD_JOBS)


class Recorder:
    """The recorder: kopf indices hold the watched objects, events mark runs dirty, one worker
    reconciles dirty runs one at a time.

    kopf fills every index from its initial listing before it calls any event handler, so the
    first reconcile after a (re)start already sees every pod, Workload and owner of the run; a
    partial view cannot produce a spurious transition.

    ``api_client`` is an official ``kubernetes.client.ApiClient`` (for TauRun writes and pod
    logs); ``signer`` signs evidence (see :meth:`create`); ``probe`` reads the run's data
    path (default: :class:`FilesystemProbe`); ``clock`` returns the current aware datetime.
    """

    def __init__(self, config: RecorderConfig, settings: Settings, api_client: kubernetes.client.ApiClient,
                 signer: Signer, probe: RunProbe | None = None, clock: Callable[[], datetime] = _now) -> None:
        self.config = config
        self.settings = settings
        self.writer = TauRunWriter(api_client)
        self.store = EvidenceStore(config.evidence_root, signer)
        self.probe = probe if probe is not None else FilesystemProbe(config)
        self.clock = clock
        self.options = rc.DeriveOptions(tuple(settings.gpu_health_conditions), config.stall_seconds)
        self.runs: dict[str, RunEntry] = {}
        self.by_uid: dict[str, str] = {}  # owner uid -> run-id
        self.indices: dict[str, Any] = {}
        self._nodes_seen: dict[str, dict | None] = {}
        self._dirty: dict[str, None] = {}
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self.errors: list[str] = []

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(cls, config: RecorderConfig, settings: Settings, cfg: kubernetes.client.Configuration) -> Recorder:
        """A recorder with its own ``ApiClient`` for ``cfg`` and the configured signing key.

        Raises EvidenceError when no usable signing key is configured (the operator then fails to
        start rather than record unsigned evidence)."""
        api_client = kubernetes.client.ApiClient(cfg)
        try:
            signer = cls.load_signer(config, api_client)
        except Exception:
            api_client.close()
            raise
        return cls(config, settings, api_client, signer)

    def close(self) -> None:
        """Close the API client."""
        self.writer.kube.close()

    @staticmethod
    def load_signer(config: RecorderConfig, api_client: kubernetes.client.ApiClient | None = None) -> Signer:
        """The signing key: ``signing_key_file``, else the Secret ``signing_key_secret``
        (``namespace/name[/key]``, key default ``ed25519.pem``). Raises EvidenceError if neither
        is configured or the key is unusable."""
        if config.signing_key_file is not None:
            return Signer.from_file(config.signing_key_file)
        if config.signing_key_secret and api_client is not None:
            parts = config.signing_key_secret.split("/")
            if len(parts) not in (2, 3):
                raise EvidenceError(f"signing_key_secret {config.signing_key_secret!r}: expected namespace/name[/key]")
            ns, name = parts[0], parts[1]
            key = parts[2] if len(parts) == 3 else "ed25519.pem"
            try:
                secret = kubernetes.client.CoreV1Api(api_client).read_namespaced_secret(name, ns)
            except ApiException as e:
                raise EvidenceError(f"Secret {ns}/{name}: cannot read ({e.status} {e.reason})") from None
            data = (secret.data or {}).get(key)
            if not data:
                raise EvidenceError(f"Secret {ns}/{name} has no key {key!r}")
            return Signer.from_pem(base64.b64decode(data), f"Secret {ns}/{name}[{key}]")
        raise EvidenceError("no evidence signing key: set signing_key_file or signing_key_secret")

    # -- kopf wiring -------------------------------------------------------------------------
    def register(self, registry: Any) -> None:
        """Add the recorder's handlers to a kopf ``OperatorRegistry``: indices and ``on.event``
        handlers for RayJobs, Jobs, Pods (run-id label present), Kueue Workloads and Nodes, plus
        startup/cleanup activities that start and stop the worker. Nothing here writes to the
        watched objects (no kopf annotations or finalizers)."""
        import kopf

        present = {labels.RUN_ID: kopf.PRESENT}
        not_child = lambda body, **_: not _is_child_job(dict(body))  # noqa: E731
        child = lambda body, **_: _is_child_job(dict(body))  # noqa: E731

        def by_run_id(body: Any, **_: Any) -> dict | None:
            rid = _run_id(dict(body))
            return {rid: dict(body)} if rid else None

        # no version for Kueue: kopf watches the preferred one (v1beta2 or v1beta1; the status
        # fields read here are the same in both)
        specs = (
            (IX_RAYJOBS, _gvr(rayjob.KIND), {"labels": present}, by_run_id, self.observe_owner),
            (IX_JOBS, _gvr(job.KIND), {"labels": present, "when": not_child}, by_run_id, self.observe_owner),
            (IX_WORKLOADS, ("kueue.x-k8s.io", "workloads"), {},
             lambda body, **_: ({uid: dict(body)} if (uid := rc.workload_owner_uid(dict(body))) else None),
             self.observe_workload),
            (IX_PODS, ("", "v1", "pods"), {"labels": present}, by_run_id, self.observe_pod),
            (IX_CLUSTERS, _gvr(raycluster.KIND), {"labels": present}, by_run_id, self.observe_child),
            (IX_CHILD_JOBS, _gvr(job.KIND), {"labels": present, "when": child}, by_run_id, self.observe_child),
            (IX_NODES, ("", "v1", "nodes"), {},
             lambda body, **_: {_name(dict(body)): _trim_node(dict(body))}, self.observe_node),
        )
        for ix_id, resource, filters, indexer, observe in specs:
            kopf.index(*resource, registry=registry, id=ix_id, **filters)(indexer)

            def handler(type: str | None, body: Any, _observe: Callable = observe, **kwargs: Any) -> None:
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

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and the poll loop on the running event loop."""
        self._stopping = False
        self._wake = asyncio.Event()
        self._tasks = [asyncio.create_task(self._worker(), name="recorder-worker"),
                       asyncio.create_task(self._poller(), name="recorder-poller")]
        if self._dirty:
            self._wake.set()

    async def stop(self) -> None:
        """Stop the poller and the worker; a reconcile in progress finishes first (its thread
        cannot be interrupted, and a second recorder must never write the same record at once)."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        for t in self._tasks:
            if t.get_name() == "recorder-poller":
                t.cancel()
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, timeout=30)
            except (TimeoutError, asyncio.CancelledError, Exception):
                pass
        self._tasks = []

    # -- observation (called from watch handlers on the event loop; cheap, no I/O) ---------------
    def _entry(self, run_id: str, namespace: str) -> RunEntry:
        e = self.runs.get(run_id)
        if e is None:
            e = self.runs[run_id] = RunEntry(run_id, namespace)
        return e

    def mark(self, run_id: str) -> None:
        """Queue a run for reconciling."""
        self._dirty[run_id] = None
        if self._wake is not None:
            self._wake.set()

    def observe_owner(self, event_type: str | None, obj: dict) -> None:
        """A RayJob or Job event (``event_type`` ``None``/ADDED/MODIFIED/DELETED)."""
        rid = _run_id(obj)
        if rid is None or (obj.get("kind") == "Job" and _is_child_job(obj)):
            return
        self._entry(rid, _ns(obj))
        uid = _uid(obj)
        if uid:
            self.by_uid[uid] = rid  # for its Workloads' events; binding is the reconcile's
        self.mark(rid)

    def observe_child(self, event_type: str | None, obj: dict) -> None:
        """A RayCluster or KubeRay submitter Job event: its run is marked (membership is decided
        on reconcile, from the ownerReference chain)."""
        rid = _run_id(obj)
        if rid is not None:
            self._entry(rid, _ns(obj))
            self.mark(rid)

    def observe_workload(self, event_type: str | None, obj: dict) -> None:
        """A Kueue Workload event: the run of its owner (known once the owner was seen) is marked."""
        uid = rc.workload_owner_uid(obj)
        rid = self.by_uid.get(uid or "")
        if rid is not None:
            self.mark(rid)

    def observe_pod(self, event_type: str | None, obj: dict) -> None:
        """A Pod event: its termination records are kept at once (a DELETED event carries the
        pod's last state, so a failure is never lost to the pod's deletion)."""
        rid = _run_id(obj)
        if rid is None:
            return
        e = self._entry(rid, _ns(obj))
        for f in rc.pod_terminations(obj):
            e.pending_failures.setdefault(f["key"], (f, members.controller_uid(obj)))
        self.mark(rid)

    def observe_node(self, event_type: str | None, obj: dict) -> None:
        """A Node event that changed its conditions: runs with a pod on that node are marked."""
        name = _name(obj)
        trimmed = None if event_type == "DELETED" else _trim_node(obj)
        if self._nodes_seen.get(name) == trimmed:
            return  # a kubelet heartbeat, nothing the recorder reads changed
        self._nodes_seen[name] = trimmed
        pods = self.indices.get(IX_PODS)
        if pods is None:
            return
        for rid, e in self.runs.items():
            if not e.final and any((p.get("spec") or {}).get("nodeName") == name for p in pods.get(rid, ())):
                self.mark(rid)

    def snapshot(self, e: RunEntry) -> Snapshot:
        """The run's objects from kopf's indices (call on the event loop)."""
        ix = self.indices
        roots = [o for k in (IX_RAYJOBS, IX_JOBS) if k in ix for o in ix[k].get(e.run_id, ())]
        owner, intruders = members.choose_owner(roots, e.owner_uid)
        if owner is not None and e.owner_uid is None:
            e.owner_uid = _uid(owner)  # the run is bound to its first root (the worker checks the evidence)
        uid = e.owner_uid
        children = [o for k in (IX_CLUSTERS, IX_CHILD_JOBS) if k in ix for o in ix[k].get(e.run_id, ())]
        e.member_uids |= members.members(uid, children)
        pods, strays = members.run_pods(ix[IX_PODS].get(e.run_id, ()) if IX_PODS in ix else (), frozenset(e.member_uids))
        for other in [*intruders, *strays]:
            other_uid = _uid(other) or ""
            if other_uid not in e.ignored:
                e.ignored.add(other_uid)
                log.warning("run %s: %s %s/%s (uid %s) carries the run-id but is not the run's (bound to uid %s); "
                            "it is not recorded", e.run_id, other.get("kind") or "Pod", _ns(other), _name(other),
                            other_uid, uid)
        workloads = list(ix[IX_WORKLOADS].get(uid, ())) if IX_WORKLOADS in ix and uid else []
        nodes: dict[str, dict] = {}
        if IX_NODES in ix:
            for n in {(p.get("spec") or {}).get("nodeName") for p in pods} - {None}:
                found = list(ix[IX_NODES].get(n, ()))
                if found:
                    nodes[n] = found[0]
        failures = {k: f for k, (f, ctl) in e.pending_failures.items() if ctl in e.member_uids}
        return Snapshot(owner=owner, pods=pods, workloads=workloads, pending_failures=failures,
                        nodes=nodes, workload_names=sorted(_name(w) for w in workloads))

    # -- the worker ----------------------------------------------------------------------------
    async def _poller(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            for rid, e in list(self.runs.items()):
                if not e.final:
                    self.mark(rid)

    async def _worker(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty and not self._stopping:
                rid = next(iter(self._dirty))
                del self._dirty[rid]
                try:
                    await self.reconcile(rid)
                except asyncio.CancelledError:
                    raise
                except Exception as ex:  # one run's trouble never stops the others
                    msg = f"run {rid}: {type(ex).__name__}: {ex}"
                    self.errors.append(msg)
                    log.exception("recorder: %s", msg)

    async def reconcile(self, run_id: str) -> None:
        """Re-derive one run, append what changed to its evidence, update its TauRun."""
        e = self.runs.get(run_id)
        if e is None or e.final:
            return
        snap = self.snapshot(e)
        if await asyncio.to_thread(self._reconcile_sync, e, snap):
            await asyncio.to_thread(self._reconcile_sync, e, self.snapshot(e))  # rebound to the evidence's root

    # -- the reconcile step (runs in a worker thread; one run at a time) ------------------------
    def _reconcile_sync(self, e: RunEntry, snap: Snapshot) -> bool:
        """Reconcile one run from ``snap``; True when the snapshot was taken for the wrong root
        (the evidence binds the run to another uid) and must be taken again."""
        now = self.clock()
        rec = self.store.load(e.run_id)
        if not rec.has("run"):
            if snap.owner is None:
                return False  # nothing to record until the run's object is seen
        state = rec.state()
        bound = (state.get("object") or {}).get("uid") if isinstance(state.get("object"), dict) else None
        if bound and bound != e.owner_uid:
            # after a restart: the evidence says which root the run is bound to; look again
            e.owner_uid, e.member_uids = bound, set()
            return True
        if state.get("final"):
            e.final = True
            return False
        if not e.progress_loaded:
            e.progress_loaded = True
            try:
                existing = self.writer.get(e.namespace, e.run_id)
            except KubeError:
                existing = None
            if existing:
                e.progress = rc.ProgressState.from_wire((existing.get("status") or {}).get("progress"))
        owner, pods, workloads = snap.owner, snap.pods, snap.workloads
        items: list[tuple[str, dict, str]] = []
        t = rc.format_micro(now)

        if not rec.has("run") and owner is not None:
            adm = parse_admission_record(owner, self.settings.admission_key_bytes())
            if not adm.get("trusted"):
                log.warning("run %s: the admission record of %s %s/%s is not trusted: %s", e.run_id, owner.get("kind"),
                            _ns(owner), _name(owner), adm.get("untrusted"))
            items.append(("run", {
                "runId": e.run_id, "namespace": e.namespace, "object": rc.object_ref(owner),
                "admittedObject": trimmed_object(owner), "admission": adm,
                "profile": adm.get("profile"), "profileSetHash": adm.get("profileSetHash"),
                "workspace": adm.get("workspace"), "queue": adm.get("queue"),
            }, t))

        known = rec.failure_keys()
        new_failures = [f for k, f in snap.pending_failures.items() if k not in known]
        for f in new_failures:
            items.append(("failure", f, t))
        failures = [x for x in state.get("failures") or []] + new_failures

        # progress: metrics file first, pod logs otherwise
        workspace = (state.get("workspace") or
                     (parse_admission_record(owner, self.settings.admission_key_bytes()).get("workspace") if owner else None))
        sample = None
        try:
            sample = self.probe.metrics(e.namespace, e.run_id, workspace)
        except OSError:
            sample = None
        if sample is None and self.config.log_pattern and (
                e.last_log_read is None or (now - e.last_log_read).total_seconds() >= self.config.poll_seconds):
            e.last_log_read = now  # one log read per run per poll period, whatever the event rate
            sample = self._log_sample(e, pods)
        e.progress = rc.advance_progress(e.progress, sample, now)

        outcome = rc.owner_outcome(owner)
        prev_conditions = [{k: v for k, v in c.items() if k != "recordedAt"} for c in state.get("conditions") or []]
        # over (owner finished, or deleted): only then are artifact files hashed
        ending = outcome.terminal if outcome is not None else True
        try:
            e.artifacts = self.probe.artifacts(e.namespace, e.run_id, workspace, with_hashes=ending)
        except OSError:
            pass

        view = rc.RunView(run_id=e.run_id, namespace=e.namespace, owner=owner, owner_deleted=owner is None,
                          workloads=workloads, pods=pods, nodes=snap.nodes, failures=failures,
                          progress=e.progress, artifacts=e.artifacts,
                          log_pattern=self.config.log_pattern,
                          metrics_path=self.probe.describe(e.namespace, e.run_id, workspace) or None)
        conditions, transitions = rc.derive(view, prev_conditions, now, self.options)
        for tr in transitions:
            items.append(("condition", tr, t))

        by = {c["type"]: c for c in conditions}
        terminal = by.get(rc.COMPLETED, {}).get("status") == "True" or by.get(rc.FAILED, {}).get("status") == "True"
        if terminal and e.terminal_since is None:
            e.terminal_since = now
        if terminal and e.artifacts is not None:
            listing = {"root": e.artifacts.root, "index": e.artifacts.index, "files": list(e.artifacts.files)}
            if listing != state.get("artifacts") and (e.artifacts.files or e.artifacts.index):
                items.append(("artifacts", listing, t))

        released = all(by.get(x, {}).get("status") == "True" for x in rc.RELEASE_TYPES)
        artifacts_done = by.get(rc.ARTIFACT_SAVED, {}).get("status") == "True" or (
            e.terminal_since is not None and (now - e.terminal_since).total_seconds() >= self.config.artifact_grace_seconds)
        if terminal and released and artifacts_done:
            items.append(("final", {"phase": rc.phase(conditions)}, t))

        if items:
            rec = self.store.append(e.run_id, items)
        state = rec.state()
        self._write_taurun(e, snap, rec, state, conditions)
        if state.get("final"):
            e.final = True
            self.store.forget(e.run_id)  # nothing more will be written: free the cached log
        return False

    def _log_sample(self, e: RunEntry, pods: list[dict]) -> rc.ProgressSample | None:
        """Progress from pod logs: the Ray head pod, else a Job's pods (first running one)."""
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        heads = [p for p in running if ((p.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") == "head"]
        chosen = (heads or running)[:1]
        assert self.config.log_pattern
        for p in chosen:
            try:
                text = self.writer.pod_log(e.namespace, _name(p), None, self.config.log_tail_lines)
            except (ApiException, OSError, ValueError):
                continue
            count, step = rc.parse_log_progress(text or "", self.config.log_pattern)
            if count:
                return rc.ProgressSample({"kind": "Pod", "name": _name(p), "namespace": e.namespace}, count, step)
        return None

    def _write_taurun(self, e: RunEntry, snap: Snapshot, rec: Any, state: dict, conditions: list[dict]) -> None:
        diag = rc.diagnose(conditions, namespace=e.namespace, run_id=e.run_id)
        ref = state.get("object") or {}
        failures = []
        for f in (state.get("failures") or [])[:MAX_FAILURES_IN_STATUS]:
            failures.append({k: v for k, v in f.items() if k in (
                "key", "pod", "podUid", "container", "node", "reason", "exitCode", "signal", "message", "startedAt", "finishedAt")})
        art = e.artifacts
        wl_names = snap.workload_names
        status = {
            "phase": rc.phase(conditions),
            "stage": diag.stage,
            "reason": diag.reason,
            "message": diag.message[:1024],
            "conditions": conditions,
            "workload": wl_names[-1] if wl_names else None,
            "nodes": rc.run_nodes(snap.pods),
            "failures": failures,
            "progress": e.progress.wire() if e.progress else None,
            "artifacts": ({"root": art.root, "index": art.index is not None, "files": len(art.files),
                           "bytes": sum(int(f.get("size") or 0) for f in art.files)} if art else None),
            "evidence": {"path": str(self.store.run_dir(e.run_id)), "events": len(rec.events), "head": rec.head,
                         "keyId": self.store.signer.key_id if self.store.signer else None, "final": bool(state.get("final"))},
        }
        status = {k: v for k, v in status.items() if v is not None}
        if status == e.last_status:
            return
        spec = {"runId": e.run_id, "object": {k: ref.get(k) for k in ("apiVersion", "kind", "name", "namespace", "uid") if ref.get(k)}}
        for k in ("workspace", "queue", "profile", "profileSetHash"):
            if state.get(k):
                spec[k] = state[k]
        meta_labels = {labels.RUN_ID: e.run_id, labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
        if state.get("workspace"):
            meta_labels[labels.WORKSPACE] = str(state["workspace"])
        metadata = {"name": e.run_id, "namespace": e.namespace, "labels": meta_labels}
        self.writer.apply(e.namespace, e.run_id, metadata, spec, status)
        e.last_status = status
