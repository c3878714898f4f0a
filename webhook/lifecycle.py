"""Running an ``AdmissionServer`` over HTTPS: ``start`` (bind, TLS, the guarded site),
``RunningServer.stop`` (drain, then close) and ``serve_forever`` (signals: SIGTERM/SIGINT stop,
SIGHUP runs the background checks at once)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from taugate.webhook.connections import GuardedSite, ListeningSocket, listen_socket
from taugate.webhook.providers import TLSSource
from taugate.webhook.server import AdmissionServer

log = logging.getLogger("taugate.webhook")


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
    sock = ListeningSocket.wrap(listen_socket(host, port), server.guard)
    runner = web.AppRunner(server.app(), access_log=log if access_log else None, handle_signals=False,
                           shutdown_timeout=5.0, keepalive_timeout=server.settings.idle_timeout_seconds)
    try:
        await runner.setup()
        site = GuardedSite(runner, sock, server.guard, ssl_context=tls.context, backlog=512)
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
