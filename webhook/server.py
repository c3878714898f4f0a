"""The admission HTTPS server (aiohttp only): size limit, deadline, JSON, metrics, probes.

Every decision is made by ``webhook.review`` (pure); this module only moves bytes:

- ``POST`` on each path of ``webhook.routes.ROUTES`` (``/mutate``, ``/validate``,
  ``/validate-tau``) takes an AdmissionReview (admission.k8s.io/v1) and answers one: ``uid``
  echoed, ``patch``/``patchType`` only when something changes, ``warnings`` when any.
- A body that is not an AdmissionReview is HTTP 400 ``{"error": REASON}``; a body over
  ``settings.max_body_bytes`` (8 MiB, the apiserver's own request limit is 3 MiB per object) is
  HTTP 413 ``{"error": REASON}``.
- Deadline: ``settings.admission_deadline_seconds`` (2 s, below the webhook configurations'
  ``timeoutSeconds: 3``), counted from the request's arrival. Past it the answer is still a
  valid AdmissionReview: denied, status code 504, a message saying why (fail closed, counted in
  ``taugate_admission_deadline_exceeded_total``). The body must be read and parsed for that (the
  answer needs the uid), so reading may overrun the deadline by ``READ_GRACE_SECONDS``; a body
  not received by then is HTTP 408.
- The event loop never waits on decision work: a body up to ``inline_limit`` bytes (64 KiB, a
  RayJob with managedFields is ~5-20 KiB) is parsed and decided inline (~1 ms of CPU); a larger
  one is parsed, then decided, in a thread pool (the policy engine keeps one regorus engine per
  thread, so it is thread-safe through its own interface), which is what lets the deadline
  answer while the work is still running. An inline decision cannot be interrupted, so it is
  bounded by size instead.
- Not ready (no cluster state yet, or no policy library when one is required): reviews are
  denied with code 503, and ``/readyz`` is 503 so the Service sends no traffic.
- ``/healthz`` (process alive), ``/readyz``, ``/metrics`` (Prometheus text format).

Bounded resources (each limit is a ``Settings`` field, counted in ``/metrics``):

- Bytes in flight: a body over ``inline_limit`` reserves its ``Content-Length`` (the body limit
  when it has none) from ``max_bytes_in_flight`` before it is read, and gives it back when its
  decision is done (even one abandoned at the deadline, whose thread still runs). A body that
  does not fit waits, unread (TCP flow control holds it in the client), until the deadline, then
  gets HTTP 429 with the reason and ``Retry-After``. Small bodies skip the budget (nothing on the
  hot path but a comparison): they are bounded by the connection limit times 64 KiB.
- Connections: at most ``max_connections`` accepted sockets (TLS handshakes in progress
  included, counted at ``accept()``); at the limit the longest-idle connection (no request in
  flight) is closed to make room, and a new connection is closed at once when every connection
  is busy. ``header_timeout_seconds`` bounds the TLS
  handshake and a request head from its first byte (slowloris); ``idle_timeout_seconds`` a
  connection with no request in flight. Bodies are bounded by the deadline (above).
- A client that disconnects mid-request is one log line (``client ... disconnected``), never a
  traceback.

The server reads cluster state through a ``StateProvider`` (``SnapshotStateProvider`` for a
snapshot file; the in-cluster watch-based provider lives in ``controllers`` and is handed in by
the CLI), and takes its ``ssl.SSLContext`` from a ``TLSSource`` (``certs.serving.ServingTLS``,
also handed in by the CLI: webhook never imports certs or controllers).
"""

from __future__ import annotations

import asyncio
import gc
import errno
import logging
import os
import signal
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, runtime_checkable

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, load_snapshot
from taugate.webhook import review
from taugate.webhook.decision import Decision
from taugate.webhook.routes import ROUTED_KINDS, ROUTES, Route

log = logging.getLogger("taugate.webhook")

INLINE_LIMIT = 64 * 1024
"""Bodies up to this many bytes are decided on the event loop; larger ones in a thread."""

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
                   0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Seconds; sub-millisecond resolution where admission normally answers (~0.3-2 ms)."""

READ_GRACE_SECONDS = 1.0
"""How long past the deadline a request body may still arrive (then HTTP 408): with the webhook
configurations' ``timeoutSeconds: 3`` and the 2 s deadline, the apiserver waits that long anyway."""

KNOWN_KINDS = ROUTED_KINDS
"""Kinds kept as metric labels; anything else is ``other`` (a request body cannot mint labels)."""

JSON = "application/json"


