"""The admission HTTPS server (aiohttp): size limit, deadline, JSON, metrics, probes. It only moves
bytes; ``webhook.review`` decides. A light body is decided on the event loop, a heavy one
(``_heavy``), a scale and every review of a ``remote`` engine in the thread pool, so the deadline
answers (denied, 504) while work still runs; an inline decision is bounded by ``_heavy`` instead.
Bounded resources: ``webhook/connections.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.webhook import approval, decision_log, review, scale
from taugate.webhook.connections import ByteBudget, ConnectionGuard
from taugate.webhook.decision import Decision
from taugate.webhook.metrics import AdmissionMetrics
from taugate.webhook.policy.sets import PolicyUnavailable
from taugate.webhook.providers import StateProvider, TLSSource
from taugate.webhook.routes import ROUTED_KINDS, ROUTES, Route
from taugate.workqueue import WorkQueue, cancel

log = logging.getLogger("taugate.webhook")

INLINE_LIMIT = 64 * 1024
"""Bodies up to this many bytes are decided on the event loop; larger ones in a thread."""

INLINE_OBJECTS = 512
"""Bodies with more JSON objects than this (``{`` bytes, counted before parsing: a bound on the
containers, env entries, volumes and tolerations a review holds, since each is an object) are
decided in a thread whatever their size (docs/performance.md, "Heavy reviews")."""

READ_GRACE_SECONDS = 1.0
"""How long past the deadline a request body may still arrive (then HTTP 408): with the webhook
configurations' ``timeoutSeconds: 3`` and the 2 s deadline, the apiserver waits that long anyway."""

REMOTE_ENGINE_WORKERS = 16
"""Threads deciding reviews when the policy engine is ``remote`` (an OPA server): each waits on one
round trip (median 2.2 ms to a local OPA on the 2-core dev machine), so 16 keep more reviews in
flight than two cores can decide, and bound the threads a late OPA server can hold at once."""

CLAIM_MARK = b"resourceClaim"
"""In a body naming DRA claims (``resourceClaims``, ``resourceClaimTemplateName``...): its decision may
read a claim the watch has not delivered yet from the API server (``ClusterState.claim_spec``), so it is
decided in the thread pool, never on the event loop."""

KNOWN_KINDS = ROUTED_KINDS
"""Kinds kept as metric labels; anything else is ``other`` (a request body cannot mint labels)."""

JSON = "application/json"


_DECIDERS: dict[str, Callable[[dict, ClusterState, Settings, Any, scale.Reader | None], Decision]] = {
    # The server parsed the review for this one answer: mutation may edit it in place.
    "mutate.workloads.tau.azure.com": lambda req, st, s, e, _: review.decide(req, st, s, e, in_place=True),
    "validate.workloads.tau.azure.com": lambda req, st, s, e, read: scale.validate(req, st, s, e, read),
    "mutate.resources.tau.azure.com": lambda req, st, s, e, _: approval.mutate(req),
    "validate.resources.tau.azure.com": lambda req, st, s, e, _: review.validate_tau(req, st, s),
}
if set(_DECIDERS) != {r.name for r in ROUTES}:
    raise RuntimeError(f"webhook.server has deciders for {sorted(_DECIDERS)} but ROUTES names "
                       f"{sorted(r.name for r in ROUTES)}")


@dataclass(slots=True)
class _Settled:
    """A review decided and rendered (``body``, serialised in ``payload`` when not None), or,
    with ``decision`` None, not decided because the policy backend could not answer (``body``
    is then the HTTP 503 answer, a ``metav1.Status`` naming the reason)."""

    decision: Decision | None
    body: dict
    payload: bytes | None = None


@dataclass
class _Reply:
    """An HTTP answer: ``body`` as JSON (or already serialised in ``payload``)."""

    status: int
    body: dict
    decision: str
    kind: str = ""
    operation: str = ""
    payload: bytes | None = None
    headers: dict | None = None


def _body_size(request: web.Request) -> int | None:
    """The body's size as the server will read it, or None when ``Content-Length`` does not say
    (absent, chunked, or a ``Content-Encoding`` aiohttp decodes: it counts the encoded bytes)."""
    if request.headers.get("Content-Encoding", "identity").lower() not in ("identity", ""):
        return None
    return request.content_length


def _label_kind(req: dict) -> str:
    kind = (req.get("kind") or {}).get("kind") if isinstance(req.get("kind"), dict) else None
    return kind if kind in KNOWN_KINDS else "other"


def _where(req: dict) -> str:
    """``namespace/name`` for log lines (``generateName*`` before a name exists)."""
    name = req.get("name")
    if not name:
        meta = (req.get("object") or {}).get("metadata") if isinstance(req.get("object"), dict) else None
        name = f"{meta.get('generateName', '')}*" if isinstance(meta, dict) else "?"
    return f"{req.get('namespace') or ''}/{name}"


def _label_operation(req: dict) -> str:
    op = req.get("operation")
    return op if op in review.OPERATIONS else "other"


CHECKS_KEY = "checks"


class AdmissionServer:
    """The aiohttp application serving the admission webhooks.

    ``policies_required``: not ready, denying with 503, until an engine is set. ``checks``: run
    every ``check_interval`` seconds in a worker thread. ``extra_registries`` are exposed on
    ``/metrics`` too (process metrics, the policy reload counters). ``inline_limit`` (bytes) and
    ``inline_objects`` (JSON objects) bound what is decided on the event loop (``_heavy``).
    """

    def __init__(self, provider: StateProvider, settings: Settings | None = None, engine: Any = None, *,
                 policies_required: bool = True, registry: CollectorRegistry | None = None,
                 inline_limit: int = INLINE_LIMIT, inline_objects: int = INLINE_OBJECTS, executor_workers: int = 2,
                 checks: tuple[Callable[[], Any], ...] = (), check_interval: float = 1.0,
                 extra_registries: tuple[CollectorRegistry, ...] = (REGISTRY,), events: Any = None):
        self.provider = provider
        self.events = events
        self.settings = settings or Settings()
        self.engine = engine
        if getattr(engine, "remote", False):  # each decision waits on the policy backend (at most opa_timeout_seconds)
            executor_workers = max(executor_workers, REMOTE_ENGINE_WORKERS)
        self.policies_required = policies_required
        self.inline_limit = inline_limit
        self.inline_objects = inline_objects
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

    def _state_age(self) -> float:
        return float(self.provider.age_seconds())

    @property
    def remote(self) -> bool:
        """The engine waits on I/O (an OPA server): decisions run in the thread pool."""
        return bool(getattr(self.engine, "remote", False))

    def unable_reasons(self) -> list[str]:
        """Why reviews are denied with 503 now (no cluster state, no policy library)."""
        reasons = []
        if not self.provider.ready or self.provider.state is None:
            reasons.append("no cluster state yet")
        if self.policies_required and self.engine is None:
            reasons.append("no policy library loaded")
        return reasons

    def not_ready_reasons(self) -> list[str]:
        """Why ``/readyz`` is 503: ``unable_reasons``, or draining (reviews still arriving are
        decided normally)."""
        return (["shutting down"] if self.draining else []) + self.unable_reasons()

    def _settle(self, route: Route, rev: dict, decide: Callable[[], Decision]) -> _Settled:
        """Decide and render one review, on the loop or in a worker thread.

        ``PolicyUnavailable`` settles with no decision: HTTP 503 with a ``metav1.Status`` naming
        the reason, so the webhook's ``failurePolicy`` decides (a non-200 answer is a failed call:
        k8s.io/apiserver pkg/admission/plugin/webhook/validating/dispatcher.go ``callHook``; client-go
        decodes the Status, k8s.io/client-go rest/request.go ``Result.Error``, so the reason reaches
        the user). Any other exception is a bug: logged, and denied with code 500."""
        req = rev["request"]
        try:
            decision = decide()
            body = review.review_response(rev, decision)
            return _Settled(decision, body, orjson.dumps(body))
        except PolicyUnavailable as e:
            log.warning("policy backend unavailable: %s uid=%s not decided: %s", route.path, req.get("uid"), e.reason)
            return _Settled(None, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                   "reason": "ServiceUnavailable", "code": 503,
                                   "message": f"taugate's policy backend could not answer ({e.reason}); nothing was "
                                              f"decided, so the webhook's failurePolicy applies"})
        except Exception as e:  # a bug: fail closed with a valid answer
            log.exception("internal error deciding %s uid=%s", route.path, req.get("uid"))
            reason = (f"taugate could not decide because of an internal error ({type(e).__name__}); the request "
                      f"is denied; see the taugate webhook log")
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": req.get("uid", ""), "allowed": False,
                                 "status": {"code": 500, "reason": "InternalError", "message": reason}}}
            return _Settled(Decision.deny([], reason=reason, code=500), body)

    def _deadline_decision(self) -> Decision:
        s = self.settings.admission_deadline_seconds
        return Decision.deny([], code=504, reason=(
            f"taugate could not decide within its {s:g} s admission deadline, so the request is denied "
            f"rather than admitted unchecked; retry, and tell the platform team if it keeps happening"))

    def _unavailable_decision(self, reasons: list[str]) -> Decision:
        return Decision.deny([], code=503, reason=f"taugate is not ready ({'; '.join(reasons)}); retry shortly")

    def _answer(self, route: Route, rev: dict, settled: _Settled, label: str | None = None) -> _Reply:
        """The HTTP reply, with its metrics and log lines (event loop)."""
        req = rev["request"]
        kind, operation = _label_kind(req), _label_operation(req)
        decision = settled.decision
        if decision is None:
            return _Reply(503, settled.body, "policy_unavailable", kind, operation)
        if label is None:
            label = ("allowed" if decision.allowed and not decision.patch else "patched" if decision.allowed
                     else "error" if decision.code == 500 else "denied")
        for v in decision.violations:
            self.metrics.violations.labels(route.path, v.policy, v.action).inc()
        for v in decision.dryrun:
            self.metrics.violations.labels(route.path, v.policy, "dryrun").inc()
        for policy in decision.policy_failures:
            self.metrics.policy_failures.labels(route.path, policy).inc()
        if decision.policy_failures:
            log.warning("policy failed at run time: %s on %s %s uid=%s (%s)", ", ".join(decision.policy_failures),
                        kind, _where(req), req.get("uid"), "denied" if not decision.allowed else "not denying")
        decision_log.log_decision(route.path, req, decision)
        if self.events is not None:  # never waits: a bounded queue, written by a background thread
            self.events.offer(route.path, req, decision)
        return _Reply(200, settled.body, label, kind, operation, settled.payload)

    async def _admit(self, route: Route, request: web.Request) -> _Reply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.admission_deadline_seconds
        limit = self.settings.max_body_bytes
        size = _body_size(request)
        if size is not None and size > limit:
            return _Reply(413, {"error": f"request body is {size} bytes; the limit is {limit} "
                                         f"bytes ({limit / 1048576:g} MiB)"}, "too_large")
        if size is not None and size <= self.inline_limit:  # the hot path: no budget, no timer
            return await self._decide_body(route, request, deadline, loop, None)
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
            return await self._decide_body(route, request, deadline, loop, held)
        finally:
            if held[0]:
                self.budget.release(held[0])

    async def _read(self, request: web.Request, deadline: float) -> bytes | _Reply:
        """The body, or the reply for one too large (413), too slow (408) or cut off."""
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

    async def _decide_body(self, route: Route, request: web.Request, deadline: float,
                           loop: asyncio.AbstractEventLoop, held: list[int] | None) -> _Reply:
        """The parse always completes (its uid is needed for any valid answer, even the
        deadline's); a threaded decision is abandoned at the deadline (the thread finishes it,
        then gives the ``held`` bytes back; its result is dropped)."""
        body = await self._read(request, deadline)
        if isinstance(body, _Reply):
            return body
        threaded = self._heavy(body)
        if not threaded and not self.remote:
            now = self._decide_now(route, body, late=loop.time() >= deadline)
            return now if isinstance(now, _Reply) else await self._decide_parsed(route, now, deadline, loop, held)
        try:
            rev = await loop.run_in_executor(self.executor, review.parse_review, body) if threaded \
                else review.parse_review(body)
        except review.ReviewError as e:
            return _Reply(400, {"error": str(e)}, "invalid")
        del body
        return await self._decide_parsed(route, rev, deadline, loop, held)

    def _reader(self) -> scale.Reader | None:
        """The state provider's ``read_object`` (a scale's parent), or None (a snapshot has none)."""
        return getattr(self.provider, "read_object", None)

    async def _decide_parsed(self, route: Route, rev: dict, deadline: float, loop: asyncio.AbstractEventLoop,
                             held: list[int] | None) -> _Reply:
        """Decide in the thread pool, answering by the deadline."""
        state = self._state_or_reply(route, rev)
        if isinstance(state, _Reply):
            return state
        decider, read = _DECIDERS[route.name], self._reader()

        def decide() -> Decision:
            return decider(rev["request"], state, self.settings, self.engine, read)

        work = loop.run_in_executor(self.executor, self._settle, route, rev, decide)
        remaining = deadline - loop.time()
        try:
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancel (CPython gh-86296)
                settled = await asyncio.shield(work)
        except TimeoutError:
            if held:
                n, held[0] = held[0], 0
                work.add_done_callback(lambda _: self.budget.release(n))
            return self._deadline_answer(route, rev)
        return self._answer(route, rev, settled)

    def _heavy(self, body: bytes) -> bool:
        """True when ``body`` goes to the thread pool: more than ``inline_limit`` bytes, more than
        ``inline_objects`` ``{`` bytes (one pass in C, ~5 us for 64 KiB; a ``{`` inside a string
        only over-counts, which is safe), or naming DRA claims (``CLAIM_MARK``)."""
        return len(body) > self.inline_limit or CLAIM_MARK in body or body.count(b"{") > self.inline_objects

    def _state_or_reply(self, route: Route, rev: dict) -> ClusterState | _Reply:
        """The state to decide ``rev`` with (read once: the one the readiness check saw), or the
        503 denial when reviews cannot be decided now."""
        state = self.provider.state
        reasons = self.unable_reasons() or ([] if state is not None else ["no cluster state yet"])
        if reasons or state is None:
            return self._answer(route, rev, self._settle(route, rev, lambda: self._unavailable_decision(reasons)),
                                "unavailable")
        return state

    def _decide_now(self, route: Route, body: bytes, late: bool = False) -> _Reply | dict:
        """Parse and decide a small body on the event loop: no timer, no thread. ``late``: the
        deadline passed while the body arrived (parsed only for its uid). A review whose decision
        reads the API (``scale.is_scale``) is returned parsed, for the thread pool."""
        try:
            rev = review.parse_review(body)
        except review.ReviewError as e:
            return _Reply(400, {"error": str(e)}, "invalid")
        state = self._state_or_reply(route, rev)
        if isinstance(state, _Reply):
            return state
        if late:
            return self._deadline_answer(route, rev)
        decider, request = _DECIDERS[route.name], rev["request"]
        if scale.is_scale(request):
            return rev
        return self._answer(route, rev, self._settle(
            route, rev, lambda: decider(request, state, self.settings, self.engine, None)))

    def _deadline_answer(self, route: Route, rev: dict) -> _Reply:
        self.metrics.deadline.labels(route.path).inc()
        log.warning("deadline: %s uid=%s not decided within %g s", route.path, rev["request"].get("uid"),
                    self.settings.admission_deadline_seconds)
        return self._answer(route, rev, self._settle(route, rev, self._deadline_decision), "deadline")

    def _handler(self, route: Route):
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            size = _body_size(request)
            if size is not None and size <= self.inline_limit and size <= self.settings.max_body_bytes \
                    and not self.remote and request.content.is_eof():
                # A light body already received whole is decided at once; a heavy one goes to the
                # thread pool through _admit (aiohttp keeps the body read).
                body = await request.read()
                now = await self._admit(route, request) if self._heavy(body) else self._decide_now(route, body)
                if isinstance(now, _Reply):
                    reply = now
                else:  # a decision that reads the API (a scale): in the thread pool, by the deadline
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + self.settings.admission_deadline_seconds
                    reply = await self._decide_parsed(route, now, deadline, loop, None)
            else:
                reply = await self._admit(route, request)
            self.metrics.answered(route.path, reply.kind, reply.operation, reply.decision,
                                  time.perf_counter() - started)
            payload = reply.payload or orjson.dumps(reply.body)
            return web.Response(status=reply.status, body=payload, content_type=JSON, headers=reply.headers)

        handle.__name__ = f"admit_{route.path.strip('/').replace('-', '_')}"
        return handle

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = self.not_ready_reasons()
        condition = getattr(getattr(self.engine, "store", None), "condition", None)
        conditions = {"conditions": [condition()]} if condition is not None else {}
        if reasons:
            return web.json_response({"status": "not ready", "reasons": reasons, **conditions}, status=503)
        return web.json_response({"status": "ready", **conditions})

    async def _metrics(self, request: web.Request) -> web.Response:
        registries = [self.metrics.registry, *(r for r in self.extra_registries if r is not self.metrics.registry)]
        body = b"".join(generate_latest(r) for r in registries)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def check_tls(self) -> bool:
        """Reload the serving certificate if its files changed (event loop thread only)."""
        if self.tls is None:
            return False
        changed = bool(self.tls.check())
        if changed:
            self.metrics.cert_reloads.inc()
        return changed

    async def run_checks(self) -> None:
        """The certificate (on the loop), then the provider's and the extra ``checks`` (in a worker
        thread). Errors are logged, never raised."""
        try:
            self.check_tls()
        except Exception:
            log.exception("certificate check failed")
        provider_check = getattr(self.provider, "check", None)  # optional in the StateProvider protocol
        for fn in ([provider_check] if callable(provider_check) else []) + list(self.checks):
            try:
                await asyncio.to_thread(fn)
            except Exception:
                log.exception("background check %r failed", fn)

    async def _background(self, app: web.Application):
        provider_start = getattr(self.provider, "start", None)
        if callable(provider_start):
            await provider_start()

        checks = WorkQueue()

        async def tick(_key: object) -> None:
            await self.run_checks()
            checks.add(CHECKS_KEY, self.check_interval)

        checks.add(CHECKS_KEY, self.check_interval)
        task = asyncio.create_task(checks.run(tick), name="taugate-checks")
        yield
        await cancel(task)
        provider_stop = getattr(self.provider, "stop", None)
        if callable(provider_stop):
            await provider_stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def app(self) -> web.Application:
        """One POST route per ``ROUTES`` entry, plus the probes."""
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        for route in ROUTES:
            app.router.add_post(route.path, self._handler(route))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.cleanup_ctx.append(self._background)
        return app
