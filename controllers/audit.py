"""The operator's background audit (ARCHITECTURE.md section 4): every governed workload in the
workspace namespaces judged by the current policy set, written as PolicyReports, only what changed.
A failed audit (API error, a bug) is logged, counted and tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge

from taugate import labels, logs
from taugate.access import namespace_of
from taugate.kubeaccess import KubeError
from taugate.policy_report import (
    CLUSTER_POLICY_REPORTS,
    POLICY_REPORTS,
    REPORT_NAME,
    Auditor,
    Reports,
    WorkloadAudit,
    build_reports,
    merge_patch,
    report_changed,
    workload_resources,
)
from taugate.settings import Settings
from taugate.snapshot import ClusterState, build_state
from taugate.state_objects import STATE_RESOURCES, trim, usable_objects
from taugate.workqueue import WorkQueue, cancel

log = logging.getLogger("taugate.audit")


@dataclass
class AuditOptions:
    """``auditor`` judges the workloads (the webhook's ``PolicyAuditor``, given by the CLI);
    ``metrics_port``: serve the metrics on this port (None: not served; the registry is
    ``AuditLoop.metrics.registry`` either way)."""

    auditor: Auditor
    interval_seconds: float = 300.0
    poll_seconds: float = 5.0
    page_size: int = 500
    metrics_port: int | None = None


class AuditMetrics:
    """The audit's Prometheus metrics (docs/metrics.md), in their own registry; a policy's
    ``taugate_audit_violations`` series drops to 0 when its violations are fixed."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.violations = Gauge("taugate_audit_violations", "Violations found by the last audit",
                                ("policy", "action"), registry=r)
        self.workloads = Gauge("taugate_audit_workloads", "Workloads judged by the last audit", registry=r)
        self.runs = Counter("taugate_audit_runs", "Audits run", ("outcome",), registry=r)
        self.writes = Counter("taugate_audit_report_writes", "PolicyReport writes", ("verb",), registry=r)
        self.last_run = Gauge("taugate_audit_last_run_timestamp_seconds", "When the last audit ended", registry=r)
        self.duration = Gauge("taugate_audit_duration_seconds", "How long the last audit took", registry=r)
        self._seen: set[tuple[str, str]] = set()

    def observe(self, audits: list[WorkloadAudit], seconds: float) -> None:
        """Set the gauges from one audit's results."""
        counts: dict[tuple[str, str], int] = {}
        for a in audits:
            for v in a.violations:
                counts[(v.policy, v.action)] = counts.get((v.policy, v.action), 0) + 1
            for policy, _ in a.errors:
                counts[(policy, "error")] = counts.get((policy, "error"), 0) + 1
        for key in self._seen | set(counts):
            self.violations.labels(*key).set(counts.get(key, 0))
        self._seen |= set(counts)
        self.workloads.set(len(audits))
        self.last_run.set(time.time())
        self.duration.set(seconds)


class AuditStopped(Exception):
    """The operator is stopping: the audit ends before its next request (``AuditLoop.stop``)."""


def _go_on() -> None:
    """The default of ``go_on``: never stops."""


def read_cluster(kube: Any, settings: Settings, *, page_size: int = 500,
                 go_on: Callable[[], None] = _go_on) -> tuple[ClusterState, list[dict]]:
    """The cluster state and every governed workload in the workspace namespaces. Each kind is
    listed across the cluster in pages, as Gatekeeper's audit lists each kind
    (``--audit-chunk-size``), and only the workspaces' objects are kept, page by page: a request
    per page of a kind, not one per workspace and kind (5,500 at 500 workspaces, minutes on a busy
    API server). A resource the cluster does not serve (HTTP 404: its operator is not installed)
    has no workloads. ``go_on`` is called before each page (it raises to stop). Raises
    ``KubeError``."""
    state_objects: list[dict] = []
    for res in STATE_RESOURCES:
        state_objects += [trim(res, o) for o in _pages(kube, res, page_size, go_on)]
    usable, _ = usable_objects(state_objects, settings.system_namespace)
    state = build_state(usable, settings, source="the API")
    workloads: list[dict] = []
    for res in workload_resources():
        workloads += _pages(kube, res, page_size, go_on, keep=lambda o: namespace_of(o) in state.workspaces)
    return state, workloads


