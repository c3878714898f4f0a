"""The operator: a kopf operator whose ``on.event`` handlers only enqueue keys into one
``WorkQueue``; ``OperatorOptions.workers`` workers reconcile them (level-triggered, like
controller-runtime, never one key by two at once), retrying with backoff (1 s doubling to 60 s)
and resyncing every key. The recorder runs beside it in a process of its own
(``controllers/beside.py``). An event wakes anything only when it
changes what the controllers read (``relevant``). kopf never patches the objects (no kopf
annotations or finalizers); kopf's peering is off and CRD scanning too (restart after installing
Kueue). With ``OperatorOptions.leader`` (``taugate operator --leader-elect``) a replica stands by
until it holds the Lease (``controllers/leader.py``): only then does it build its clients and
start kopf, the recorder and the audit; it exits at once when it loses the Lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf
import kubernetes.client
from pydantic import ValidationError

from taugate import admission_policy, labels, logs
from taugate.controllers import resources as R
from taugate.controllers.admission_policy import reconcile_admission_policy
from taugate.controllers.kopf_startup import (
    quiet_routine_handler_lines,
    register_connection,
    wake_waiters_only_on_change,
)
from taugate.controllers.taugrid.cluster import reconcile_cluster
from taugate.controllers.taugrid.quotarequest import reconcile_quota_request
from taugate.controllers.taugrid.workspace import reconcile_workspace
from taugate.kube import Kube, KubeError
from taugate.kubeaccess import VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS
from taugate.models import TauWorkspace, WorkspaceDefaults
from taugate.settings import Settings
from taugate.workqueue import WorkQueue, cancel

log = logging.getLogger("taugate.operator")


Key = tuple[str, str, str]
CLUSTER_KEY: Key = ("cluster", "", R.CLUSTER_NAME)
RESYNC_KEY: Key = ("resync", "", "")
POLICY_KEY: Key = ("admission-policy", "", admission_policy.NAME)


@dataclass
class OperatorOptions:
    """``resync_seconds``: every key is reconciled at least this often; ``debounce_seconds``: how
    long a new key waits for more events; ``max_backoff_seconds``: the retry delay's cap;
    ``liveness_endpoint``: kopf's health endpoint (e.g. ``http://0.0.0.0:8080/healthz``);
    ``test_mode``: kopf settings for tests (short batching, no Kubernetes events posted);
    ``workers``: reconciles run at once, each key by one at a time (``taugate.workqueue``), in
    the controller's own threads: a fleet's cold start is hundreds of workspaces of about ten
    requests each, which one worker did at 0.7 per second at 5,000 nodes (docs/performance.md).
    """

    resync_seconds: float = 300.0
    workers: int = 4
    debounce_seconds: float = 0.5
    max_backoff_seconds: float = 60.0
    liveness_endpoint: str | None = None
    test_mode: bool = False
    recorder: Any = None  # a controllers.recorder.config.RecorderConfig: also run the run recorder
    audit: Any = None  # a controllers.audit.AuditOptions: also run the background audit (PolicyReports)
    leader: Any = None  # a controllers.leader.LeaderElection (namespace and identity set): act only as its leader


@dataclass
class Controller:
    """The reconcile dispatcher behind the kopf handlers (holds the queue and what it knows of
    workspaces and quota requests, to fan events out)."""

    kube: Kube
    settings: Settings
    options: OperatorOptions
    queue: WorkQueue = field(default_factory=WorkQueue)
    workspaces: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, name) -> target namespace
    quota_requests: set[tuple[str, str]] = field(default_factory=set)
    failures: dict[Hashable, int] = field(default_factory=dict)
    reconciles: int = 0
    errors: int = 0
    task: asyncio.Task | None = None
    seen: dict[tuple[str, str, str], str] = field(default_factory=dict)  # what each watched object last meant
    default_queue: str | None = None
    """The TauCluster's ``workspaceDefaults.defaultQueue`` as its last event said (None before the
    first: a workspace reconcile reads the TauCluster then)."""
    audit: Any = None  # the controllers.audit.AuditLoop, when the audit runs
    executor: ThreadPoolExecutor | None = None
    """The reconciles' threads (``options.workers``), apart from the event loop's default executor
    that the audit uses (the recorder's workers use their own loop's); made by ``run``."""

    def enqueue(self, key: Key) -> None:
        self.queue.add(key, self.options.debounce_seconds)

    def changed(self, kind: str, event_type: str | None, body: dict) -> bool:
        """Did this event change what the controllers read (``relevant``)? Status writes, node
        heartbeats and Kueue usage updates do not; the resync repairs anything missed."""
        key = (kind, R.namespace_of(body) or "", R.name_of(body))
        if event_type == "DELETED":
            self.seen.pop(key, None)
            return True
        fp = json.dumps(relevant(kind, body), sort_keys=True, default=str)
        if self.seen.get(key) == fp:
            return False
        self.seen[key] = fp
        return True

    def on_cluster(self, event_type: str | None, body: dict) -> None:
        """Keep the TauCluster's default queue for the workspace reconciles (a GET of a TauCluster
        of hundreds of profiles for each workspace made a fleet's cold start slow), then queue the
        cluster and every workspace: a reconcile already running with the old value runs again
        (``WorkQueue``), so every workspace ends on the new one."""
        self.default_queue = WorkspaceDefaults.default_queue_of(None if event_type == "DELETED" else body)
        self.enqueue(CLUSTER_KEY)
        self.all_workspaces()

    def all_workspaces(self) -> None:
        for ns, name in list(self.workspaces):
            self.enqueue(("workspace", ns, name))

    def all_quota_requests(self) -> None:
        for ns, name in list(self.quota_requests):
            self.enqueue(("quota", ns, name))

    def on_workspace(self, event_type: str | None, body: dict) -> None:
        ns, name = R.namespace_of(body) or "", R.name_of(body)
        if event_type == "DELETED":
            self.workspaces.pop((ns, name), None)
            self.all_workspaces()  # a rival for the same namespace may now proceed
            return
        try:
            target = TauWorkspace.model_validate(body).target_namespace
        except ValidationError:
            target = name
        self.workspaces[(ns, name)] = target
        self.enqueue(("workspace", ns, name))

    def on_quota_request(self, event_type: str | None, body: dict) -> None:
        key = (R.namespace_of(body) or "", R.name_of(body))
        if event_type == "DELETED":
            self.quota_requests.discard(key)
            return
        self.quota_requests.add(key)
        self.enqueue(("quota", *key))

    def on_local_queue(self, body: dict) -> None:
        self.enqueue(CLUSTER_KEY)
        self.workspaces_of(R.namespace_of(body) or "")

    def workspaces_of(self, namespace: str) -> None:
        """Wake the workspaces that target ``namespace`` (its LocalQueue changed, or an admin
        annotated it for adoption, ``tau_admission.adoption_refusal``)."""
        for (wns, wname), target in list(self.workspaces.items()):
            if target == namespace:
                self.enqueue(("workspace", wns, wname))

    def on_cluster_queue(self) -> None:
        self.enqueue(CLUSTER_KEY)
        self.all_workspaces()
        self.all_quota_requests()

    def resync(self) -> None:
        """Queue every known key (drift repair)."""
        self.queue.add(CLUSTER_KEY, 0)
        self.queue.add(POLICY_KEY, 0)
        for ns, name in list(self.workspaces):
            self.queue.add(("workspace", ns, name), 0)
        for ns, name in list(self.quota_requests):
            self.queue.add(("quota", ns, name), 0)

    def reconcile(self, key: Key) -> Any:
        """One reconcile, synchronously (in a worker thread)."""
        kind, ns, name = key
        if kind == "cluster":
            return reconcile_cluster(self.kube, self.settings, name=name)
        if kind == "workspace":
            return reconcile_workspace(self.kube, self.settings, ns, name, default_queue=self.default_queue)
        if kind == "quota":
            return reconcile_quota_request(self.kube, self.settings, ns, name)
        if kind == "admission-policy":
            return reconcile_admission_policy(self.kube, self.settings)
        raise ValueError(f"unknown key {key!r}")

    async def handle(self, key: Hashable) -> None:
        if key == RESYNC_KEY:
            self.resync()
            self.queue.add(RESYNC_KEY, self.options.resync_seconds)
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.reconcile, key)  # type: ignore[arg-type]
        except (KubeError, ValueError, OSError) as e:
            self.errors += 1
            n = self.failures.get(key, 0) + 1
            self.failures[key] = n
            delay = min(self.options.max_backoff_seconds, 2.0 ** (n - 1))
            log.warning("reconcile %s failed (attempt %d, retry in %.0f s): %s", key, n, delay, e)
            self.queue.add(key, delay)
        except Exception:  # a bug must not stop the worker; retried like an API error
            self.errors += 1
            n = self.failures.get(key, 0) + 1
            self.failures[key] = n
            log.exception("reconcile %s crashed (attempt %d)", key, n)
            self.queue.add(key, min(self.options.max_backoff_seconds, 2.0 ** (n - 1)))
        else:
            self.reconciles += 1
            self.failures.pop(key, None)

    async def run(self) -> None:
        """The workers, resyncing every ``resync_seconds`` (until cancelled)."""
        workers = max(1, self.options.workers)
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="taugate-reconcile")
        self.queue.add(POLICY_KEY, 0)
        self.queue.add(RESYNC_KEY, self.options.resync_seconds)
        await self.queue.run(self.handle, workers)

    async def stop(self) -> None:
        """Stop the workers and wait for the reconciles still running in their threads (a leader
        releases its Lease only after its last write)."""
        task, self.task = self.task, None
        await cancel(task)
        if self.executor is not None:
            await asyncio.to_thread(self.executor.shutdown, True)


def relevant(kind: str, body: dict) -> Any:
    """What the controllers read of a watched object: for Nodes the labels, allocatable GPUs,
    condition types/statuses and ``unschedulable`` (not heartbeats); for Kueue objects and
    taugate's kinds everything but ``status`` and server bookkeeping."""
    meta = body.get("metadata") or {}
    if kind == "Node":
        status = body.get("status") or {}
        return [meta.get("labels"), (status.get("allocatable") or {}).get(labels.GPU_RESOURCE),
                sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or [] if isinstance(c, dict)),
                (body.get("spec") or {}).get("unschedulable")]
    keep_meta = {k: v for k, v in meta.items()
                 if k not in ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp")}
    return [keep_meta, {k: v for k, v in body.items() if k not in ("metadata", "status")}]


def build_registry(ctl: Controller, cfg: kubernetes.client.Configuration) -> kopf.OperatorRegistry:
    """Login, settings, and the ``on.event`` handlers that feed ``ctl``."""
    registry = kopf.OperatorRegistry()
    _register_lifecycle(registry, ctl, cfg)
    _register_events(registry, ctl)
    _register_inventory_events(registry, ctl)
    return registry


def _register_lifecycle(registry: kopf.OperatorRegistry, ctl: Controller,
                        cfg: kubernetes.client.Configuration) -> None:
    """Login with ``cfg``, kopf's settings, and the worker started and stopped with kopf."""
    register_connection(registry, cfg, ctl.options.test_mode)

    @kopf.on.startup(registry=registry)
    async def _first_key(**_: Any) -> None:
        ctl.enqueue(CLUSTER_KEY)

    @kopf.on.startup(registry=registry)
    async def _start_worker(**_: Any) -> None:
        # Started and stopped inside kopf's lifecycle, so kopf does not count it as a hung task.
        ctl.task = asyncio.create_task(ctl.run(), name="taugate-reconciler")

    @kopf.on.cleanup(registry=registry)
    async def _stop_worker(**_: Any) -> None:
        with logs.timed(log, "stopped the reconciles"):
            await ctl.stop()


def _register_events(registry: kopf.OperatorRegistry, ctl: Controller) -> None:
    """The ``on.event`` handlers of taugate's own kinds. Every handler is a coroutine: kopf runs a
    plain function in a thread pool (kopf ``_core/actions/invocation.py`` ``invoke``), and these
    share the controller's dicts and its ``WorkQueue`` (one event loop's) with the loop."""
    system_ns = ctl.settings.system_namespace

    def in_system_namespace(namespace: str | None, **_: Any) -> bool:
        return namespace == system_ns

    @kopf.on.event(R.TAU_CLUSTERS.group, R.TAU_CLUSTERS.version, R.TAU_CLUSTERS.plural, registry=registry,
                   when=lambda name, **_: name == R.CLUSTER_NAME)
    async def _cluster(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("TauCluster", type, dict(body)):
            ctl.on_cluster(type, dict(body))

    @kopf.on.event(R.TAU_WORKSPACES.group, R.TAU_WORKSPACES.version, R.TAU_WORKSPACES.plural, registry=registry,
                   when=in_system_namespace)
    async def _workspace(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("TauWorkspace", type, dict(body)):
            ctl.on_workspace(type, dict(body))

    def ours(name: str | None, **_: Any) -> bool:
        return name == admission_policy.NAME

    @kopf.on.event(VALIDATING_ADMISSION_POLICIES.group, VALIDATING_ADMISSION_POLICIES.version,
                   VALIDATING_ADMISSION_POLICIES.plural, registry=registry, when=ours)
    async def _admission_policy(type: str | None, body: kopf.Body, **_: Any) -> None:  # put back when edited
        if ctl.changed("ValidatingAdmissionPolicy", type, dict(body)):
            ctl.enqueue(POLICY_KEY)

    @kopf.on.event(VALIDATING_ADMISSION_POLICY_BINDINGS.group, VALIDATING_ADMISSION_POLICY_BINDINGS.version,
                   VALIDATING_ADMISSION_POLICY_BINDINGS.plural, registry=registry, when=ours)
    async def _admission_policy_binding(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("ValidatingAdmissionPolicyBinding", type, dict(body)):
            ctl.enqueue(POLICY_KEY)

    @kopf.on.event(R.TAU_PROFILE_PLACEMENTS.group, R.TAU_PROFILE_PLACEMENTS.version, R.TAU_PROFILE_PLACEMENTS.plural,
                   registry=registry, when=ours)
    async def _policy_parameter(type: str | None, body: kopf.Body, **_: Any) -> None:  # put back when edited or deleted
        if ctl.changed("TauProfilePlacement", type, dict(body)):
            ctl.enqueue(CLUSTER_KEY)  # the TauCluster's reconcile writes it

    @kopf.on.event(R.TAU_QUOTA_REQUESTS.group, R.TAU_QUOTA_REQUESTS.version, R.TAU_QUOTA_REQUESTS.plural,
                   registry=registry, when=in_system_namespace)
    async def _quota(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("TauQuotaRequest", type, dict(body)):
            ctl.on_quota_request(type, dict(body))


def _register_inventory_events(registry: kopf.OperatorRegistry, ctl: Controller) -> None:
    """Nodes, LocalQueues, ClusterQueues and ResourceFlavors: what profiles are resolved against."""

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def _node(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("Node", type, dict(body)):
            ctl.enqueue(CLUSTER_KEY)

    @kopf.on.event(R.LOCAL_QUEUES.group, R.LOCAL_QUEUES.version, R.LOCAL_QUEUES.plural, registry=registry)
    async def _local_queue(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("LocalQueue", type, dict(body)):
            ctl.on_local_queue(dict(body))

    @kopf.on.event("", "v1", "namespaces", registry=registry)
    async def _namespace(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("Namespace", type, dict(body)):
            ctl.workspaces_of(R.name_of(dict(body)))

    @kopf.on.event(R.CLUSTER_QUEUES.group, R.CLUSTER_QUEUES.version, R.CLUSTER_QUEUES.plural, registry=registry)
    async def _cluster_queue(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("ClusterQueue", type, dict(body)):
            ctl.on_cluster_queue()

    @kopf.on.event(R.RESOURCE_FLAVORS.group, R.RESOURCE_FLAVORS.version, R.RESOURCE_FLAVORS.plural, registry=registry)
    async def _flavor(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("ResourceFlavor", type, dict(body)):
            ctl.enqueue(CLUSTER_KEY)

    @kopf.on.event(R.WORKLOAD_PRIORITY_CLASSES.group, R.WORKLOAD_PRIORITY_CLASSES.version,
                   R.WORKLOAD_PRIORITY_CLASSES.plural, registry=registry)
    async def _priority_class(type: str | None, body: kopf.Body, **_: Any) -> None:
        if ctl.changed("WorkloadPriorityClass", type, dict(body)):
            ctl.enqueue(CLUSTER_KEY)



async def run_operator(cfg: kubernetes.client.Configuration, settings: Settings | None = None,
                       options: OperatorOptions | None = None, *,
                       stop_flag: threading.Event | asyncio.Event | None = None,
                       ready_flag: threading.Event | asyncio.Event | None = None,
                       controller_hook: Callable[[Controller], None] | None = None) -> None:
    """Run the operator until ``stop_flag`` is set (or the task is cancelled); without one, until
    SIGTERM or SIGINT (``stop_on_signals``).

    ``ready_flag`` is set once kopf has started; ``controller_hook`` receives the ``Controller``
    (tests read its counters). With ``options.leader``, stand by first (``stand_by``); the Lease
    is released once everything has stopped, its threads included."""
    settings = settings or Settings()
    options = options or OperatorOptions()
    if stop_flag is None:
        stop_flag = stop_on_signals()
    if options.leader is None:
        await _run(cfg, settings, options, stop_flag, ready_flag, controller_hook)
        return
    elector = await stand_by(cfg, options, stop_flag)
    if elector is None:
        return
    try:
        await _run(cfg, settings, options, stop_flag, ready_flag, controller_hook)
    finally:
        # A reconcile still running in its thread writes before the next leader may.
        with logs.timed(log, "stopped the remaining threads"):
            await asyncio.get_running_loop().shutdown_default_executor()
        elector.release()
        elector.kube.close()


def stop_on_signals() -> asyncio.Event | None:
    """A flag SIGTERM and SIGINT set, from the operator's first moment on the main thread (None
    elsewhere): the kubelet's SIGTERM ends a standby, or a leader whose kopf has not started yet,
    as cleanly as a running one (kopf's own handlers take over once it runs, ``spawn_tasks``);
    without it Python's default action killed the process, the Lease still held if it had one."""
    if threading.current_thread() is not threading.main_thread():
        return None
    flag = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, flag.set)
    return flag


async def stand_by(cfg: kubernetes.client.Configuration, options: OperatorOptions,
                   stop_flag: threading.Event | asyncio.Event | None = None) -> Any:
    """Stand by until this replica holds the Lease of ``options.leader``, answering the liveness
    endpoint meanwhile (kopf is not running); then keep renewing it from threads, exiting the
    process at once when it is lost (``leader.exit_at_once``). The ``LeaderElector``, or None
    when ``stop_flag`` was set first."""
    from taugate.controllers.leader import LeaderElector, StandbyHealth, exit_at_once

    config = options.leader
    timeout = max(1.0, config.renew_deadline_seconds / 2)  # a hanging request ends before the deadline
    kube = Kube.from_configuration(cfg, request_timeout=(timeout, timeout))
    elector = LeaderElector(kube, config, config.namespace, config.identity)
    health = StandbyHealth(options.liveness_endpoint) if options.liveness_endpoint else None
    try:
        held = await asyncio.to_thread(elector.acquire, lambda: stop_flag is not None and stop_flag.is_set())
    except BaseException:
        elector.stopping.set()
        kube.close()
        raise
    finally:
        if health is not None:
            health.close()  # kopf serves the endpoint from here on
    if not held:
        kube.close()
        return None
    elector.keep(exit_at_once)
    return elector


async def _run(cfg: kubernetes.client.Configuration, settings: Settings, options: OperatorOptions,
               stop_flag: threading.Event | asyncio.Event | None, ready_flag: threading.Event | asyncio.Event | None,
               controller_hook: Callable[[Controller], None] | None) -> None:
    quiet_routine_handler_lines()
    wake_waiters_only_on_change()
    kube = Kube.from_configuration(cfg)
    ctl = Controller(kube, settings, options)
    if controller_hook is not None:
        controller_hook(ctl)
    registry = build_registry(ctl, cfg)
    if stop_flag is not None:
        @kopf.on.cleanup(registry=registry)
        async def _flag_stopped(**_: Any) -> None:
            # kopf stopped by its own signal handler leaves its waiter on the flag pending, and
            # then waits 5 s for it as a hung task (kopf _core/reactor/running.py run_tasks)
            stop_flag.set()

    beside = None
    if options.recorder is not None:  # a process of its own (controllers/beside.py)
        from taugate.controllers.beside import Beside
        beside = Beside(cfg, settings, options.recorder, options.test_mode)
        beside.register_probe(registry)
    if options.audit is not None:  # its own API client
        from taugate.controllers.audit import AuditLoop
        ctl.audit = AuditLoop(Kube.from_configuration(cfg), settings, options.audit)
        ctl.audit.register(registry)
    try:
        # Inside kopf's lifecycle (on.startup/on.cleanup in build_registry), so kopf does not wait
        # on the worker as a hung task at exit.
        controllers = kopf.operator(registry=registry, standalone=True, clusterwide=True, stop_flag=stop_flag,
                                    ready_flag=ready_flag, liveness_endpoint=options.liveness_endpoint)
        if beside is None:
            await controllers
        else:
            from taugate.controllers.beside import run_beside
            await run_beside(controllers, beside)
    finally:
        await ctl.stop()
        await asyncio.to_thread(kube.close)
        if ctl.audit is not None:
            await ctl.audit.stop()
            await asyncio.to_thread(ctl.audit.kube.close)
