"""Per-run evidence records: a hash-chained event log and a signed summary, one directory per
run-id (``ROOT/<run-id>/events.jsonl``, ``evidence.json``); this module is the store and the one
import for the recorder and the CLI.

``events.jsonl`` is written before ``evidence.json``; a process that dies in between leaves a stale
head, which ``EvidenceStore.load`` rebuilds from the events, so nothing is lost or written twice.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from taugate.controllers.recorder.evidence.format import (
    EVENTS_FILE,
    EVIDENCE_FILE,
    GENESIS,
    NL,
    ORDER,
    RUN_ID_RE,
    SCHEMA,
    EvidenceError,
    atomic_write,
    canonical_document,
    canonical_line,
    sha256_hex,
)
from taugate.controllers.recorder.evidence.keys import Signer, load_public_key
from taugate.controllers.recorder.evidence.log import check_chain, fold, signed_document
from taugate.controllers.recorder.evidence.verify import Verification, read_evidence_file, verify_record

# --------------------------------------------------------------------------------------------
# the store


@dataclass
class RunRecord:

    run_id: str
    events: list[dict] = field(default_factory=list)
    raw: bytes = b""
    head: str = GENESIS

    def state(self) -> dict:
        return fold(self.events)

    def failure_keys(self) -> set[str]:
        """A failure record is stored once."""
        return {str((e.get("data") or {}).get("key")) for e in self.events if e.get("kind") == "failure"}

    def has(self, kind: str) -> bool:
        return any(e.get("kind") == kind for e in self.events)


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a run-id (24 lowercase hex), else EvidenceError; this also keeps the path
    inside the root."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise EvidenceError(f"{run_id!r} is not a run-id (24 lowercase hex characters)")
    return run_id


class EvidenceStore:
    """Thread-safe per process (one lock); a single recorder process writes a given root."""

    def __init__(self, root: str | os.PathLike, signer: Signer | None = None) -> None:
        self.root = Path(root)
        self.signer = signer
        self._lock = threading.RLock()
        self._cache: dict[str, RunRecord] = {}

    def run_dir(self, run_id: str) -> Path:
        return self.root / check_run_id(run_id)

    def exists(self, run_id: str) -> bool:
        return (self.run_dir(run_id) / EVENTS_FILE).exists()

    def run_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if RUN_ID_RE.match(p.name) and (p / EVENTS_FILE).exists())

    def load(self, run_id: str) -> RunRecord:
        """Read a run's events, repairing what a crash left: a torn last line (an interrupted
        append of our own) is dropped and a stale ``evidence.json`` rebuilt. A chain that does not
        verify raises EvidenceError: the recorder never writes on top of a tampered log."""
        with self._lock:
            if run_id in self._cache:
                return self._cache[run_id]
            d = self.run_dir(run_id)
            path = d / EVENTS_FILE
            rec = RunRecord(run_id)
            if path.exists():
                raw = read_evidence_file(path)
                if raw and not raw.endswith(b"\n"):
                    raw = raw[: raw.rfind(b"\n") + 1]
                    atomic_write(path, raw)
                problems, events, head = check_chain(raw)
                if problems:
                    raise EvidenceError(f"{path}: {problems[0]}")
                rec = RunRecord(run_id, events, raw, head)
                ev_path = d / EVIDENCE_FILE
                stale = True
                if ev_path.exists():
                    try:
                        cur = json.loads(read_evidence_file(ev_path))
                        evs = cur.get("events") if isinstance(cur, dict) else None
                        stale = not isinstance(evs, dict) or evs.get("head") != head
                    except (ValueError, EvidenceError):
                        stale = True
                if stale and events and self.signer is not None:
                    atomic_write(ev_path, canonical_document(signed_document(events, head, self.signer)))
            self._cache[run_id] = rec
            return rec

    def append(self, run_id: str, items: Iterable[tuple[str, dict, str]]) -> RunRecord:
        """Append ``(kind, data, time)`` events and rewrite ``evidence.json``, each file replaced
        atomically. Raises EvidenceError without a signer."""
        if self.signer is None:
            raise EvidenceError("no signing key configured")
        with self._lock:
            rec = self.load(run_id)
            items = list(items)
            if not items:
                return rec
            raw, head, events = rec.raw, rec.head, list(rec.events)
            for kind, data, time in items:
                ev = {"seq": len(events), "prev": head, "time": time, "kind": kind, "data": data}
                ev["hash"] = sha256_hex(canonical_line(ev))
                line = canonical_line(ev)
                ev = json.loads(line)  # exactly what a reader will see
                raw += line + b"\n"
                head = sha256_hex(line)
                events.append(ev)
            d = self.run_dir(run_id)
            atomic_write(d / EVENTS_FILE, raw)
            atomic_write(d / EVIDENCE_FILE, canonical_document(signed_document(events, head, self.signer)))
            new = RunRecord(run_id, events, raw, head)
            self._cache[run_id] = new
            return new

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._cache.pop(run_id, None)

    def read_document(self, run_id: str) -> dict:
        """Fields not checked (see :func:`verify_record`); EvidenceError when missing, not JSON or
        not a JSON object."""
        path = self.run_dir(run_id) / EVIDENCE_FILE
        if not path.exists():
            raise EvidenceError(f"{path}: no evidence record for run {run_id}")
        try:
            doc = json.loads(read_evidence_file(path))
        except ValueError as e:
            raise EvidenceError(f"{path}: unreadable ({e})") from None
        if not isinstance(doc, dict):
            raise EvidenceError(f"{path}: not a JSON object (malformed record)")
        return doc


__all__ = [
    "EVENTS_FILE",
    "EVIDENCE_FILE",
    "EvidenceError",
    "EvidenceStore",
    "GENESIS",
    "NL",
    "ORDER",
    "RUN_ID_RE",
    "RunRecord",
    "SCHEMA",
    "Signer",
    "Verification",
    "atomic_write",
    "canonical_document",
    "canonical_line",
    "check_chain",
    "check_run_id",
    "fold",
    "load_public_key",
    "read_evidence_file",
    "sha256_hex",
    "signed_document",
    "verify_record",
]