def _pages(kube: Any, res: Any, page_size: int, go_on: Callable[[], None],
           keep: Callable[[dict], bool] = lambda _: True) -> list[dict]:
    """The objects of ``res`` across the cluster that ``keep`` keeps, ``go_on()`` before each
    page; none when the cluster does not serve it (HTTP 404)."""
    out: list[dict] = []
    try:
        go_on()
        for page in kube.list_pages(res, limit=page_size):
            out += [o for o in page if keep(o)]
            go_on()
    except KubeError as e:
        if e.status != 404:
            raise
        return []
    return out


def write_reports(kube: Any, reports: Reports, go_on: Callable[[], None] = _go_on) -> dict[str, int]:
    """Write only what differs; returns the writes by verb. Only taugate's own reports (named
    ``REPORT_NAME``, labelled as taugate's) are touched; those of namespaces with no workload left
    are deleted. ``go_on`` is called before each write (it raises to stop)."""
    writes = {"create": 0, "patch": 0, "delete": 0, "none": 0}
    mine = {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    stored = {str(namespace_of(r) or ""): r for r in kube.list(POLICY_REPORTS, labels=mine)
              if (r.get("metadata") or {}).get("name") == REPORT_NAME}
    for ns, desired in reports.namespaced.items():
        go_on()
        writes[_write(kube, POLICY_REPORTS, stored.get(ns), desired, ns)] += 1
    for ns in sorted(set(stored) - set(reports.namespaced)):
        go_on()
        kube.delete(POLICY_REPORTS, REPORT_NAME, ns)
        writes["delete"] += 1
    go_on()
    current = kube.get(CLUSTER_POLICY_REPORTS, REPORT_NAME)
    writes[_write(kube, CLUSTER_POLICY_REPORTS, current, reports.cluster, None)] += 1
    writes.pop("none", None)
    return writes


def _write(kube: Any, res: Any, current: dict | None, desired: dict, namespace: str | None) -> str:
    if current is None:
        kube.create(res, desired)
        return "create"
    if report_changed(current, desired):
        kube.patch(res, REPORT_NAME, merge_patch(current, desired), namespace)
        return "patch"
    return "none"


AUDIT_KEY = "audit"


class ProfileSetNotResolved(Exception):
    """The TauCluster's profile set is not resolved by the operator yet (its status hash is not its
    spec's, or there is no TauCluster): an audit now would report every GPU workload as failing
    ``workload-profile`` for a moment of the operator's, not for anything the workloads did."""


@dataclass
class AuditLoop:
    """``run_once`` (synchronous, one audit), ``run`` (the loop, on the event loop, audits in a
    thread) and ``register`` (start and stop it with kopf)."""

    kube: Any
    settings: Settings
    options: AuditOptions
    metrics: AuditMetrics = field(default_factory=AuditMetrics)
    audited_digest: str | None = None
    runs: int = 0
    task: asyncio.Task | None = None
    queue: WorkQueue = field(default_factory=WorkQueue)
    due: float = 0.0  # time.monotonic() of the next audit by the interval
    waiting_since: float | None = None  # time.monotonic() the audit began waiting for the profile set
    stopping: threading.Event = field(default_factory=threading.Event)
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="taugate-audit"))
    """The audit's thread: ``stop`` waits for it (a leader releases its Lease after its last write),
    and a fleet's audit takes minutes, so it is asked to stop between its requests."""

    def run_once(self) -> Reports:
        """One audit: read, judge, write what changed, set the metrics. Raises ``KubeError``, and
        ``AuditStopped`` once ``stop`` began (checked before every request and every workload)."""
        start = time.monotonic()
        auditor = self.options.auditor
        digest = auditor.digest
        go_on = self._go_on
        state, workloads = read_cluster(self.kube, self.settings, page_size=self.options.page_size, go_on=go_on)
        if state.profile_set_problem and self._may_wait(start):
            raise ProfileSetNotResolved(state.profile_set_problem)
        self.waiting_since = None
        audits = auditor.audit(workloads, state, go_on=go_on)
        reports = build_reports(audits, digest=digest)
        for verb, n in write_reports(self.kube, reports, go_on).items():
            if n:
                self.metrics.writes.labels(verb).inc(n)
        seconds = time.monotonic() - start
        self.metrics.observe(audits, seconds)
        self.audited_digest, self.runs = digest, self.runs + 1
        log.info("audit: %d workload(s) in %d namespace(s), %d failing, %d warning result(s) (policy set %s) "
                 "in %.1f s", len(audits), len(reports.namespaced), reports.cluster["summary"]["fail"],
                 reports.cluster["summary"]["warn"], digest[:12], seconds)
        return reports

    def _go_on(self) -> None:
        if self.stopping.is_set():
            raise AuditStopped("the operator is stopping")

    def _may_wait(self, now: float) -> bool:
        """Wait for the operator to resolve the profile set (after a restart, a profile change),
        at most one interval: a set that stays unresolved is what admission refuses on, and the
        reports then say so."""
        if self.waiting_since is None:
            self.waiting_since = now
        return now - self.waiting_since < self.options.interval_seconds

    async def _audit(self) -> bool:
        """One audit in a thread; False when it waits for the profile set (tried again at the next
        poll, reports left as they are)."""
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.run_once)
        except ProfileSetNotResolved as e:
            self.metrics.runs.labels("deferred").inc()
            log.info("audit deferred until the operator resolves the profile set (at most %.0f s): %s",
                     self.options.interval_seconds, e)
            return False
        except AuditStopped:
            return True
        except (KubeError, OSError, ValueError) as e:
            self.metrics.runs.labels("failed").inc()
            log.warning("audit failed (retried in %.0f s): %s", self.options.interval_seconds, e)
        except Exception:  # a bug must not stop the loop; counted and retried like an API error
            self.metrics.runs.labels("failed").inc()
            log.exception("audit crashed")
        else:
            self.metrics.runs.labels("ok").inc()
        return True

    async def run(self) -> None:
        """Audit now, then whenever ``interval_seconds`` passed or the policy digest changed
        (checked every ``poll_seconds``): one queue key, handled and added again."""
        self.due = 0.0
        self.queue.add(AUDIT_KEY)
        await self.queue.run(self._tick)

    async def _tick(self, _key: object) -> None:
        try:
            await asyncio.to_thread(self.options.auditor.check_for_changes)
        except Exception:  # a reload's failure keeps the active set (PolicyStore); never stops the loop
            log.exception("policy reload check failed")
        if time.monotonic() >= self.due or self.options.auditor.digest != self.audited_digest:
            done = await self._audit()
            self.due = time.monotonic() + (self.options.interval_seconds if done else self.options.poll_seconds)
        self.queue.add(AUDIT_KEY, min(self.options.poll_seconds, max(0.0, self.due - time.monotonic())))

    async def stop(self) -> None:
        """Stop the loop and wait for an audit in its thread, which ends before its next request
        (the one in flight is bounded by the client's timeout): nothing is written after this
        returns."""
        self.stopping.set()
        task, self.task = self.task, None
        await cancel(task)
        await asyncio.to_thread(self.executor.shutdown, True)

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Start the loop with kopf (and the metrics server, when a port is set); stop it at exit."""

        @kopf.on.startup(registry=registry)
        async def _start_audit(**_: Any) -> None:
            if self.options.metrics_port is not None:
                from prometheus_client import start_http_server

                start_http_server(self.options.metrics_port, registry=self.metrics.registry)
            self.task = asyncio.create_task(self.run(), name="taugate-audit")

        @kopf.on.cleanup(registry=registry)
        async def _stop_audit(**_: Any) -> None:
            with logs.timed(log, "stopped the audit"):
                await self.stop()
