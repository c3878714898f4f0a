"""Live cluster state for the webhook: ``WatchStateProvider`` follows every kind the state is
built from, one thread each (``Kube.follow``; the DRA kinds only where ``resource.k8s.io/v1`` is
served), and rebuilds the immutable ``ClusterState`` when they change (debounced), so admission
makes no API call per request. Fail closed: an invalid TauCluster or a stale ``profileSetHash``
leaves no usable profile set; an invalid TauWorkspace, or the younger of two targeting one
namespace, is left out and logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import math
import threading
import time
from typing import Any, Protocol

from taugate.access import name_of, namespace_of
from taugate.kube import WatchFeed
from taugate.kubeaccess import KubeError, Resource
from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, build_state
from taugate.state_objects import (
    DRA_RESOURCES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    STATE_RESOURCES,
    trim,
    usable_objects,
)
from taugate.webhook.scale import ObjectUnreadable
from taugate.workqueue import WorkQueue, cancel

log = logging.getLogger("taugate.state_watch")
REBUILD_KEY = "rebuild"

READ_CLAIM_SECONDS = 1.0
"""The most a decision waits to read a claim or claim template the watch has not delivered yet
(``WatchStateProvider.read_claim``); half the admission deadline."""

class ApiReader(Protocol):
    """What the watch needs of an API client: ``follow`` and ``get``, both raising
    ``taugate.kubeaccess.KubeError``."""

    def follow(self, res: Resource, feed: WatchFeed, stopping: threading.Event, *, timeout_seconds: int = 300,
               optional: bool = False) -> None: ...

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None: ...


class _Feed:
    """``Kube.follow``'s deliveries for one resource, handed to the provider's event loop."""

    def __init__(self, provider: WatchStateProvider, res: Resource) -> None:
        self.provider, self.res = provider, res

    def listed(self, items: list[dict]) -> None:
        self.provider._post(self.provider._replace, self.res, [trim(self.res, o) for o in items])

    def changed(self, event_type: str, obj: dict) -> None:
        self.provider._post(self.provider._event, self.res, event_type, trim(self.res, obj))

    def up(self, response: Any) -> None:
        if response is not None:
            self.provider._responses[self.res] = response
        self.provider._post(self.provider._connected, self.res)

    def down(self) -> None:
        self.provider._responses.pop(self.res, None)
        self.provider._post(self.provider._disconnected, self.res)


class WatchStateProvider:
    """``kube`` is shared by the watch threads; ``debounce_seconds``: how long changes gather
    before a rebuild; ``watch_timeout_seconds``: the server-side watch timeout (the watch then
    resumes from the last resourceVersion).
    """

    def __init__(self, kube: ApiReader, settings: Settings | None = None, *, debounce_seconds: float = 0.2,
                 watch_timeout_seconds: int = 300, resources: tuple[Resource, ...] = STATE_RESOURCES):
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
        self._queue = WorkQueue()
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._read: dict[tuple[str, str, str], dict | None] = {}
        self._reader = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="taugate-read-claim")

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
        dropped (an API outage shows as a growing age); ``inf`` before the first full sync."""
        if not self.ready:
            return math.inf
        down = [t for t in self._down_since.values() if t is not None]
        return max(0.0, time.monotonic() - min(down)) if down else 0.0

    def read_object(self, res: Resource, namespace: str, name: str) -> dict | None:
        """One stored object read from the API now (a quorum read; a ``scale``'s parent), or None
        when it does not exist. Raises ``ObjectUnreadable`` with the API's reason."""
        try:
            return self.kube.get(res, name, namespace)
        except KubeError as e:
            raise ObjectUnreadable(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    async def start(self) -> None:
        """Start the watch threads and the rebuild task (returns at once)."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._queue = WorkQueue()
        self._ready = asyncio.Event()
        self._stopping.clear()
        for res in self.resources:
            t = threading.Thread(target=self._follow, args=(res,), name=f"taugate-watch-{res.plural}", daemon=True)
            t.start()
            self._threads.append(t)
        self._task = asyncio.create_task(self._queue.run(self._rebuild), name="taugate-state-rebuild")

    async def stop(self) -> None:
        """Stop the watches (their open streams are shut down) and the rebuild task."""
        self._stopping.set()
        for resp in list(self._responses.values()):
            with contextlib.suppress(Exception):  # already closed
                resp.shutdown()
        task, self._task = self._task, None
        await cancel(task)
        threads, self._threads = self._threads, []

        def join_all() -> None:
            for t in threads:
                t.join(5)

        await asyncio.to_thread(join_all)

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until ``ready`` (True) or ``timeout`` seconds pass (False)."""
        if self._ready is None:
            raise RuntimeError("start() the provider first")
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel (CPython gh-86296)
                await self._ready.wait()
        except TimeoutError:
            return False
        return True

    def objects(self) -> list[dict]:
        """A copy of every object known, in ``resources`` order (snapshot order)."""
        out: list[dict] = []
        for res in self.resources:
            out.extend(v for _, v in sorted(self._store[res].items()))
        return out

    # watch threads
    def _post(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed while stopping
                loop.call_soon_threadsafe(fn, *args)

    def _follow(self, res: Resource) -> None:
        self.kube.follow(res, _Feed(self, res), self._stopping, timeout_seconds=self.watch_timeout_seconds,
                         optional=res in DRA_RESOURCES)  # resource.k8s.io/v1 is served from Kubernetes 1.34

    # on the event loop
    def _connected(self, res: Resource) -> None:
        self._down_since[res] = None

    def _disconnected(self, res: Resource) -> None:
        if self._down_since.get(res) is None:
            self._down_since[res] = time.monotonic()

    def _key(self, obj: dict) -> tuple[str, str]:
        return (namespace_of(obj) or "", name_of(obj))

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
        self._queue.add(REBUILD_KEY, self.debounce_seconds)  # a burst of changes is one rebuild

    def read_claim(self, kind: str, namespace: str, name: str) -> dict | None:
        """The claim spec of a ResourceClaimTemplate (``kind`` "template") or ResourceClaim the
        watch has not delivered yet (created a moment ago), read from the API server. Called from a
        decision thread; at most ``READ_CLAIM_SECONDS``, then None (the workload is refused as
        naming an unknown claim). What was read is kept until the next rebuild."""
        key = (kind, namespace, name)
        if key in self._read:
            return self._read[key]
        res = RESOURCE_CLAIM_TEMPLATES if kind == "template" else RESOURCE_CLAIMS
        future = self._reader.submit(self.kube.get, res, name, namespace)  # type: ignore[attr-defined]
        try:
            obj = future.result(timeout=READ_CLAIM_SECONDS)
        except (concurrent.futures.TimeoutError, KubeError) as e:  # not known: the workload is refused
            log.warning("could not read %s %s/%s (%s): refused as unknown", res.kind, namespace, name, e)
            return None
        spec = (obj or {}).get("spec") if isinstance(obj, dict) else None
        if kind == "template" and isinstance(spec, dict):
            spec = spec.get("spec")
        found = spec if isinstance(spec, dict) else None
        if len(self._read) >= 256:
            self._read.clear()
        self._read[key] = found
        return found

    def _build(self, objects: list[dict], generation: int) -> tuple[ClusterState, list[str]]:
        kept, skipped = usable_objects(objects, self.settings.system_namespace)
        self._read = {}  # the watch holds what was read before this rebuild
        read = self.read_claim if hasattr(self.kube, "get") else None
        try:
            return dataclasses.replace(build_state(kept, self.settings, generation=generation, source="cluster"),
                                       read_claim=read), skipped
        except SnapshotError as e:  # not expected after usable_objects; fail closed without a cluster
            log.error("cannot build the cluster state: %s", e)
            rest = [o for o in kept if o.get("kind") not in ("TauCluster", "TauWorkspace")]
            return build_state(rest, self.settings, generation=generation, source="cluster"), skipped + [str(e)]

    async def _rebuild(self, _key: object) -> None:
        assert self._ready is not None
        if not self._listed >= set(self.resources):
            return
        generation = self.generation + 1
        try:
            state, skipped = await asyncio.to_thread(self._build, self.objects(), generation)
        except Exception:  # a bug: keep the previous state, try again on the next change
            log.exception("rebuilding the cluster state failed")
            return
        if skipped != self.skipped:
            for line in skipped:
                log.warning("left out of the cluster state: %s", line)
        self.skipped = skipped
        self._state = state
        self.generation = generation
        self.rebuilds += 1
        self._ready.set()
