"""The null webhook: the floor any admission webhook on this stack is measured against.

Same stack as ``taugate serve`` (aiohttp, TLS from the same certificate files, the same event
loop choice, orjson for JSON as taugate uses): it parses the AdmissionReview and answers
``allowed: true`` with the uid, nothing else. (With the standard library's ``json`` instead, this
floor is ~30% slower, which would flatter every ratio measured against it.)

Usage: ``python bench/null_webhook.py --cert-dir DIR --port N [--loop uvloop]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from pathlib import Path

import orjson
from aiohttp import web


async def review(request: web.Request) -> web.Response:
    uid = orjson.loads(await request.read())["request"]["uid"]
    return web.Response(body=orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                           "response": {"uid": uid, "allowed": True}}),
                        content_type="application/json")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cert-dir", type=Path, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = p.parse_args()
    if args.loop == "uvloop":
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert_dir / "tls.crt", args.cert_dir / "tls.key")
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/{path:.*}", review)
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=ctx, print=None, access_log=None)


if __name__ == "__main__":
    main()
