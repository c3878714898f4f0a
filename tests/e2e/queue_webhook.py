"""A second mutating webhook that behaves like Kueue's job webhooks, for the webhook-order tests:
for an object with a ``kueue.x-k8s.io/queue-name`` label it sets ``spec.suspend: true`` (Kueue's
``jobframework`` defaulting) and records the queue it saw in the annotation
``e2e.example/saw-queue``. Every call is appended to ``--log`` as one JSON line (operation, the
queue label seen, whether it patched), so a test can see the API server's call order and its
reinvocations.

Run: ``python -m tests.e2e.queue_webhook --port P --cert F --key F --log F``.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl

from aiohttp import web

QUEUE = "kueue.x-k8s.io/queue-name"
SAW = "e2e.example/saw-queue"


def decide(request: dict) -> tuple[list[dict], dict]:
    """The JSONPatch for one AdmissionRequest, and the line to log."""
    obj = request.get("object") or {}
    meta = obj.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE)
    patch: list[dict] = []
    if queue:
        if "annotations" not in meta:
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        if (meta.get("annotations") or {}).get(SAW) != queue:
            patch.append({"op": "add", "path": "/metadata/annotations/" + SAW.replace("/", "~1"), "value": queue})
        if (obj.get("spec") or {}).get("suspend") is not True:
            patch.append({"op": "add", "path": "/spec/suspend", "value": True})
    return patch, {"operation": request.get("operation"), "name": meta.get("name") or meta.get("generateName"),
                   "queue": queue, "patched": bool(patch)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()

    async def mutate(req: web.Request) -> web.Response:
        review = await req.json()
        patch, line = decide(review["request"])
        with open(args.log, "a") as f:
            f.write(json.dumps(line) + "\n")
        response = {"uid": review["request"]["uid"], "allowed": True}
        if patch:
            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=ctx, print=None)


if __name__ == "__main__":
    main()
