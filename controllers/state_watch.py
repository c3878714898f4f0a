"""Live cluster state for the webhook: a ``ClusterState`` kept current from API watches.

``WatchStateProvider`` lists and then watches the TauCluster, TauWorkspaces, Nodes, LocalQueues,
ClusterQueues and ResourceFlavors (one thread per kind, through ``controllers.kube.Kube``), keeps
the objects in memory and rebuilds the immutable ``ClusterState`` with
``taugate.snapshot.build_state`` in a worker thread when they change (debounced), so admission
reads ``provider.state`` with no API call per request. It satisfies the webhook server's
``StateProvider`` protocol (``webhook.server``): ``state``, ``ready``, ``age_seconds()``,
``async start()``, ``async stop()``.

- ``ready`` turns True once every kind has been listed and the first state built; until then
  ``state`` is None (``/readyz`` stays false).
- ``age_seconds()``: 0 while every kind is current (listed, and its watch not broken since);
  otherwise seconds since the first watch that is down lost its connection (so an API outage
  shows as a growing age); ``inf`` before the first full sync.
- Fail closed: a TauCluster whose ``status.workloadProfiles.profileSetHash`` does not match its
  spec makes ``build_state`` report ``profile_set_problem`` (admission then denies); an invalid
  TauCluster is left out (no profile set: fail closed); an invalid TauWorkspace, or the younger
  of two workspaces targeting one namespace, is left out and logged (``skipped``).
- Watches restart after errors with backoff (1 s doubling to 30 s) and relist on HTTP 410 Gone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from taugate.controllers import resources as R
from taugate.controllers.kube import Kube, KubeError, WatchExpired
from taugate.controllers.resources import Resource
from taugate.models import TauCluster, TauWorkspace
from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, build_state

log = logging.getLogger("taugate.state_watch")

_DROP_META = ("managedFields", "selfLink")


def trim(res: Resource, obj: dict) -> dict:
    """The part of an object admission needs (memory: Nodes are large and numerous): Nodes keep
    name, labels, ``spec.unschedulable``/taints and ``status.allocatable``/conditions (type,
    status); every object loses ``metadata.managedFields``."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _DROP_META}
    out = dict(obj, apiVersion=obj.get("apiVersion") or res.api_version, kind=obj.get("kind") or res.kind,
               metadata=meta)
    if res is R.NODES:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        out = {"apiVersion": "v1", "kind": "Node",
               "metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta},
               "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
               "status": {"allocatable": status.get("allocatable") or {},
                          "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                         for c in status.get("conditions") or [] if isinstance(c, dict)]}}
    return out


def usable_objects(objects: Iterable[dict], system_namespace: str | None = None) -> tuple[list[dict], list[str]]:
    """Objects ``build_state`` can take, and why others were left out (pure): a TauCluster not
    named ``cluster`` or not matching the schema; a TauWorkspace outside ``system_namespace``
    (when given: the operator serves only those, so only those may claim a namespace), not
    matching the schema, or the younger (creationTimestamp, then name) of two targeting one
    namespace."""
    kept: list[dict] = []
    skipped: list[str] = []
    by_target: dict[str, dict] = {}
    for obj in objects:
        kind = obj.get("kind")
        where = f"{kind} {R.namespace_of(obj) + '/' if R.namespace_of(obj) else ''}{R.name_of(obj)}"
        if kind == "TauCluster":
            if R.name_of(obj) != R.CLUSTER_NAME:
                skipped.append(f"{where}: only the TauCluster named 'cluster' is read")
                continue
            try:
                TauCluster.model_validate(obj)
            except ValidationError as e:
                skipped.append(f"{where}: {e.errors()[0]['msg']} (no profile set: admission fails closed)")
                continue
        elif kind == "TauWorkspace":
            if system_namespace and R.namespace_of(obj) != system_namespace:
                skipped.append(f"{where}: TauWorkspaces live in the system namespace {system_namespace!r}")
                continue
            try:
                target = TauWorkspace.model_validate(obj).target_namespace
            except ValidationError as e:
                skipped.append(f"{where}: {e.errors()[0]['msg']}")
                continue
            other = by_target.get(target)
            if other is not None:
                key = lambda o: (str(R.meta(o).get("creationTimestamp") or "~"), R.name_of(o))  # noqa: E731
                older, younger = (other, obj) if key(other) <= key(obj) else (obj, other)
                skipped.append(f"TauWorkspace {R.name_of(younger)}: namespace {target!r} already belongs to "
                               f"TauWorkspace {R.name_of(older)}")
                if younger is other:
                    kept.remove(other)
                    by_target[target] = obj
                    kept.append(obj)
                continue
            by_target[target] = obj
        kept.append(obj)
    return kept, skipped


class WatchStateProvider:
    """A ``ClusterState`` kept current from watches (see the module docstring).

    ``kube``: a ``controllers.kube.Kube`` (its ``ApiClient`` is shared by the watch threads);
    ``debounce_seconds``: how long to gather changes before a rebuild; ``watch_timeout_seconds``:
    the server-side watch timeout (the watch is then resumed from the last resourceVersion).
    """

    def __init__(self, kube: Kube, settings: Settings | None = None, *, debounce_seconds: float = 0.2,
                 watch_timeout_seconds: int = 300, resources: tuple[Resource, ...] = R.STATE_RESOURCES):
        self.kube = kube
        self.settings = settings or Settings()
        self.debounce_seconds = debounce_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.resources = resources
        self.generation = 0
        self.rebuilds = 0
        self.skipped: list[str] = []
        self._state: ClusterState | None = None
        self._store: dict[Resource, dict[tuple[str, str], dict]] = {r: {} for r in resources}
        self._listed: set[Resource] = set()
        self._down_since: dict[Resource, float | None] = {r: None for r in resources}
        self._stopping = threading.Event()
        self._responses: dict[Resource, Any] = {}
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    # -- the StateProvider protocol --------------------------------------------------------
    @property
    def state(self) -> ClusterState | None:
        """The current ``ClusterState`` (None before the first full sync)."""
        return self._state

    @property
    def ready(self) -> bool:
        """True once every kind was listed and the first state built."""
        return self._state is not None and self._listed >= set(self.resources)

    def age_seconds(self) -> float:
        """0 while every watch is connected; else seconds since the first one that is down
        dropped; ``inf`` before the first full sync."""
        if not self.ready:
            return math.inf
        down = [t for t in self._down_since.values() if t is not None]
        return max(0.0, time.monotonic() - min(down)) if down else 0.0

    async def start(self) -> None:
        """Start the watch threads and the rebuild task (returns at once)."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._ready = asyncio.Event()
        self._stopping.clear()
        for res in self.resources:
            t = threading.Thread(target=self._watch_loop, args=(res,), name=f"taugate-watch-{res.plural}", daemon=True)
            t.start()
            self._threads.append(t)
        self._task = asyncio.create_task(self._rebuild_loop(), name="taugate-state-rebuild")

    async def stop(self) -> None:
        """Stop the watches (their open streams are shut down) and the rebuild task."""
        self._stopping.set()
        for resp in list(self._responses.values()):
            try:
                resp.shutdown()
            except Exception:  # already closed
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        threads, self._threads = self._threads, []
        await asyncio.to_thread(lambda: [t.join(5) for t in threads])

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until ``ready`` (True) or ``timeout`` seconds pass (False)."""
        if self._ready is None:
            raise RuntimeError("start() the provider first")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def objects(self) -> list[dict]:
        """A copy of every object currently known, in ``resources`` order (snapshot order)."""
        out: list[dict] = []
        for res in self.resources:
            out.extend(v for _, v in sorted(self._store[res].items()))
        return out

    # -- watch threads ---------------------------------------------------------------------
    def _post(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # loop closed while stopping
                pass

    def _watch_loop(self, res: Resource) -> None:
        backoff = 1.0
        rv: str | None = None
        need_list = True

        def opened(response: Any) -> None:
            self._responses[res] = response
            self._post(self._connected, res)

        while not self._stopping.is_set():
            try:
                if need_list:
                    items, rv = self.kube.list_with_version(res)
                    self._post(self._replace, res, [trim(res, o) for o in items])
                    self._post(self._connected, res)  # current as of this list
                    need_list = False
                for event in self.kube.watch(res, resource_version=rv, timeout_seconds=self.watch_timeout_seconds,
                                             on_open=opened):
                    if self._stopping.is_set():
                        break
                    obj = event.get("object") or {}
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = new_rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._post(self._event, res, event["type"], trim(res, obj))
                backoff = 1.0
                # The server ended the watch (its timeout): resume from rv at once.
            except WatchExpired:
                need_list = True
            except KubeError as e:
                if self._stopping.is_set():
                    break
                log.warning("watch of %s failed (%s); relisting in %.0f s", res, e, backoff)
                need_list = True
                self._stopping.wait(backoff)
                backoff = min(30.0, backoff * 2)
            finally:
                self._responses.pop(res, None)
                if not self._stopping.is_set():
                    self._post(self._disconnected, res)

    # -- on the event loop -----------------------------------------------------------------
    def _connected(self, res: Resource) -> None:
        self._down_since[res] = None  # type: ignore[assignment]

    def _disconnected(self, res: Resource) -> None:
        if self._down_since.get(res) is None:
            self._down_since[res] = time.monotonic()

    def _key(self, obj: dict) -> tuple[str, str]:
        return (R.namespace_of(obj) or "", R.name_of(obj))

    def _replace(self, res: Resource, items: list[dict]) -> None:
        self._store[res] = {self._key(o): o for o in items}
        self._listed.add(res)
        self._mark_dirty()

    def _event(self, res: Resource, type_: str, obj: dict) -> None:
        key = self._key(obj)
        store = self._store[res]
        if type_ == "DELETED":
            if store.pop(key, None) is None:
                return
        else:
            if store.get(key) == obj:
                return  # e.g. a watch replaying what the list already gave
            store[key] = obj
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        if self._dirty is not None:
            self._dirty.set()

    def _build(self, objects: list[dict], generation: int) -> tuple[ClusterState, list[str]]:
        kept, skipped = usable_objects(objects, self.settings.system_namespace)
        try:
            return build_state(kept, self.settings, generation=generation, source="cluster"), skipped
        except SnapshotError as e:  # not expected after usable_objects; fail closed without a cluster
            log.error("cannot build the cluster state: %s", e)
            rest = [o for o in kept if o.get("kind") not in ("TauCluster", "TauWorkspace")]
            return build_state(rest, self.settings, generation=generation, source="cluster"), skipped + [str(e)]

    async def _rebuild_loop(self) -> None:
        assert self._dirty is not None and self._ready is not None
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.debounce_seconds)
            self._dirty.clear()
            if not self._listed >= set(self.resources):
                continue
            generation = self.generation + 1
            try:
                state, skipped = await asyncio.to_thread(self._build, self.objects(), generation)
            except Exception:  # a bug: keep the previous state, try again on the next change
                log.exception("rebuilding the cluster state failed")
                continue
            if skipped != self.skipped:
                for line in skipped:
                    log.warning("left out of the cluster state: %s", line)
            self.skipped = skipped
            self._state = state
            self.generation = generation
            self.rebuilds += 1
            self._ready.set()


def provider_from_config(settings: Settings | None = None, *, in_cluster: bool = True, kubeconfig: str | None = None,
                         context: str | None = None, **options: Any) -> WatchStateProvider:
    """A ``WatchStateProvider`` for ``taugate serve --in-cluster`` (the pod's service account) or
    a kubeconfig; ``options`` go to the provider. Raises ``controllers.kube.KubeConfigError``
    (one line) when no configuration can be loaded."""
    from taugate.controllers.kube import load_configuration

    cfg = load_configuration(in_cluster=in_cluster, kubeconfig=kubeconfig, context=context)
    return WatchStateProvider(Kube.from_configuration(cfg), settings, **options)
