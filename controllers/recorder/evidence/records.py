"""Per-run evidence records: a hash-chained event log and a signed summary, on a file system.

Layout, one directory per run-id under a configurable root (a local path, or the workspace
volume in a cluster)::

    ROOT/<run-id>/events.jsonl     append-only; line n carries "prev": SHA-256 of line n-1
    ROOT/<run-id>/evidence.json    the summary, a pure fold of events.jsonl, signed (Ed25519)

``events.jsonl``: one canonical JSON object per line (sorted keys, no spaces, UTF-8),
``{"seq": n, "prev": hex, "time": RFC 3339, "kind": ..., "data": {...}, "hash": hex}``: ``prev`` is
the SHA-256 of the previous line's bytes (without its newline; 64 zeros for line 0) and ``hash``
the SHA-256 of the line's own canonical JSON without ``hash`` (so verification names the edited
line itself, not its successor). Event kinds:
``run`` (the admitted object, the admission record, profile, workspace, queue), ``condition`` (a
state transition), ``failure`` (a pod termination record), ``artifacts`` (the artifact listing
changed) and ``final`` (the run ended and both release lines are True).

``evidence.json`` is :func:`fold` of the events plus ``events: {count, head}`` (the SHA-256 of
the last line) and ``signature: {algorithm: Ed25519, keyId, publicKey, digest, value}``, where
``digest`` is the SHA-256 of the canonical JSON of the document without ``signature`` and
``value`` the Ed25519 signature of the digest bytes. The file is exactly its canonical
serialisation (sorted keys, indent 2, trailing newline), so a change of any byte is detected.

Writes are atomic (temporary file in the same directory, fsync, rename, fsync of the directory).
``events.jsonl`` is written before ``evidence.json``; if the process dies in between,
:meth:`EvidenceStore.load` sees a stale head and rebuilds ``evidence.json`` from the events, so
nothing is lost, and since events are appended only for changes against the folded state,
nothing is written twice.

The parts: ``evidence.format`` (bytes, hashes, files), ``evidence.keys`` (Ed25519),
``evidence.log`` (the chain and the fold), ``evidence.verify``; this module is the store and
the one import for the recorder and the CLI.
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
    """One run's record in memory: the parsed events, the raw log bytes, the head hash."""

    run_id: str
    events: list[dict] = field(default_factory=list)
    raw: bytes = b""
    head: str = GENESIS

    def state(self) -> dict:
        """The folded evidence document (no signature)."""
        return fold(self.events)

    def failure_keys(self) -> set[str]:
        """Keys of the failure records already stored (a record is stored once)."""
        return {str((e.get("data") or {}).get("key")) for e in self.events if e.get("kind") == "failure"}

    def has(self, kind: str) -> bool:
        """Whether an event of ``kind`` was recorded."""
        return any(e.get("kind") == kind for e in self.events)


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a taugate run-id (24 lowercase hex), else EvidenceError (this also
    keeps the path inside the root)."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise EvidenceError(f"{run_id!r} is not a run-id (24 lowercase hex characters)")
    return run_id


class EvidenceStore:
    """Evidence records under ``root`` (one directory per run-id), signed with ``signer``.

    Thread-safe per process (one lock); a single recorder process writes a given root.
    """

    def __init__(self, root: str | os.PathLike, signer: Signer | None = None) -> None:
        self.root = Path(root)
        self.signer = signer
        self._lock = threading.RLock()
        self._cache: dict[str, RunRecord] = {}

    def run_dir(self, run_id: str) -> Path:
        """``root/<run-id>``; EvidenceError when ``run_id`` is not a run-id."""
        return self.root / check_run_id(run_id)

    def exists(self, run_id: str) -> bool:
        """Whether the run has an event log."""
        return (self.run_dir(run_id) / EVENTS_FILE).exists()

    def run_ids(self) -> list[str]:
        """Run-ids with a record under the root."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if RUN_ID_RE.match(p.name) and (p / EVENTS_FILE).exists())

    def load(self, run_id: str) -> RunRecord:
        """Read a run's events (an empty record if none), repairing what a crash left behind:
        a torn last line (no newline: an interrupted append of our own) is dropped and
        ``evidence.json`` is rebuilt when its head is not the log's. A chain that does not
        verify raises EvidenceError (the recorder never writes on top of a tampered log)."""
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
        """Append events ``(kind, data, time)`` and rewrite ``evidence.json``; returns the record.

        Raises EvidenceError without a signer. ``events.jsonl`` (old bytes + new lines) and
        then ``evidence.json`` are each replaced atomically.
        """
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
        """Drop the in-memory copy (the next load reads the files again)."""
        with self._lock:
            self._cache.pop(run_id, None)

    def read_document(self, run_id: str) -> dict:
        """The parsed ``evidence.json`` (a JSON object; its fields are not checked: see
        :func:`verify_record`); EvidenceError when missing, not JSON or not a JSON object."""
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
