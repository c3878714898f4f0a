"""Verification of a run's record: the chain, the summary's canonical bytes, digest and Ed25519
signature, and that the summary is the fold of the log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from taugate.controllers.recorder.evidence.format import (
    EVENTS_FILE,
    EvidenceError,
    canonical_document,
    sha256_hex,
)
from taugate.controllers.recorder.evidence.log import check_chain, fold
from taugate.controllers.recorder.evidence.stores import StoredRecord
from taugate.controllers.recorder.evidence.stores.files import FileStorage


@dataclass(frozen=True)
class Verification:
    """Result of :func:`verify_record`: ``ok``, the problems (first = first bad place),
    ``first_bad_line`` of events.jsonl (1-based, None when the log itself is fine), the signing
    key id and whether it was pinned by the caller's public key."""

    ok: bool
    problems: tuple[str, ...]
    first_bad_line: int | None = None
    key_id: str | None = None
    pinned: bool = False
    events: int = 0


def _line_of(problem: str) -> int | None:
    m = re.match(r"line (\d+)", problem)
    return int(m.group(1)) if m else None


def verify_record(run_dir: str | os.PathLike, public_key: Ed25519PublicKey | None = None) -> Verification:
    """``verify_stored`` of the record in the directory ``run_dir`` (a file store's run directory).
    Raises EvidenceError when the directory does not exist or a file cannot be read."""
    d = Path(run_dir)
    stored = FileStorage(d.parent).read(d.name)
    if stored is None:
        raise EvidenceError(f"{d}: no evidence record (directory missing)")
    return verify_stored(stored, public_key)


def verify_stored(stored: StoredRecord, public_key: Ed25519PublicKey | None = None) -> Verification:
    """Verify a run's record as its store read it: what the store saw (an object rewritten or
    deleted under its lock), the event chain, the summary's canonical form, digest and Ed25519
    signature (against ``public_key`` when given, else the key recorded in it), that its head
    and count are the log's, and that its content is the fold of the log.

    A record missing its log or summary, an empty log, or a summary that is not a JSON object is
    a failed verification (tampering or corruption), not an error.
    """
    if stored.problems:
        return Verification(False, stored.problems)
    name = stored.summary_name
    for part, label in ((stored.events, EVENTS_FILE), (stored.summary, name)):
        if part is None:
            return Verification(False, (f"{label}: missing from the record",))
    raw, doc_raw = stored.events or b"", stored.summary or b""
    if not raw:
        return Verification(False, (f"{EVENTS_FILE}: the log is empty (every record starts with its run event)",), 1)
    problems, events, head = check_chain(raw)
    if problems:
        return Verification(False, tuple(f"{EVENTS_FILE} {p}" for p in problems), _line_of(problems[0]))
    doc = _canonical_summary(doc_raw, name)
    if isinstance(doc, Verification):
        return doc
    signed = _check_signature(doc, public_key, name)
    if isinstance(signed, Verification):
        return signed
    body, key_id, pinned = signed
    evs = body.get("events")
    evs = evs if isinstance(evs, dict) else {}
    n = len(events)
    if evs.get("head") != head or evs.get("count") != n:
        return Verification(False, (f"{EVENTS_FILE} line {n}: the log's head (line {n}) is not the head signed in "
                                    f"{name} ({evs.get('count')} events)",), n, key_id, pinned, n)
    actual = {k: v for k, v in body.items() if k != "events"}
    if canonical_document(fold(events)) != canonical_document(actual):
        return Verification(False, (f"{name}: content is not the fold of {EVENTS_FILE}",), None, key_id,
                            pinned, n)
    return Verification(True, (), None, key_id, pinned, n)


def _canonical_summary(doc_raw: bytes, name: str) -> dict | Verification:
    """``evidence.json`` parsed, when it is a JSON object serialised exactly canonically."""
    try:
        doc = json.loads(doc_raw)
    except ValueError as e:
        return Verification(False, (f"{name}: not JSON ({e})",))
    if not isinstance(doc, dict):
        return Verification(False, (f"{name}: not a JSON object (malformed)",))
    if canonical_document(doc) != doc_raw:
        return Verification(False, (f"{name}: not byte-identical to its canonical form (edited)",))
    return doc


def _check_signature(doc: dict, public_key: Ed25519PublicKey | None,
                     name: str) -> tuple[dict, str | None, bool] | Verification:
    """The signed body, key id and whether the key was pinned, when ``doc``'s signature block is
    consistent, its digest is the body's SHA-256 and the Ed25519 signature verifies (with
    ``public_key`` when given, else the key recorded in the block)."""
    sig = doc.get("signature")
    if not isinstance(sig, dict):
        return Verification(False, (f"{name}: no signature",))
    body = {k: v for k, v in doc.items() if k != "signature"}
    digest = hashlib.sha256(canonical_document(body)).digest()
    key_id = sig.get("keyId")
    if sig.get("digest") != digest.hex():
        return Verification(False, (f"{name}: content does not match its signed digest (edited)",),
                            key_id=key_id)
    pinned = public_key is not None
    try:
        value = base64.b64decode(str(sig.get("value")), validate=True)
        recorded = base64.b64decode(str(sig.get("publicKey")), validate=True)
    except (ValueError, TypeError):
        return Verification(False, (f"{name}: signature fields are not base64 (edited)",), key_id=key_id)
    if (sig.get("algorithm") != "Ed25519" or base64.b64encode(value).decode() != sig.get("value")
            or base64.b64encode(recorded).decode() != sig.get("publicKey") or sha256_hex(recorded) != key_id
            or set(sig) != {"algorithm", "keyId", "publicKey", "digest", "value"}):
        return Verification(False, (f"{name}: signature block is inconsistent (edited)",), key_id=key_id)
    try:
        if public_key is None:
            public_key = Ed25519PublicKey.from_public_bytes(recorded)
        elif sha256_hex(public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)) != key_id:
            return Verification(False, (f"{name}: signed by key {key_id}, not by the given public key",),
                                key_id=key_id, pinned=True)
        public_key.verify(value, digest)
    except (InvalidSignature, ValueError, TypeError):
        return Verification(False, (f"{name}: Ed25519 signature does not verify",), key_id=key_id,
                            pinned=pinned)
    return body, key_id, pinned
