"""Test helpers: a PolicyEngine on real OPA semantics and a local OPA REST stand-in.

``OpaLibraryEngine`` evaluates the same modules (the policy set's serving modules, generated
aggregate included) with ``opa-golib-python-bindings`` (OPA v1.20 as a library). ``OpaStandIn``
serves the subset of OPA's REST API that ``opa-python-client`` uses, with that library,
over plain HTTP on 127.0.0.1: ``PUT/DELETE /v1/policies/{id}``, ``PUT /v1/data/{path}``,
``POST /v1/data/{path}`` (``{"input": ...}`` -> ``{"result": ...}``, ``{}`` when undefined),
``GET /health``.
"""

from __future__ import annotations

import asyncio
import socket
import threading

from aiohttp import web
from opa_bindings import OpaEngine, OpaError, OpaUndefinedError

from taugate.webhook.decision import Violation
from taugate.webhook.policy import PolicySet


class OpaLibraryEngine:
    """``PolicyEngine`` evaluating ``data.taugate.aggregate.results`` with real OPA."""

    def __init__(self, ps: PolicySet):
        self.ps = ps
        self.digest = ps.digest
        self.engine = OpaEngine()
        for f in ps.serving_modules:
            self.engine.add_policy(f.rel, f.source)

    def evaluate(self, input: dict) -> list[Violation]:
        return self.ps.to_violations(self.engine.eval_document("taugate.aggregate.results", input))


class OpaStandIn:
    """A local OPA REST server backed by the OPA library; ``url`` once started."""

    def __init__(self) -> None:
        self.engine = OpaEngine()
        self.policies: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _rebuild(self) -> None:
        engine = OpaEngine()
        for pid, src in sorted(self.policies.items()):
            engine.add_policy(pid, src)
        self.engine = engine

    async def _put_policy(self, request: web.Request) -> web.Response:
        pid = request.match_info["id"]
        self.requests.append(("PUT", request.path))
        source = await request.text()
        try:
            candidate = OpaEngine()
            for other, src in sorted({**self.policies, pid: source}.items()):
                candidate.add_policy(other, src)
            candidate.eval_query("true")
        except OpaError as e:
            return web.json_response({"code": "invalid_parameter", "message": e.message,
                                      "errors": [{"code": e.code, "message": e.message}]}, status=400)
        self.policies[pid] = source
        self.engine = candidate
        return web.json_response({})

    async def _delete_policy(self, request: web.Request) -> web.Response:
        self.requests.append(("DELETE", request.path))
        if self.policies.pop(request.match_info["id"], None) is None:
            return web.json_response({"code": "resource_not_found", "message": "policy not found"}, status=404)
        self._rebuild()
        return web.json_response({})

    async def _put_data(self, request: web.Request) -> web.Response:
        self.requests.append(("PUT", request.path))
        path = request.match_info["path"].strip("/").replace("/", ".")
        self.engine.add_data(await request.json(), path)
        return web.Response(status=204)

    async def _post_data(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", request.path))
        body = await request.json()
        path = request.match_info["path"].strip("/").replace("/", ".")
        try:
            value = self.engine.eval_document(path, body.get("input"))
        except OpaUndefinedError:
            return web.json_response({})
        except OpaError as e:
            return web.json_response({"code": "internal_error", "message": e.message}, status=500)
        return web.json_response({"result": value})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({})

    def forget_policies(self) -> None:
        """Simulate a restarted OPA server: every policy is gone."""
        self.policies.clear()
        self._rebuild()

    def start(self) -> OpaStandIn:
        app = web.Application()
        app.router.add_put("/v1/policies/{id:.+}", self._put_policy)
        app.router.add_delete("/v1/policies/{id:.+}", self._delete_policy)
        app.router.add_put("/v1/data/{path:.*}", self._put_data)
        app.router.add_post("/v1/data/{path:.*}", self._post_data)
        app.router.add_get("/health", self._health)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._runner = web.AppRunner(app)
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(web.SockSite(self._runner, sock).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="opa-stand-in", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("OPA stand-in did not start")
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
