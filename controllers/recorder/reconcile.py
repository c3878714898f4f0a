"""The reconcile step of one run (in a worker thread; one run never in two at once): read the
evidence, the probes and the snapshot, derive the conditions, append what changed, write the TauRun.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from taugate.controllers.recorder.config import RecorderConfig, RunProbe
from taugate.controllers.recorder.evidence.records import EvidenceStore, RunRecord
from taugate.controllers.recorder.index import RunEntry, Snapshot
from taugate.controllers.recorder.objects import name_of, namespace_of, parse_admission_record, trimmed_object
from taugate.controllers.recorder.run.diagnosis import phase
from taugate.controllers.recorder.run.logtails import (
    bound_tail,
    limit_event,
    plan_tails,
    read_is_final,
    tail_event,
    unavailable_event,
    unavailable_reason,
)
from taugate.controllers.recorder.run.merge import derive
from taugate.controllers.recorder.run.outcome import SERVING_KINDS, group_kind, owner_outcome
from taugate.controllers.recorder.run.progress import advance_progress, parse_log_progress
from taugate.controllers.recorder.run.repeat import new_image_ids, resolved_profile, template_images
from taugate.controllers.recorder.run.values import (
    ARTIFACT_SAVED,
    COMPLETED,
    FAILED,
    RELEASE_TYPES,
    DeriveOptions,
    ProgressSample,
    ProgressState,
    RunView,
    format_micro,
    object_ref,
)
from taugate.controllers.recorder.writer import TauRunWriter, taurun_identity, taurun_status
from taugate.kube import KubeError
from taugate.settings import Settings

log = logging.getLogger("taugate.recorder")


class RunReconciler:
    """Reconciles a run from a :class:`Snapshot` (sync; called in a worker thread, several runs at
    once, never one run twice at once).

    ``writer`` writes TauRuns and reads pod logs, ``store`` holds the evidence, ``probe`` reads
    the run's data path (metrics, artifacts), ``clock`` returns the current aware datetime. The
    previous conditions come from the evidence record, so nothing recorded is recorded twice.
    """

    def __init__(self, config: RecorderConfig, settings: Settings, writer: TauRunWriter, store: EvidenceStore,
                 probe: RunProbe, clock: Callable[[], datetime]) -> None:
        self.config = config
        self.settings = settings
        self.writer = writer
        self.store = store
        self.probe = probe
        self.clock = clock
        self.options = DeriveOptions(tuple(settings.gpu_health_conditions), config.stall_seconds)

    def bind(self, e: RunEntry) -> None:
        """Bind ``e`` to the root its evidence names, before its snapshot is taken: after a restart
        the indices may offer another object carrying the run-id first."""
        state = self.store.load(e.run_id).state()
        obj = state.get("object")
        bound = obj.get("uid") if isinstance(obj, dict) and state.get("namespace") == e.namespace else None
        if bound and bound != e.owner_uid:
            e.owner_uid, e.member_uids = bound, set()

    def reconcile(self, e: RunEntry, snap: Snapshot) -> None:
        """Reconcile one run from ``snap`` (taken after ``bind``): append what changed to its
        evidence, update its TauRun."""
        now = self.clock()
        rec = self.store.load(e.run_id)
        if not rec.has("run") and snap.owner is None:
            return  # nothing to record until the run's object is seen
        state = rec.state()
        if rec.has("run") and state.get("namespace") != e.namespace:
            # the run-id's evidence is another namespace's run: this one (a copied label) writes nothing
            if not e.final:
                log.warning("run %s in namespace %s: the run-id is a run of namespace %s; objects carrying it in %s "
                            "are not recorded", e.run_id, e.namespace, state.get("namespace"), e.namespace)
            e.final = True
            return
        if state.get("final"):
            e.final = True
            return
        self._load_progress(e)
        owner = snap.owner
        t = format_micro(now)
        items = self._run_event(e, owner, t) if not rec.has("run") and owner is not None else []
        known = rec.failure_keys()
        new_failures = [f for k, f in snap.pending_failures.items() if k not in known]
        items += [("failure", f, t) for f in new_failures]
        log_items, tails_waiting = self._log_events(e, snap, state, t)
        items += log_items
        digests = new_image_ids(snap.pods, state.get("imageDigests") or {})
        if digests:
            items.append(("images", {"images": digests}, t))

        workspace = state.get("workspace") or (self._admission(owner).get("workspace") if owner else None)
        self._read_probes(e, snap, workspace, now)
        prev_conditions = [{k: v for k, v in c.items() if k != "recordedAt"} for c in state.get("conditions") or []]
        serving = (group_kind(owner) or group_kind(state.get("object"))) in SERVING_KINDS
        view = RunView(run_id=e.run_id, namespace=e.namespace, owner=owner, owner_deleted=owner is None,
                       serving=serving, workloads=snap.workloads, pods=snap.pods, nodes=snap.nodes,
                       failures=[*(state.get("failures") or []), *new_failures],
                       progress=e.progress, artifacts=e.artifacts, log_pattern=self.config.log_pattern,
                       metrics_path=self.probe.describe(e.namespace, e.run_id, workspace) or None)
        conditions, transitions = derive(view, prev_conditions, now, self.options)
        items += [("condition", tr, t) for tr in transitions]
        if not tails_waiting:  # a tail that failed to read is read again before the record closes
            items += self._ending_events(e, conditions, state, now, t)

        if items:
            rec = self.store.append(e.run_id, items)
        state = rec.state()
        self._write_taurun(e, snap, rec, state, conditions)
        if state.get("final"):
            e.final = True
            self.store.forget(e.run_id)  # nothing more will be written: free the cached log

    def _admission(self, owner: dict) -> dict:
        return parse_admission_record(owner, self.settings.admission_key_bytes())

    def _load_progress(self, e: RunEntry) -> None:
        """Once per run per process: the progress already recorded in its TauRun (the stall clock
        survives a restart)."""
        if e.progress_loaded:
            return
        e.progress_loaded = True
        try:
            existing = self.writer.get(e.namespace, e.run_id)
        except KubeError:
            existing = None
        if existing:
            e.progress = ProgressState.from_wire((existing.get("status") or {}).get("progress"))

    def _run_event(self, e: RunEntry, owner: dict, t: str) -> list[tuple[str, dict, str]]:
        """The ``run`` event: the root object as admitted and its admission record (kept only
        when trusted; the workspace, profile and queue fall back to the labels), and what
        repeating it takes: its pod templates' images and the profile as the TauCluster's
        status resolves it now (``run.repeat``)."""
        adm = self._admission(owner)
        if not adm.get("trusted"):
            log.warning("run %s: the admission record of %s %s/%s is not trusted: %s", e.run_id, owner.get("kind"),
                        namespace_of(owner), name_of(owner), adm.get("untrusted"))
        data = {
            "runId": e.run_id, "namespace": e.namespace, "object": object_ref(owner),
            "admittedObject": trimmed_object(owner), "admission": adm,
            "profile": adm.get("profile"), "profileSetHash": adm.get("profileSetHash"),
            "workspace": adm.get("workspace"), "queue": adm.get("queue"),
            "images": template_images(owner),
        }
        if adm.get("profile"):
            try:
                cluster, why = self.writer.tau_cluster(), None
            except KubeError as ex:
                cluster, why = None, f"cannot read the TauCluster: {ex.status} {ex}"
            profile = resolved_profile(cluster, adm.get("profile"), adm.get("profileSetHash"))
            if profile is not None and why:
                profile["unavailable"] = why
            data["resolvedProfile"] = profile
        return [("run", data, t)]

    def _log_events(self, e: RunEntry, snap: Snapshot, state: dict, t: str) -> tuple[list[tuple[str, dict, str]], bool]:
        """The ``log`` events of the run's ended container instances not recorded yet
        (``run.logtails.plan_tails``): each tail read now (the last ``evidence_log_lines`` lines
        within ``evidence_log_bytes``), or recorded unavailable (its pod deleted, or a read the
        API refused for good, or ``evidence_log_attempts`` failed reads); a ``logs-limit`` event
        once the run reaches ``evidence_log_pods``. Also returns whether a read failed and will
        be tried again."""
        cfg = self.config
        plan = plan_tails(snap.pending_logs, state.get("logs") or [], cfg.evidence_log_pods,
                          limit_recorded=bool(state.get("logsLimit")))
        items = [("log", unavailable_event(g, "PodDeleted", "the pod was deleted before its log was read"), t)
                 for g in plan.gone]
        waiting = False
        for target in plan.read:
            try:
                # one line more than kept: more than evidence_log_lines lines says the log was longer
                text = self.writer.pod_log(e.namespace, target.pod, target.container, cfg.evidence_log_lines + 1,
                                           target.previous)
            except (KubeError, OSError, ValueError) as ex:
                status = ex.status if isinstance(ex, KubeError) else None
                attempts = e.log_attempts[target.key] = e.log_attempts.get(target.key, 0) + 1
                if read_is_final(status) or attempts >= cfg.evidence_log_attempts:
                    items.append(("log", unavailable_event(target, unavailable_reason(status),
                                                           f"{status or type(ex).__name__}: {ex}"), t))
                else:
                    waiting = True
                    log.info("run %s: the log of pod %s container %s could not be read (%s); reading it again",
                             e.run_id, target.pod, target.container, ex)
                continue
            tail = bound_tail(text, cfg.evidence_log_lines, cfg.evidence_log_bytes)
            items.append(("log", tail_event(target, tail, max_lines=cfg.evidence_log_lines,
                                            max_bytes=cfg.evidence_log_bytes), t))
        if plan.first_omitted is not None:
            items.append(("logs-limit", limit_event(cfg.evidence_log_pods, plan.first_omitted), t))
        return items, waiting

    def _read_probes(self, e: RunEntry, snap: Snapshot, workspace: str | None, now: datetime) -> None:
        """Advance ``e.progress`` (the metrics file first, pod logs otherwise, read at most once
        per poll period) and list ``e.artifacts`` (hashing files only once the run is over)."""
        sample = None
        try:
            sample = self.probe.metrics(e.namespace, e.run_id, workspace)
        except OSError:
            sample = None
        if sample is None and self.config.log_pattern and (
                e.last_log_read is None or (now - e.last_log_read).total_seconds() >= self.config.poll_seconds):
            e.last_log_read = now  # one log read per run per poll period, whatever the event rate
            sample = self._log_sample(e, snap.pods)
        e.progress = advance_progress(e.progress, sample, now)
        outcome = owner_outcome(snap.owner)
        # over (owner finished, or deleted): only then are artifact files hashed
        ending = outcome.terminal if outcome is not None else True
        with contextlib.suppress(OSError):
            e.artifacts = self.probe.artifacts(e.namespace, e.run_id, workspace, with_hashes=ending)

    def _ending_events(self, e: RunEntry, conditions: list[dict], state: dict, now: datetime,
                       t: str) -> list[tuple[str, dict, str]]:
        """Once the run ended: the ``artifacts`` event when the listing changed, and ``final``
        when both release lines are True and the artifacts are saved (or their grace is over)."""
        by = {c["type"]: c for c in conditions}
        terminal = by.get(COMPLETED, {}).get("status") == "True" or by.get(FAILED, {}).get("status") == "True"
        if not terminal:
            return []
        items: list[tuple[str, dict, str]] = []
        if e.terminal_since is None:
            e.terminal_since = now
        if e.artifacts is not None:
            listing = {"root": e.artifacts.root, "index": e.artifacts.index, "files": list(e.artifacts.files)}
            if listing != state.get("artifacts") and (e.artifacts.files or e.artifacts.index):
                items.append(("artifacts", listing, t))
        released = all(by.get(x, {}).get("status") == "True" for x in RELEASE_TYPES)
        waited = (now - e.terminal_since).total_seconds() >= self.config.artifact_grace_seconds
        if released and (by.get(ARTIFACT_SAVED, {}).get("status") == "True" or waited):
            items.append(("final", {"phase": phase(conditions)}, t))
        return items

    def _log_sample(self, e: RunEntry, pods: list[dict]) -> ProgressSample | None:
        """Progress from pod logs: the Ray head pod, else a Job's pods (first running one)."""
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        heads = [p for p in running
                 if ((p.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") == "head"]
        chosen = (heads or running)[:1]
        assert self.config.log_pattern
        for p in chosen:
            try:
                text = self.writer.pod_log(e.namespace, name_of(p), None, self.config.log_tail_lines)
            except (KubeError, OSError, ValueError):
                continue
            count, step = parse_log_progress(text or "", self.config.log_pattern)
            if count:
                return ProgressSample({"kind": "Pod", "name": name_of(p), "namespace": e.namespace}, count, step)
        return None

    def _write_taurun(self, e: RunEntry, snap: Snapshot, rec: RunRecord, state: dict, conditions: list[dict]) -> None:
        status = taurun_status(e, snap, rec, state, conditions, self.store)
        if status == e.last_status:
            return
        metadata, spec = taurun_identity(e, state)
        self.writer.apply(e.namespace, e.run_id, metadata, spec, status)
        e.last_status = status
