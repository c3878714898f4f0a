"""The header timeout (slowloris) is armed by the first bytes of a request head, never by a body's
late record: on Python 3.11 aiohttp takes a request from its queue and starts its handler one loop
step later, and a body record that arrived in that step armed the timer, which then closed the
healthy keep-alive connection 10 s later between two requests (the API server's next POST on it
failed with EOF; one create of 10,000 at 5,000 Nodes). The step is reproduced on any Python: the
handler below receives the body's second half itself, just before aiohttp's handler starts."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from taugate.webhook import connections
from taugate.webhook.connections import ConnectionGuard, GuardedSite, ListeningSocket, listen_socket
from tests.waiting import until

BODY = json.dumps({"review": "x" * 2000}).encode()


def head(length: int) -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: taugate\r\nContent-Type: application/json\r\n" \
           b"Content-Length: %d\r\n\r\n" % length


class BodyLateHandler(connections.GuardedHandler):
    """Feeds the rest of the first request's body between the queue and the handler's start, and
    notes whether the connection counted as idle there (it must not: a request is taken)."""

    rest = b""
    idle_in_the_step: list[bool] = []

    async def _handle_request(self, request, start_time, request_handler):
        rest, BodyLateHandler.rest = BodyLateHandler.rest, b""
        if rest:
            BodyLateHandler.idle_in_the_step.append(self.idle)
            self.data_received(rest)
        return await super()._handle_request(request, start_time, request_handler)


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def response(reader: asyncio.StreamReader) -> bytes:
    head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head_bytes.startswith(b"HTTP/1.1 200"), head_bytes
    length = int(next(line.split(b":")[1] for line in head_bytes.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    return await asyncio.wait_for(reader.readexactly(length), 10)


async def test_a_body_record_before_its_handler_starts_arms_no_header_timeout(monkeypatch):
    monkeypatch.setattr(connections, "GuardedHandler", BodyLateHandler)
    monkeypatch.setattr(BodyLateHandler, "idle_in_the_step", [])
    guard = ConnectionGuard(max_connections=8, header_timeout=0.5)
    app = web.Application()
    app.router.add_post("/echo", echo)
    runner = web.AppRunner(app, keepalive_timeout=60)
    await runner.setup()
    sock = ListeningSocket.wrap(listen_socket("127.0.0.1", 0), guard)
    port = sock.getsockname()[1]
    await GuardedSite(runner, sock, guard).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        BodyLateHandler.rest = BODY[1000:]
        writer.write(head(len(BODY)) + BODY[:1000])
        assert await response(reader) == BODY
        assert BodyLateHandler.idle_in_the_step == [False]  # a taken request is not idle (no eviction)

        # A slow head on a second connection, after the body: its timer fires after any timer the
        # body could have armed on the first connection, so once it is cut, that one has had its turn.
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
        slow_writer.write(head(len(BODY))[:20])
        assert await asyncio.wait_for(slow_reader.read(1), 10) == b""  # cut at the header timeout
        assert guard.closed["header_timeout"] == 1  # only the slow head

        # The first connection is still open and serves its next request.
        writer.write(head(len(BODY)) + BODY)
        assert await response(reader) == BODY
        assert not reader.at_eof()
        await until(lambda: len(guard.open), check=lambda n: n == 1, what="the slow head's connection to go")
        writer.close()
        slow_writer.close()
    finally:
        await runner.cleanup()
        sock.close()