class ByteBudget:
    """A budget of ``limit`` bytes shared by the requests in flight (event loop thread only).

    ``acquire(n, deadline)`` waits, first come first served, until ``n`` bytes (at most
    ``limit``) fit, and returns False when the loop time ``deadline`` passes first;
    ``release(n)`` gives them back and wakes the waiters that now fit. ``used`` is the bytes held."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.used = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []

    async def acquire(self, n: int, deadline: float) -> bool:
        n = min(int(n), self.limit)
        if not self._waiters and self.used + n <= self.limit:
            self.used += n
            return True
        fut = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        granted = False
        try:
            async with asyncio.timeout_at(deadline):
                await fut
            granted = True
        except TimeoutError:
            return False
        finally:
            if not granted:  # timed out or cancelled
                if entry in self._waiters:
                    self._waiters.remove(entry)
                    self._wake()  # the first waiter may have been blocked behind this one
                elif fut.done() and not fut.cancelled():  # granted just as it gave up
                    self.release(n)
        return True

    def release(self, n: int) -> None:
        self.used -= min(int(n), self.limit)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.pop(0)
                continue
            if self.used + n > self.limit:
                return
            self.used += n
            self._waiters.pop(0)
            fut.set_result(None)


class ConnectionGuard:
    """Counts the server's connections and enforces ``max_connections`` and the header timeout
    (see the module docstring), at two points:

    - at ``accept()`` (``_ListeningSocket``), before the TLS handshake: ``sockets`` counts the
      accepted sockets still open (asyncio allocates a 256 KiB TLS read buffer for each, so
      1,000 connections that never finish a handshake held 300 MB before this limit);
    - after the handshake (``_GuardedHandler``): ``open`` holds the HTTP connections, the
      candidates for eviction (and the limit itself under uvloop, whose accept is native).

    At the limit the longest-idle HTTP connection is closed to make room (``evicted``); when
    none is idle the new connection is closed at once (``refused``). ``closed`` counts by
    reason, ``header_timeout`` included; ``on_close(reason)`` is called for each."""

    def __init__(self, max_connections: int, header_timeout: float):
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.sockets = 0
        self.open: dict["_GuardedHandler", None] = {}
        self.closed = {"evicted": 0, "refused": 0, "header_timeout": 0}
        self._logged = dict(self.closed)
        self._last_log = 0.0
        self.on_close: Callable[[str], None] = lambda reason: None

    def accepted(self) -> bool:
        """A socket was accepted; False when it must be closed (at the limit, none idle)."""
        if self.sockets >= self.max_connections and not self._make_room():
            return False
        self.sockets += 1
        return True

    def socket_closed(self) -> None:
        self.sockets -= 1

    def opened(self, handler: "_GuardedHandler") -> bool:
        """A connection finished its TLS handshake; False when it must be closed."""
        if len(self.open) >= self.max_connections and not self._make_room():
            return False
        self.open[handler] = None
        return True

    def lost(self, handler: "_GuardedHandler") -> None:
        self.open.pop(handler, None)

    def head_timed_out(self) -> None:
        self._count("header_timeout")

    def _make_room(self) -> bool:
        """Close the connection idle longest (no request in flight); False (counted as
        ``refused``) when every connection is busy. Scans the open connections only at the
        limit."""
        victim, since = None, float("inf")
        for h in self.open:
            if h.idle and h.idle_since < since:
                victim, since = h, h.idle_since
        if victim is None:
            self._count("refused")
            return False
        self.open.pop(victim, None)
        victim.force_close()
        self._count("evicted")
        return True

    def _count(self, reason: str) -> None:
        self.closed[reason] += 1
        self.on_close(reason)
        now = time.monotonic()
        if now - self._last_log >= 10.0:  # at most one line per 10 s under attack
            delta = {k: v - self._logged[k] for k, v in self.closed.items() if v != self._logged[k]}
            self._logged = dict(self.closed)
            self._last_log = now
            log.warning("connection limits: %s (limit %d connections, header timeout %g s); %d open",
                        ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in delta.items()),
                        self.max_connections, self.header_timeout, max(self.sockets, len(self.open)))


class _AcceptedSocket(socket.socket):
    """An accepted socket that tells its ``ConnectionGuard`` when it is closed."""

    __slots__ = ("_guard",)

    def close(self) -> None:
        guard, self._guard = getattr(self, "_guard", None), None
        if guard is not None:
            guard.socket_closed()
        super().close()


class _ListeningSocket(socket.socket):
    """The listening socket; its ``accept()`` (which asyncio's selector loop calls) applies
    ``ConnectionGuard.accepted`` before any TLS state exists for the connection."""

    __slots__ = ("_guard",)

    def accept(self):
        fd, addr = self._accept()
        conn = _AcceptedSocket(self.family, self.type, self.proto, fileno=fd)
        if not self._guard.accepted():
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()  # reset at once: no TLS, no buffers
            raise ConnectionAbortedError  # asyncio: stop accepting for this loop tick
        conn._guard = self._guard
        return conn, addr

    @classmethod
    def wrap(cls, sock: socket.socket, guard: ConnectionGuard) -> "_ListeningSocket":
        listener = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        listener._guard = guard
        return listener


class _GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol with taugate's limits: registration with the
    ``ConnectionGuard`` and a header timeout (armed when bytes of a request head arrive, checked
    once when it fires: a few attribute reads per received chunk)."""

    __slots__ = ("_guard", "_head_timer", "_head_mark", "idle_since")

    def __init__(self, guard: ConnectionGuard, manager: Any, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_mark = -1
        self.idle_since = time.monotonic()

    @property
    def idle(self) -> bool:
        """No request being handled or queued (a partial head counts as idle)."""
        return not self._request_in_progress and not self._messages and not self._force_close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._guard.opened(self):
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.lost(self)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is None and not self._request_in_progress and not self._messages \
                and not self._force_close:
            self._head_mark = self._request_count  # a head has started and is not complete yet
            self._head_timer = self._loop.call_later(self._guard.header_timeout, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._request_count == self._head_mark and self.idle:
            self._guard.head_timed_out()
            self.force_close()

    async def _handle_request(self, request, start_time, request_handler):
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            self.idle_since = time.monotonic()


class _GuardedSite(web.SockSite):
    """``web.SockSite`` whose connections are ``_GuardedHandler`` and whose TLS handshake is
    bounded by the guard's header timeout."""

    __slots__ = ("_guard",)

    def __init__(self, runner: web.AppRunner, sock: socket.socket, guard: ConnectionGuard, **kwargs: Any):
        super().__init__(runner, sock, **kwargs)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self._guard

        def protocol() -> _GuardedHandler:  # aiohttp's Server.__call__, with our handler class
            return _GuardedHandler(guard, server, loop=loop, **server._kwargs)

        extra = {"ssl_handshake_timeout": guard.header_timeout} if self._ssl_context else {}
        self._server = await loop.create_server(protocol, sock=self._sock, ssl=self._ssl_context,
                                                backlog=self._backlog, **extra)


@runtime_checkable
class StateProvider(Protocol):
    """Where the server reads cluster state. ``state`` is the current immutable
    ``ClusterState`` (None before the first load); ``ready`` is True once it is usable;
    ``age_seconds()`` is how old it is (seconds since the last successful load or watch event).
    Optional: ``async start()`` / ``async stop()`` (run with the server) and ``check()``
    (called from a worker thread every second, e.g. to reload a changed file)."""

    @property
    def state(self) -> ClusterState | None: ...

    @property
    def ready(self) -> bool: ...

    def age_seconds(self) -> float: ...


class TLSSource(Protocol):
    """The server's TLS: a live ``context`` and ``check()`` that reloads the certificate into
    that same context when its files change (called on the event loop thread every second and
    on SIGHUP; True when a new certificate is served). ``certs.serving.ServingTLS`` is one."""

    context: ssl.SSLContext

    def check(self) -> bool: ...


class SnapshotStateProvider:
    """Cluster state from a snapshot file (``taugate serve --cluster FILE``).

    Loads at construction (``SnapshotError`` with a one-line reason on bad input); ``check()``
    reloads when the file's stat changes, and a broken new file keeps the previous state (logged).
    ``age_seconds()`` counts from the last successful load."""

    def __init__(self, path: str | Path, settings: Settings):
        self.path = Path(path)
        self.settings = settings
        self._stat = self._stat_now()
        self._state = load_snapshot(self.path, settings)
        self._loaded = time.monotonic()
        self.generation = 0

    def _stat_now(self):
        try:
            s = os.stat(self.path)
        except OSError:
            return None
        return (s.st_ino, s.st_size, s.st_mtime_ns)

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def ready(self) -> bool:
        return True

    def age_seconds(self) -> float:
        return time.monotonic() - self._loaded

    def check(self) -> bool:
        """Reload the file when it changed; True when a new state is in use."""
        stat = self._stat_now()
        if stat is None or stat == self._stat:
            return False
        self._stat = stat
        try:
            new = load_snapshot(self.path, self.settings)
        except SnapshotError as e:
            log.warning("keeping the previous cluster state: %s", e)
            return False
        self._state, self._loaded = new, time.monotonic()
        self.generation += 1
        log.info("cluster state reloaded from %s", self.path)
        return True


class AdmissionMetrics:
    """The server's Prometheus metrics, in their own registry (``registry``):

    - ``taugate_admission_requests_total{webhook,kind,operation,decision}``: decision is
      ``allowed`` | ``patched`` | ``denied`` | ``deadline`` | ``unavailable`` | ``error`` |
      ``invalid`` (HTTP 400) | ``too_large`` (HTTP 413) | ``timeout`` (HTTP 408) | ``busy``
      (HTTP 429, no room in the bytes-in-flight budget) | ``disconnected`` (the client left);
    - ``taugate_admission_duration_seconds{webhook}``: wall time from the request's arrival to
      the answer, sub-millisecond buckets;
    - ``taugate_admission_deadline_exceeded_total{webhook}``: deadline answers;
    - ``taugate_admission_violations_total{webhook,policy,action}``: violations found, by
      enforcement action (``deny`` and the log-only ``dryrun``);
    - ``taugate_state_age_seconds``: age of the cluster state (from the provider);
    - ``taugate_certificate_reloads_total``: serving certificates loaded without restart;
    - ``taugate_connections_open``, ``taugate_connections_closed_total{reason}`` (``evicted``,
      ``refused``, ``header_timeout``) and ``taugate_bytes_in_flight`` (bytes of large bodies
      held): set by the server with ``watch()``.
    """

    def __init__(self, age: Callable[[], float], registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("taugate_admission_requests", "AdmissionReviews answered",
                                ("webhook", "kind", "operation", "decision"), registry=r)
        self.duration = Histogram("taugate_admission_duration_seconds", "Time to answer an AdmissionReview",
                                  ("webhook",), buckets=LATENCY_BUCKETS, registry=r)
        self.deadline = Counter("taugate_admission_deadline_exceeded", "Reviews answered by the deadline",
                                ("webhook",), registry=r)
        self.violations = Counter("taugate_admission_violations", "Policy violations found",
                                  ("webhook", "policy", "action"), registry=r)
        self.state_age = Gauge("taugate_state_age_seconds", "Age of the cluster state in use", registry=r)
        self.state_age.set_function(age)
        self.cert_reloads = Counter("taugate_certificate_reloads", "Serving certificates reloaded", registry=r)
        for route in ROUTES:  # every series exists from the start, at 0
            self.deadline.labels(route.path)
            self.duration.labels(route.path)
        self.connections_open = Gauge("taugate_connections_open", "Open HTTPS connections", registry=r)
        self.bytes_in_flight = Gauge("taugate_bytes_in_flight", "Bytes of large request bodies being handled",
                                     registry=r)
        self.connections_closed = Counter("taugate_connections_closed", "Connections closed by a limit",
                                          ("reason",), registry=r)
        self._counted: dict[tuple[str, str, str, str], Any] = {}
        self._timed = {route.path: self.duration.labels(route.path) for route in ROUTES}

    def watch(self, guard: ConnectionGuard, budget: ByteBudget) -> None:
        """Read the open connections and the bytes in flight from ``guard`` and ``budget`` at
        scrape time, and count the guard's closes."""
        self.connections_open.set_function(lambda: max(guard.sockets, len(guard.open)))
        self.bytes_in_flight.set_function(lambda: budget.used)
        children = {reason: self.connections_closed.labels(reason) for reason in guard.closed}
        guard.on_close = lambda reason: children[reason].inc()

    def answered(self, path: str, kind: str, operation: str, decision: str, seconds: float) -> None:
        """Count one answered review and observe its duration (seconds). The labelled series
        are looked up once (``labels()`` takes a lock and checks the names on every call) and
        kept: their number is bounded by ``KNOWN_KINDS`` x operations x decisions x routes."""
        key = (path, kind, operation, decision)
        child = self._counted.get(key)
        if child is None:
            child = self._counted[key] = self.requests.labels(*key)
        child.inc()
        self._timed[path].observe(seconds)


_DECIDERS: dict[str, Callable[[dict, ClusterState, Settings, Any], Decision]] = {
    # The server parsed the review for this one answer: mutation may edit it in place.
    "mutate.workloads.tau.azure.com": lambda req, st, s, e: review.mutate(req, st, s, e, in_place=True),
    "validate.workloads.tau.azure.com": lambda req, st, s, e: review.validate(req, st, s, e),
    "validate.resources.tau.azure.com": lambda req, st, s, e: review.validate_tau(req, st, s),
}
if set(_DECIDERS) != {r.name for r in ROUTES}:  # the route table and the server must agree
    raise RuntimeError(f"webhook.server has deciders for {sorted(_DECIDERS)} but ROUTES names "
                       f"{sorted(r.name for r in ROUTES)}")


@dataclass
class _Reply:
    """An HTTP answer: ``body`` as JSON (or already serialised in ``payload``) and the labels."""

    status: int
    body: dict
    decision: str
    kind: str = ""
    operation: str = ""
    payload: bytes | None = None
    headers: dict | None = None


def _label_kind(req: dict) -> str:
    kind = (req.get("kind") or {}).get("kind") if isinstance(req.get("kind"), dict) else None
    return kind if kind in KNOWN_KINDS else "other"


def _where(req: dict) -> str:
    """``namespace/name`` of a request for log lines (``generateName*`` before a name exists)."""
    name = req.get("name")
    if not name:
        meta = (req.get("object") or {}).get("metadata") if isinstance(req.get("object"), dict) else None
        name = f"{meta.get('generateName', '')}*" if isinstance(meta, dict) else "?"
    return f"{req.get('namespace') or ''}/{name}"


def _label_operation(req: dict) -> str:
    op = req.get("operation")
    return op if op in review.OPERATIONS else "other"


class AdmissionServer:
    """The aiohttp application serving the admission webhooks.

    ``provider``: a ``StateProvider``; ``engine``: the policy engine (``webhook.policy``), or
    None; ``policies_required``: when True (the default) the server is not ready and denies
    with 503 until an engine is set. ``checks``: extra callables run every ``check_interval``
    seconds in a worker thread (a policy library reload, for example). ``registry``: where the
    admission metrics live (a new one by default); ``/metrics`` also exposes
    ``extra_registries`` (the process-wide default registry: process metrics and the policy
    engine's reload counters). ``inline_limit``: body size in bytes above which parsing and
    deciding move to the thread pool of ``executor_workers`` threads. Build the aiohttp app with
    ``app()``; run it over HTTPS with ``start()`` or ``serve_forever()`` (one app per server).
    """

    def __init__(self, provider: StateProvider, settings: Settings | None = None, engine: Any = None, *,
                 policies_required: bool = True, registry: CollectorRegistry | None = None,
                 inline_limit: int = INLINE_LIMIT, executor_workers: int = 2,
                 checks: tuple[Callable[[], Any], ...] = (), check_interval: float = 1.0,
                 extra_registries: tuple[CollectorRegistry, ...] = (REGISTRY,)):
        self.provider = provider
        self.settings = settings or Settings()
        self.engine = engine
        self.policies_required = policies_required
        self.inline_limit = inline_limit
        self.metrics = AdmissionMetrics(self._state_age, registry)
        self.executor = ThreadPoolExecutor(max_workers=executor_workers, thread_name_prefix="taugate-admit")
        self.checks = tuple(checks)
        self.check_interval = check_interval
        self.extra_registries = tuple(extra_registries)
        self.tls: TLSSource | None = None
        self.draining = False
        self.budget = ByteBudget(self.settings.max_bytes_in_flight)
        self.guard = ConnectionGuard(self.settings.max_connections, self.settings.header_timeout_seconds)
        self.metrics.watch(self.guard, self.budget)

    # --- state -------------------------------------------------------------------------------

    def _state_age(self) -> float:
        try:
            return float(self.provider.age_seconds())
        except Exception:  # a provider bug must not break /metrics
            return float("nan")

    def unable_reasons(self) -> list[str]:
        """Why reviews cannot be decided now (no cluster state, no policy library); empty when
        they can. Reviews are then denied with 503."""
        reasons = []
        if not self.provider.ready or self.provider.state is None:
            reasons.append("no cluster state yet")
        if self.policies_required and self.engine is None:
            reasons.append("no policy library loaded")
        return reasons

    def not_ready_reasons(self) -> list[str]:
        """Why ``/readyz`` is 503 (empty when ready): ``unable_reasons``, or shutting down (while
        draining, reviews that still arrive are decided normally)."""
        return (["shutting down"] if self.draining else []) + self.unable_reasons()

    # --- the admission path --------------------------------------------------------------------

    def _decide(self, route: Route, rev: dict, state: ClusterState) -> Decision:
        return _DECIDERS[route.name](rev["request"], state, self.settings, self.engine)

    def _decide_safely(self, route: Route, rev: dict, state: ClusterState) -> Decision:
        try:
            return self._decide(route, rev, state)
        except Exception as e:  # a bug in a decision: fail closed with a valid answer, log it
            log.exception("internal error deciding %s uid=%s", route.path, rev["request"].get("uid"))
            return Decision.deny([], reason=f"taugate could not decide because of an internal error "
                                            f"({type(e).__name__}); the request is denied; see the taugate "
                                            f"webhook log", code=500)

    def _deadline_decision(self) -> Decision:
        s = self.settings.admission_deadline_seconds
        return Decision.deny([], code=504, reason=(
            f"taugate could not decide within its {s:g} s admission deadline, so the request is denied "
            f"rather than admitted unchecked; retry, and tell the platform team if it keeps happening"))

    def _unavailable_decision(self, reasons: list[str]) -> Decision:
        return Decision.deny([], code=503, reason=f"taugate is not ready ({'; '.join(reasons)}); retry shortly")

    def _answer(self, route: Route, rev: dict, decision: Decision, label: str | None = None) -> _Reply:
        req = rev["request"]
        if label is None:
            label = ("allowed" if decision.allowed and not decision.patch else "patched" if decision.allowed
                     else "error" if decision.code == 500 else "denied")
        kind, operation = _label_kind(req), _label_operation(req)
        try:
            body = review.review_response(rev, decision)
            payload = orjson.dumps(body)
        except Exception as e:  # a rendering bug: still a valid AdmissionReview, denied
            log.exception("internal error rendering the answer to %s uid=%s", route.path, req.get("uid"))
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": req.get("uid", ""), "allowed": False,
                                 "status": {"code": 500, "message": f"taugate could not render its answer "
                                                                    f"({type(e).__name__}); the request is denied"}}}
            return _Reply(200, body, "error", kind, operation)
        for v in decision.violations:
            self.metrics.violations.labels(route.path, v.policy, v.action).inc()
        for v in decision.dryrun:
            self.metrics.violations.labels(route.path, v.policy, "dryrun").inc()
            log.info("dryrun %s: %s %s uid=%s: %s", route.path, kind, _where(req), req.get("uid"), v.render())
        if decision.policy_failures:
            log.warning("policy failed at run time: %s on %s %s uid=%s (%s)", ", ".join(decision.policy_failures),
                        kind, _where(req), req.get("uid"), "denied" if not decision.allowed else "not denying")
        if not decision.allowed:
            log.info("denied %s: %s %s uid=%s: %s", route.path, kind, _where(req), req.get("uid"),
                     decision.message.replace("\n", " "))
        return _Reply(200, body, label, kind, operation, payload)

    async def _admit(self, route: Route, request: web.Request) -> _Reply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.admission_deadline_seconds
        limit = self.settings.max_body_bytes
        size = request.content_length
        if size is not None and size > limit:
            return _Reply(413, {"error": f"request body is {size} bytes; the limit is {limit} "
                                         f"bytes ({limit / 1048576:g} MiB)"}, "too_large")
        if size is not None and size <= self.inline_limit:  # the hot path: no budget, no timer
            return await self._admit_small(route, request, deadline, loop)
        want = limit if size is None else size
        if not await self.budget.acquire(want, deadline):
            budget = self.budget.limit
            return _Reply(429, {"error": f"too many large admission requests in flight: this "
                                         f"{want}-byte body did not fit in the server's "
                                         f"{budget / 1048576:g} MiB budget within the "
                                         f"{self.settings.admission_deadline_seconds:g} s deadline; retry"},
                          "busy", headers={"Retry-After": "1"})
        held = [want]  # released here, or by the decision's thread when it outlives the answer
        try:
            return await self._admit_large(route, request, deadline, loop, held)
        finally:
            if held[0]:
                self.budget.release(held[0])

    async def _read(self, request: web.Request, deadline: float) -> bytes | _Reply:
        """The request body, or the reply for a body that is too large, too slow or cut off."""
        limit = self.settings.max_body_bytes
        # Reading may run past the deadline (by up to READ_GRACE_SECONDS): without the body there
        # is no uid, and without a uid no valid answer, not even the deadline's. A body already
        # received whole (the usual case) is read without arming a timer.
        try:
            if request.content.is_eof():
                return await request.read()
            async with asyncio.timeout_at(deadline + READ_GRACE_SECONDS):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _Reply(413, {"error": f"request body exceeds the limit of {limit} bytes ({limit / 1048576:g} MiB)"},
                          "too_large")
        except TimeoutError:
            return _Reply(408, {"error": f"request body not received within "
                                         f"{self.settings.admission_deadline_seconds + READ_GRACE_SECONDS:g} s"},
                          "timeout")
        except (ConnectionError, RequestPayloadError) as e:
            log.warning("client %s disconnected from %s before its body was received (%s)",
                     request.remote, request.path, str(e) or type(e).__name__)
            return _Reply(400, {"error": "client disconnected"}, "disconnected")

    async def _admit_small(self, route: Route, request: web.Request, deadline: float,
                           loop: asyncio.AbstractEventLoop) -> _Reply:
        body = await self._read(request, deadline)
        if isinstance(body, _Reply):
            return body
        return self._inline(route, body, deadline, loop)

    def _inline(self, route: Route, body: bytes, deadline: float, loop: asyncio.AbstractEventLoop) -> _Reply:
        """Parse and decide a small body on the event loop."""
        try:
            rev = review.parse_review(body)
        except review.ReviewError as e:
            return _Reply(400, {"error": str(e)}, "invalid")
        reasons = self.unable_reasons()
        if reasons:
            return self._answer(route, rev, self._unavailable_decision(reasons), "unavailable")
        if loop.time() >= deadline:
            return self._deadline_answer(route, rev)
        return self._answer(route, rev, self._decide_safely(route, rev, self.provider.state))

    async def _admit_large(self, route: Route, request: web.Request, deadline: float,
                           loop: asyncio.AbstractEventLoop, held: list[int]) -> _Reply:
        body = await self._read(request, deadline)
        if isinstance(body, _Reply):
            return body
        if len(body) <= self.inline_limit:  # no Content-Length, but small after all
            return self._inline(route, body, deadline, loop)
        # Large body: parse, then decide, in the thread pool. The parse always completes (its
        # uid is needed for any valid answer, even the deadline's); the decision is abandoned at
        # the deadline (the thread finishes it, then gives its bytes back; its result is dropped).
        try:
            rev = await loop.run_in_executor(self.executor, review.parse_review, body)
        except review.ReviewError as e:
            return _Reply(400, {"error": str(e)}, "invalid")
        del body  # the parsed review is what is kept from here on
        reasons = self.unable_reasons()
        if reasons:
            return self._answer(route, rev, self._unavailable_decision(reasons), "unavailable")
        state = self.provider.state
        work = loop.run_in_executor(self.executor, self._decide_safely, route, rev, state)
        remaining = deadline - loop.time()
        try:
            if remaining <= 0:
                raise TimeoutError
            decision = await asyncio.wait_for(asyncio.shield(work), remaining)
        except TimeoutError:
            n, held[0] = held[0], 0
            work.add_done_callback(lambda _: self.budget.release(n))
            return self._deadline_answer(route, rev)
        return self._answer(route, rev, decision)

    def _deadline_answer(self, route: Route, rev: dict) -> _Reply:
        self.metrics.deadline.labels(route.path).inc()
        log.warning("deadline: %s uid=%s not decided within %g s", route.path, rev["request"].get("uid"),
                    self.settings.admission_deadline_seconds)
        return self._answer(route, rev, self._deadline_decision(), "deadline")

    def _handler(self, route: Route):
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            reply = await self._admit(route, request)
            self.metrics.answered(route.path, reply.kind, reply.operation, reply.decision,
                                  time.perf_counter() - started)
            payload = reply.payload or orjson.dumps(reply.body)
            return web.Response(status=reply.status, body=payload, content_type=JSON, headers=reply.headers)

        handle.__name__ = f"admit_{route.path.strip('/').replace('-', '_')}"
        return handle

    # --- probes and metrics ----------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = self.not_ready_reasons()
        if reasons:
            return web.json_response({"status": "not ready", "reasons": reasons}, status=503)
        return web.json_response({"status": "ready"})

    async def _metrics(self, request: web.Request) -> web.Response:
        registries = [self.metrics.registry, *(r for r in self.extra_registries if r is not self.metrics.registry)]
        body = b"".join(generate_latest(r) for r in registries)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- background checks -----------------------------------------------------------------------

    def check_tls(self) -> bool:
        """Reload the serving certificate if its files changed (event loop thread only)."""
        if self.tls is None:
            return False
        changed = bool(self.tls.check())
        if changed:
            self.metrics.cert_reloads.inc()
        return changed

    async def run_checks(self) -> None:
        """One round of background checks: the certificate (on the loop), then the provider's
        and the extra ``checks`` (in a worker thread). Errors are logged, never raised."""
        try:
            self.check_tls()
        except Exception:
            log.exception("certificate check failed")
        for fn in ([self.provider.check] if callable(getattr(self.provider, "check", None)) else []) + list(self.checks):
            try:
                await asyncio.to_thread(fn)
            except Exception:
                log.exception("background check %r failed", fn)

    async def _background(self, app: web.Application):
        provider_start = getattr(self.provider, "start", None)
        if callable(provider_start):
            await provider_start()

        async def loop_checks():
            while True:
                await asyncio.sleep(self.check_interval)
                await self.run_checks()

        task = asyncio.create_task(loop_checks(), name="taugate-checks")
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        provider_stop = getattr(self.provider, "stop", None)
        if callable(provider_stop):
            await provider_stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def app(self) -> web.Application:
        """The aiohttp application: one POST route per ``ROUTES`` entry, plus the probes."""
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        for route in ROUTES:
            app.router.add_post(route.path, self._handler(route))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.cleanup_ctx.append(self._background)
        return app


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for ``host``:``port`` (port 0 picks a free one).
    Raises ``OSError`` (an address in use, or a host that is not an address or a resolvable
    name, e.g. ``999.1.1.1``) with ``host:port`` in its ``strerror``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:  # UnicodeError: a name IDNA cannot encode
        reason = getattr(e, "strerror", None) or "not a valid host name"
        raise OSError(errno.EADDRNOTAVAIL, f"cannot listen on {host}:{port}: {reason} "
                                           f"(give an IP address such as 127.0.0.1 or 0.0.0.0, or a resolvable "
                                           f"host name)") from None
    family, socktype, proto, _, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.setblocking(False)
    return sock


class RunningServer:
    """A started server: ``port`` (the bound one), ``url``, and ``stop()``."""

    def __init__(self, runner: web.AppRunner, server: AdmissionServer, sock: socket.socket, host: str):
        self.runner, self.server, self.sock, self.host = runner, server, sock, host
        self.port = sock.getsockname()[1]
        self.url = f"https://{host}:{self.port}"

    async def stop(self, *, drain_seconds: float = 0.0) -> None:
        """Stop: report not ready, wait ``drain_seconds`` (endpoints need time to drop the pod),
        then close listeners and let in-flight requests finish."""
        self.server.draining = True
        if drain_seconds > 0:
            await asyncio.sleep(drain_seconds)
        await self.runner.cleanup()


async def start(server: AdmissionServer, tls: TLSSource, *, host: str = "127.0.0.1", port: int = 8443,
                access_log: bool = False) -> RunningServer:
    """Start ``server`` over HTTPS on ``host``:``port`` with ``tls.context`` (reloaded in place
    by ``tls.check()`` every ``server.check_interval`` seconds). Raises ``OSError`` when the
    address cannot be bound."""
    server.tls = tls
    # Long-lived objects (cluster state, policy engine, modules) go to the permanent GC
    # generation: the collector then never rescans them, which removed 10-25 ms pauses from
    # the admission p99 (see bench/). Requests only allocate short-lived objects.
    gc.collect()
    gc.freeze()
    sock = _ListeningSocket.wrap(listen_socket(host, port), server.guard)
    runner = web.AppRunner(server.app(), access_log=log if access_log else None, handle_signals=False,
                           shutdown_timeout=5.0, keepalive_timeout=server.settings.idle_timeout_seconds)
    try:
        await runner.setup()
        site = _GuardedSite(runner, sock, server.guard, ssl_context=tls.context, backlog=512)
        await site.start()
    except BaseException:
        await runner.cleanup()
        sock.close()
        raise
    return RunningServer(runner, server, sock, host)


async def serve_forever(server: AdmissionServer, tls: TLSSource, *, host: str, port: int,
                        shutdown_delay: float = 0.0,
                        on_started: Callable[[RunningServer], Awaitable[None] | None] | None = None) -> None:
    """Run until SIGTERM or SIGINT: then not ready, ``shutdown_delay`` seconds of draining, stop.
    SIGHUP runs the background checks (certificate, state, policies) at once."""
    running = await start(server, tls, host=host, port=port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(server.run_checks()))
    try:
        if on_started is not None:
            result = on_started(running)
            if asyncio.iscoroutine(result):
                await result
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await running.stop(drain_seconds=shutdown_delay)
