"""Connection limits of the admission server (each a ``Settings`` field, counted in ``/metrics``).
A body over ``inline_limit`` reserves its size from ``max_bytes_in_flight`` before it is read
(unread, TCP flow control holds it) and gets 429 with ``Retry-After`` at the deadline; small
bodies skip the budget (bounded by the connection limit times 64 KiB). At ``max_connections`` the
longest-idle connection is closed to make room; ``header_timeout_seconds`` bounds the TLS
handshake and a request head (slowloris).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("taugate.webhook")


class ByteBudget:
    """A budget of ``limit`` bytes shared by the requests in flight (event loop thread only).

    ``acquire(n, deadline)`` waits, first come first served, and returns False when the loop time
    ``deadline`` passes first; ``release(n)`` wakes the waiters that now fit."""

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
    """Enforces ``max_connections`` and the header timeout at two points:

    - at ``accept()`` (``ListeningSocket``), before the TLS handshake: ``sockets`` counts the
      accepted sockets still open (asyncio allocates a 256 KiB TLS read buffer for each, so
      1,000 connections that never finish a handshake held 300 MB before this limit);
    - after the handshake (``GuardedHandler``): ``open`` holds the HTTP connections, the
      candidates for eviction (and the limit itself under uvloop, whose accept is native).

    At the limit the longest-idle connection is closed (``evicted``); when none is idle the new
    one is (``refused``). ``closed`` counts by reason; ``on_close(reason)`` is called for each."""

    def __init__(self, max_connections: int, header_timeout: float):
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.sockets = 0
        self.open: dict[GuardedHandler, None] = {}
        self.closed = {"evicted": 0, "refused": 0, "header_timeout": 0}
        self._logged = dict(self.closed)
        self._last_log = 0.0
        self.on_close: Callable[[str], None] = lambda reason: None

    def accepted(self) -> bool:
        """False when the socket must be closed (at the limit, none idle)."""
        if self.sockets >= self.max_connections and not self._make_room():
            return False
        self.sockets += 1
        return True

    def socket_closed(self) -> None:
        self.sockets -= 1

    def opened(self, handler: GuardedHandler) -> bool:
        """A connection finished its TLS handshake; False when it must be closed."""
        if len(self.open) >= self.max_connections and not self._make_room():
            return False
        self.open[handler] = None
        return True

    def lost(self, handler: GuardedHandler) -> None:
        self.open.pop(handler, None)

    def head_timed_out(self) -> None:
        self._count("header_timeout")

    def _make_room(self) -> bool:
        """Close the connection idle longest (no request in flight); False (counted as
        ``refused``) when every connection is busy. Scans only at the limit."""
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


class AcceptedSocket(socket.socket):
    """Tells its ``ConnectionGuard`` when it is closed."""

    __slots__ = ("_guard",)
    _guard: ConnectionGuard | None

    def close(self) -> None:
        guard, self._guard = getattr(self, "_guard", None), None
        if guard is not None:
            guard.socket_closed()
        super().close()


class ListeningSocket(socket.socket):
    """The listening socket; its ``accept()`` (which asyncio's selector loop calls) applies
    ``ConnectionGuard.accepted`` before any TLS state exists for the connection."""

    __slots__ = ("_guard",)
    _guard: ConnectionGuard

    def accept(self):
        # socket.socket.accept does the same: typeshed leaves the C type's private _accept out.
        fd, addr = self._accept()  # type: ignore[attr-defined]
        conn = AcceptedSocket(self.family, self.type, self.proto, fileno=fd)
        if not self._guard.accepted():
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()  # reset at once: no TLS, no buffers
            raise ConnectionAbortedError  # asyncio: stop accepting for this loop tick
        conn._guard = self._guard
        return conn, addr

    @classmethod
    def wrap(cls, sock: socket.socket, guard: ConnectionGuard) -> ListeningSocket:
        listener = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        listener._guard = guard
        return listener


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, registered with the ``ConnectionGuard``, with a header
    timeout (armed when bytes of a request head arrive, checked once when it fires: a few
    attribute reads per received chunk)."""

    __slots__ = ("_guard", "_head_timer", "_head_mark", "idle_since")

    def __init__(self, guard: ConnectionGuard, manager: Any, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_mark = -1
        self.idle_since = time.monotonic()

    @property
    def idle(self) -> bool:
        """Between requests: no head has arrived yet, or aiohttp's ``start()`` waits for the next
        one (its own test for an idle connection in ``_process_keepalive``). A partial head counts
        as idle; a request taken from the queue whose handler has not started yet does not (on
        Python 3.11 aiohttp starts the handler as a task, one loop step later)."""
        if self._force_close:
            return False
        waiter = self._waiter
        return self._request_count == 0 or (waiter is not None and not waiter.done())

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
        # Still idle after the bytes: they are the start of a head (start() reads a body to its
        # end before it waits for the next head), not a body's late record.
        if self._head_timer is None and self.idle:
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


class GuardedSite(web.SockSite):
    """Connections are ``GuardedHandler``; the TLS handshake is bounded by the header timeout."""

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

        def protocol() -> GuardedHandler:  # aiohttp's Server.__call__, with our handler class
            return GuardedHandler(guard, server, loop=loop, **server._kwargs)

        self._server = await loop.create_server(
            protocol, sock=self._sock, ssl=self._ssl_context, backlog=self._backlog,
            ssl_handshake_timeout=guard.header_timeout if self._ssl_context else None)  # None: plain HTTP


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0 picks a free one). Raises ``OSError`` (an address in
    use, or a host that is no address or resolvable name, e.g. ``999.1.1.1``) with ``host:port``
    in its ``strerror``."""
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
