"""The OPA-server backend of the policy engine: the same policy set pushed to an OPA sidecar on
localhost over plain HTTP, each decision the same document the embedded engine evaluates, so both
backends decide alike; enforcement is applied in Python.

Every call to OPA runs on the engine's own event loop (a daemon thread); ``evaluate`` is called
from the server's worker threads and refused on a thread running an event loop (it would block
it). OPA's own evaluation error (HTTP 500 ``internal_error`` with an ``eval_*`` error) is the
policies' failure (``PolicyEvaluationError``); anything else gone wrong is ``PolicyUnavailable``.
A reload is pushed before it becomes active; when the push fails the old set is pushed again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from taugate.webhook.decision import Violation
from taugate.webhook.policy.sets import (
    AGGREGATE_PACKAGE,
    PolicyError,
    PolicyEvaluationError,
    PolicySet,
    PolicyUnavailable,
)
from taugate.webhook.policy.store import PolicyStore

log = logging.getLogger("taugate.policy.opa")

POLICY_ID_PREFIX = "taugate"
RESULTS_PATH = "/v1/data/" + AGGREGATE_PACKAGE.replace(".", "/") + "/results"
DEFAULT_TIMEOUT_SECONDS = 1.0

T = TypeVar("T")


def policy_id(rel: str) -> str:
    return f"{POLICY_ID_PREFIX}/{rel}"


def _opa_error(status: int, body: Any) -> tuple[str, str | None, int | None]:
    """OPA's error answer (``{"code", "message", "errors": [{"message", "location"}]}``) as
    (one-line reason, file, line)."""
    if not isinstance(body, dict):
        return f"HTTP {status}", None, None
    first = (body.get("errors") or [None])[0]
    if isinstance(first, dict):
        loc = first.get("location")
        loc = loc if isinstance(loc, dict) else {}
        file = loc.get("file")
        if isinstance(file, str) and file.startswith(POLICY_ID_PREFIX + "/"):
            file = file[len(POLICY_ID_PREFIX) + 1:]
        return str(first.get("message") or body.get("message")), file, loc.get("row")
    return f"{body.get('code') or 'HTTP ' + str(status)}: {body.get('message') or ''}".strip(), None, None


def _refuse_on_a_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("the OPA backend waits on I/O: call it from a worker thread (asyncio.to_thread), "
                       "not on an event loop")


class OpaServerPolicyEngine:
    """``PolicyEngine`` backed by an OPA server at ``url``. An answer without a result (the server
    restarted and lost its policies) pushes the set again and retries once, within the same
    ``timeout_s``."""

    remote = True

    def __init__(self, store: PolicyStore, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_SECONDS):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PolicyError(f"opa_url {url!r} is not an http(s) URL such as http://127.0.0.1:8181")
        _refuse_on_a_loop()
        self.url = url.rstrip("/")
        self.store = store
        self.timeout_s = float(timeout_s)
        self._pushed: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="taugate-opa", daemon=True)
        self._thread.start()
        self._session: aiohttp.ClientSession = self._wait(self._open(), self.timeout_s)
        self._push_lock = self._wait(self._make_lock(), self.timeout_s)
        try:
            store.add_activation_hook(self._activate)
        except BaseException:
            self.close()
            raise

    @property
    def digest(self) -> str:
        return self.store.current.digest

    # --- the engine's event loop -------------------------------------------------------------

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                     json_serialize=lambda v: orjson.dumps(v).decode())

    async def _make_lock(self) -> asyncio.Lock:
        return asyncio.Lock()

    def _wait(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Wait from this (non-loop) thread. The coroutines bound themselves; ``timeout_s`` (plus a
        second) only guards a dead loop."""
        try:
            _refuse_on_a_loop()
        except RuntimeError:
            coro.close()
            raise
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s + 1.0)
        except TimeoutError:
            future.cancel()
            raise PolicyUnavailable(f"OPA server at {self.url}: no answer within {timeout_s:g} s") from None

    async def _call(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        """(HTTP status, JSON body or None); ``PolicyUnavailable`` when unreachable or not JSON."""
        try:
            async with self._session.request(method, self.url + path, **kw) as r:
                raw = await r.read()
                return r.status, orjson.loads(raw) if raw else None
        except aiohttp.ClientError as e:
            raise PolicyUnavailable(f"OPA server at {self.url} failed: {type(e).__name__}: {e}") from None
        except orjson.JSONDecodeError:
            raise PolicyUnavailable(f"OPA server at {self.url} answered {method} {path} with something "
                                    f"that is not JSON") from None

    async def push_async(self, ps: PolicySet) -> None:
        """Helpers first, the aggregate last, then the ids the set no longer has are deleted."""
        modules = sorted(ps.serving_modules,
                         key=lambda f: (f.package == AGGREGATE_PACKAGE, not f.rel.startswith("lib/"), f.rel))
        async with self._push_lock:
            for f in modules:
                status, body = await self._call("PUT", "/v1/policies/" + quote(policy_id(f.rel)),
                                                data=f.source.encode(), headers={"Content-Type": "text/plain"})
                if status == 400:
                    reason, file, line = _opa_error(status, body)
                    where = f.display if file in (None, f.rel) else file
                    raise PolicyError(f"OPA rejected the module: {reason}", where, line)
                if status != 200:
                    raise PolicyUnavailable(f"OPA server at {self.url} answered HTTP {status} to a policy push "
                                            f"({_opa_error(status, body)[0]})")
            wanted = {policy_id(f.rel) for f in modules}
            for stale in sorted(self._pushed - wanted):
                status, body = await self._call("DELETE", "/v1/policies/" + quote(stale))
                if status not in (200, 404):  # 404: already gone
                    log.warning("could not delete stale OPA policy %s: HTTP %d %s", stale, status,
                                _opa_error(status, body)[0])
            self._pushed = wanted

    async def _query(self, input: dict) -> tuple[int, Any]:
        return await self._call("POST", RESULTS_PATH, json={"input": input})

    async def evaluate_async(self, input: dict, ps: PolicySet) -> list[Violation]:
        try:
            async with asyncio.timeout(self.timeout_s):
                status, body = await self._query(input)
                if status == 200 and isinstance(body, dict) and "result" not in body:
                    log.warning("OPA at %s has no taugate policies (restarted?); pushing them again", self.url)
                    try:
                        await self.push_async(ps)
                    except PolicyError as e:
                        raise PolicyUnavailable(f"OPA server at {self.url} lost the policies and refused them "
                                                f"again: {e}") from None
                    status, body = await self._query(input)
        except TimeoutError:
            raise PolicyUnavailable(f"OPA server at {self.url} did not answer within {self.timeout_s:g} s") from None
        if status == 500 and isinstance(body, dict) and any(
                isinstance(e, dict) and str(e.get("code", "")).startswith("eval_") for e in body.get("errors") or []):
            reason, file, line = _opa_error(status, body)
            raise await self._isolate(input, ps, PolicyEvaluationError(reason, file, line))
        if status != 200 or not isinstance(body, dict):
            raise PolicyUnavailable(f"OPA server at {self.url} answered HTTP {status} to the policy query "
                                    f"({_opa_error(status, body)[0]})")
        if "result" not in body:
            raise PolicyUnavailable(f"OPA server at {self.url} returned no result for data.{AGGREGATE_PACKAGE}.results")
        return ps.to_violations(body["result"])

    async def _isolate(self, input: dict, ps: PolicySet, error: PolicyEvaluationError) -> PolicyEvaluationError:
        """Each policy's rules alone (``PolicySet.parts``), after the whole query failed."""
        raw: list = []
        failed: dict[str, str] = {}
        for key, _kind, rule in ps.parts:
            status, body = await self._call("POST", "/v1/" + rule.replace(".", "/"), json={"input": input})
            if status == 200 and isinstance(body, dict):
                raw.extend(body.get("result") or [])
            else:
                failed.setdefault(ps.policies.get(key, key), _opa_error(status, body)[0])
        if not failed:
            return error
        results = ps.to_violations([r for r in raw if ps.policies.get(r[0], r[0]) not in failed])
        return PolicyEvaluationError(error.reason, error.file, error.line, failed=failed, results=results)

    # --- what other threads call ---------------------------------------------------------------

    def evaluate(self, input: dict) -> list[Violation]:
        """Call it from a thread without a running event loop."""
        return self._wait(self.evaluate_async(input, self.store.current), self.timeout_s)

    def push(self, ps: PolicySet) -> None:
        self._wait(self._bounded_push(ps), self.timeout_s * (len(ps.serving_modules) + 1))

    async def _bounded_push(self, ps: PolicySet) -> None:
        try:
            async with asyncio.timeout(self.timeout_s * (len(ps.serving_modules) + 1)):
                await self.push_async(ps)
        except TimeoutError:
            raise PolicyUnavailable(f"OPA server at {self.url} did not take the policies in time") from None

    def _activate(self, new: PolicySet, old: PolicySet | None) -> None:
        """The store's activation hook: on failure ``old`` is pushed back and ``PolicyError``
        raised (the store keeps serving ``old``)."""
        try:
            self.push(new)
        except PolicyUnavailable as e:
            failure: PolicyError = PolicyError(f"cannot push policies to OPA: {e.reason}")
        except PolicyError as e:
            failure = e
        else:
            return
        if old is not None:
            try:
                self.push(old)
            except (PolicyError, PolicyUnavailable) as e:
                log.error("could not restore the previous policy set on OPA at %s: %s", self.url, e)
        raise failure

    def close(self) -> None:
        """Idempotent."""
        if self._loop.is_closed():
            return
        session = getattr(self, "_session", None)
        if session is not None:
            asyncio.run_coroutine_threadsafe(session.close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
