"""The event log (``events.jsonl``): checking its hash chain, and folding it into the signed
summary (``evidence.json``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from taugate.controllers.recorder.evidence.format import (
    EVENTS_FILE,
    GENESIS,
    NL,
    ORDER,
    SCHEMA,
    canonical_document,
    canonical_line,
    sha256_hex,
)
from taugate.controllers.recorder.evidence.keys import Signer


def check_chain(raw: bytes) -> tuple[list[str], list[dict], str]:
    """Check ``events.jsonl`` bytes: every line canonical JSON, ``seq`` counting from 0, ``hash``
    the SHA-256 of the line without it, and ``prev`` the SHA-256 of the line before. Returns
    ``(problems, events, head)``; the first problem names the first bad line (1-based). A line
    that is consistent in itself but not the one its successor chained to is reported as the bad
    one (it was replaced). The complete lines are checked before a missing final newline is
    reported, so an edit earlier in the log is the one named."""
    events: list[dict] = []
    head = GENESIS
    if not raw:
        return [], events, head
    lines = raw.split(NL)
    tail = lines.pop()  # b"" when the log ends with a newline, else the torn last line
    for i, line in enumerate(lines):
        n = i + 1
        try:
            ev = json.loads(line)
        except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not UTF-8
            why = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            return [f"line {n}: not JSON ({why})"], events, head
        if not isinstance(ev, dict) or canonical_line(ev) != line:
            return [f"line {n}: not in canonical form (edited)"], events, head
        if not isinstance(ev.get("kind"), str) or not isinstance(ev.get("data"), dict):
            return [f"line {n}: not an evidence event (kind must be a string and data an object)"], events, head
        body = {k: v for k, v in ev.items() if k != "hash"}
        if ev.get("hash") != sha256_hex(canonical_line(body)):
            return [f"line {n}: content does not match its SHA-256 (edited)"], events, head
        if ev.get("seq") != i:
            return [f"line {n}: seq is {ev.get('seq')!r}, expected {i}"], events, head
        if ev.get("prev") != head:
            if i == 0:
                return ["line 1: prev is not the genesis hash (lines removed before it?)"], events, head
            return [f"line {n - 1}: was replaced (its SHA-256 is not the prev recorded in line {n})"], events, head
        head = sha256_hex(line)
        events.append(ev)
    if tail:
        return [f"line {len(lines) + 1}: incomplete (no newline at end)"], events, head
    return [], events, head


def _data(ev: Mapping) -> dict:
    """An event's ``data`` object ({} when it is not one)."""
    data = ev.get("data")
    return data if isinstance(data, dict) else {}


def _condition_entry(ev: Mapping) -> dict:
    d = dict(_data(ev))
    d["recordedAt"] = ev.get("time")
    return d


def fold(events: Sequence[Mapping]) -> dict:
    """The evidence document for a list of events (pure; the same events give the same bytes).

    Shape: ``{"schema", "runId", "namespace", "object", "admittedObject", "admission", "profile",
    "profileSetHash", "workspace", "queue", "conditions": [current condition per type, lifecycle
    order], "timeline": [every transition with recordedAt], "failures": [...], "artifacts":
    {...}, "phase", "final"}``, and the fields of later event kinds, only once a record has
    their events (so a record written before them is still its own fold): ``images`` and
    ``resolvedProfile`` (from the ``run`` event), ``imageDigests`` (``{image: imageID}``, the
    ``images`` events merged, first digest kept), ``logs`` (the ``log`` events' data, in order)
    and ``logsLimit`` (the ``logs-limit`` event's data).
    """
    doc: dict[str, Any] = {"schema": SCHEMA, "runId": None, "namespace": None, "object": None,
                           "admittedObject": None, "admission": {}, "profile": None, "profileSetHash": None,
                           "workspace": None, "queue": None, "conditions": [], "timeline": [],
                           "failures": [], "artifacts": None, "phase": None, "final": False}
    current: dict[str, dict] = {}
    for ev in events:
        kind = ev.get("kind")
        data = _data(ev)
        if kind == "run":
            for k in ("runId", "namespace", "object", "admittedObject", "admission", "profile",
                      "profileSetHash", "workspace", "queue", "images", "resolvedProfile"):
                if k in data:
                    doc[k] = copy.deepcopy(data[k])
        elif kind == "condition":
            entry = _condition_entry(ev)
            t = str(entry.get("type"))
            slot = "Completed" if t in ("Completed", "Failed") else t
            current[slot] = entry
            doc["timeline"].append(entry)
        elif kind == "failure":
            doc["failures"].append(dict(data))
        elif kind == "artifacts":
            doc["artifacts"] = dict(data)
        elif kind == "final":
            doc["final"] = True
        elif kind == "log":
            doc.setdefault("logs", []).append(copy.deepcopy(data))
        elif kind == "logs-limit":
            doc["logsLimit"] = copy.deepcopy(data)
        elif kind == "images":
            digests = doc.setdefault("imageDigests", {})
            for image, image_id in _data({"data": data.get("images")}).items():
                digests.setdefault(str(image), image_id)
    doc["conditions"] = [current[t] for t in ORDER if t in current] + \
        [v for k, v in current.items() if k not in ORDER]
    doc["phase"] = _phase(current)
    return doc


def _phase(current: Mapping[str, Mapping]) -> str:
    slot = current.get("Completed") or {}
    if slot.get("type") == "Failed" and slot.get("status") == "True":
        return "Failed"
    if slot.get("type") == "Completed" and slot.get("status") == "True":
        return "Succeeded"
    if (current.get("Scheduled") or {}).get("status") == "True":
        return "Running"
    if (current.get("Admitted") or {}).get("status") == "True":
        return "Scheduling"
    return "Queued"


def signed_document(events: Sequence[Mapping], head: str, signer: Signer) -> dict:
    """``fold(events)`` plus ``events`` (count, head) and an Ed25519 signature of its digest."""
    doc = fold(events)
    doc["events"] = {"file": EVENTS_FILE, "count": len(events), "head": head}
    digest = hashlib.sha256(canonical_document(doc)).digest()
    doc["signature"] = {"algorithm": "Ed25519", "keyId": signer.key_id, "publicKey": signer.public_key_b64,
                        "digest": digest.hex(), "value": base64.b64encode(signer.sign(digest)).decode()}
    return doc
