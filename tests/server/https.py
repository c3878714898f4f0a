"""A real HTTPS client for the admission server, trusting only taugate's CA, plus AdmissionReview
builders and a response checker grounded on the Kubernetes documentation's examples."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from taugate.kinds import KINDS
from taugate.unmanaged import UNMANAGED_KINDS

SERVICE_NAME = "taugate-webhook.taugate-system.svc"
"""The in-cluster name the apiserver verifies (``https://SVC.NS.svc:443/mutate``)."""

RESPONSE_KEYS = {"uid", "allowed", "status", "patch", "patchType", "warnings", "auditAnnotations"}
PATCH_OPS = {"add", "remove", "replace", "move", "copy", "test"}


def client_context(ca_file: str | Path, peers: list[bytes] | None = None) -> ssl.SSLContext:
    """A client context that trusts exactly the PEM bundle in ``ca_file`` (read now), with
    strict X.509 checks, hostname verification on. With ``peers``, the DER certificate of every
    server it completes a handshake with is appended there (``SSLContext.sslobject_class``)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    if peers is not None:
        class Recorder(ssl.SSLObject):
            def do_handshake(self):
                super().do_handshake()
                peers.append(self.getpeercert(binary_form=True))

        ctx.sslobject_class = Recorder
    return ctx


@dataclass
class Reply:
    """``body`` is the parsed JSON (None if not JSON); ``peer_sha256`` the SHA-256 of the
    server certificate of the connection's handshake (with fresh connections: this request's)."""

    status: int
    body: Any
    text: str
    peer_sha256: str


class AdmissionClient:
    """POSTs to the server at 127.0.0.1:``port`` with SNI/verification for ``server_hostname``.

    ``fresh_connections``: a new TCP+TLS connection per request, with the CA bundle re-read
    from ``ca_file`` each time (what a client does that follows CA rotation)."""

    def __init__(self, port: int, ca_file: str | Path, *, server_hostname: str = SERVICE_NAME,
                 fresh_connections: bool = False):
        self.port, self.ca_file, self.server_hostname = port, Path(ca_file), server_hostname
        self.fresh = fresh_connections
        self.peers: list[bytes] = []
        self._ctx = client_context(ca_file, self.peers)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=fresh_connections))

    async def close(self) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, body: bytes | dict | None = None, **kw) -> Reply:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        peers: list[bytes] = []
        ctx = client_context(self.ca_file, peers) if self.fresh else self._ctx
        headers = {"Content-Type": "application/json"} if data is not None else {}
        headers.update(kw.pop("headers", {}))
        async with self.session.request(method, f"https://127.0.0.1:{self.port}{path}", data=data, ssl=ctx,
                                        server_hostname=self.server_hostname, headers=headers, **kw) as resp:
            text = await resp.text()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        peer = (peers or self.peers or [b""])[-1]
        return Reply(resp.status, parsed, text, hashlib.sha256(peer).hexdigest() if peer else "")

    async def post(self, path: str, body: bytes | dict, **kw) -> Reply:
        return await self.request("POST", path, body, **kw)

    async def get(self, path: str) -> Reply:
        return await self.request("GET", path)


def admission_review(request: dict) -> dict:
    """Wrap an AdmissionRequest in an admission.k8s.io/v1 AdmissionReview."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


PLURALS = {k.kind: k.resource for k in (*KINDS, *UNMANAGED_KINDS)}
"""The resource (plural) of every kind the workload routes see (``taugate.kinds``, ``taugate.unmanaged``)."""


def workload_request(obj: dict | None, *, operation: str = "CREATE", namespace: str = "vision",
                     old: dict | None = None, dry_run: bool = False, sub_resource: str | None = None,
                     username: str = "alice@example.com") -> dict:
    """An AdmissionRequest as kube-apiserver sends it for ``obj`` (or ``old`` on DELETE)."""
    src = obj if obj is not None else old
    group, _, version = src["apiVersion"].rpartition("/")
    gvk = {"group": group, "version": version, "kind": src["kind"]}
    gvr = {"group": group, "version": version, "resource": PLURALS[src["kind"]]}
    req = {"uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
           "name": (src.get("metadata") or {}).get("name", ""), "namespace": namespace, "operation": operation,
           "userInfo": {"username": username, "groups": ["vision-researchers", "system:authenticated"]},
           "object": obj, "oldObject": old, "dryRun": dry_run,
           "options": {"apiVersion": "meta.k8s.io/v1",
                       "kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions",
                                "DELETE": "DeleteOptions"}[operation]}}
    if sub_resource:
        req["subResource"] = req["requestSubResource"] = sub_resource
    return req


def check_response(review: Any, uid: str, *, denial_needs_reason: bool = True) -> dict:
    """Assert ``review`` is a valid admission.k8s.io/v1 AdmissionReview answer for ``uid`` (the
    shape kube-apiserver accepts, as in the Kubernetes documentation's examples) and return its
    ``response``. ``denial_needs_reason``: taugate's own rule that a denial carries
    ``status.code`` and a message (the documentation's minimal denial has neither)."""
    assert isinstance(review, dict), review
    assert review.get("apiVersion") == "admission.k8s.io/v1" and review.get("kind") == "AdmissionReview", review
    assert set(review) == {"apiVersion", "kind", "response"}, set(review)
    resp = review["response"]
    assert set(resp) <= RESPONSE_KEYS, set(resp) - RESPONSE_KEYS
    assert resp["uid"] == uid
    assert isinstance(resp["allowed"], bool)
    assert ("patch" in resp) == ("patchType" in resp), "patch and patchType come together or not at all"
    if "patch" in resp:
        assert resp["allowed"] and resp["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(resp["patch"], validate=True))
        assert isinstance(ops, list) and ops, "an empty patch must be left out"
        for op in ops:
            assert op["op"] in PATCH_OPS and isinstance(op["path"], str) and op["path"].startswith("/"), op
    if not resp["allowed"] and denial_needs_reason:
        status = resp.get("status") or {}
        assert isinstance(status.get("code"), int) and 400 <= status["code"] < 600, status
        assert isinstance(status.get("message"), str) and status["message"].strip(), status
    if "warnings" in resp:
        assert isinstance(resp["warnings"], list) and all(isinstance(w, str) and w for w in resp["warnings"])
    return resp


def patch_of(resp: dict) -> list[dict] | None:
    """The decoded JSONPatch of a response, or None."""
    return json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else None


def apply(obj: dict, resp: dict) -> dict:
    """``obj`` after the response's JSONPatch, applied with the ``jsonpatch`` library."""
    import jsonpatch

    ops = patch_of(resp)
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops) if ops else copy.deepcopy(obj)
