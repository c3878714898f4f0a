"""Per-run evidence records: a hash-chained event log and a signed summary per run-id, in a
directory (``ROOT/<run-id>/events.jsonl``, ``evidence.json``) or an S3 bucket (``stores/``); this
module is the store and the one import for the recorder and the CLI.

The events are written before the summary; a process that dies in between leaves a stale head,
which ``EvidenceStore.load`` rebuilds from the events, so nothing is lost or written twice.
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
    read_evidence_file,
    sha256_hex,
)
from taugate.controllers.recorder.evidence.keys import Signer, load_public_key
from taugate.controllers.recorder.evidence.log import check_chain, fold, signed_document
from taugate.controllers.recorder.evidence.stores import Storage, StoredRecord, open_storage
from taugate.controllers.recorder.evidence.stores.files import FileStorage
from taugate.controllers.recorder.evidence.verify import Verification, verify_record, verify_stored

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
    """A run's record read, repaired and appended through a ``Storage`` (``stores.open_storage``:
    a directory, the default, or an ``s3://`` bucket). Thread-safe per process (one lock); one
    recorder writes a given root at a time (the operator's leader), and an object store refuses a
    second writer's segment of the same events."""

    def __init__(self, root: str | os.PathLike[str] | Storage, signer: Signer | None = None) -> None:
        self.storage: Storage = open_storage(os.fspath(root)) if isinstance(root, (str, os.PathLike)) else root
        self.signer = signer
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.RLock] = {}
        self._cache: dict[str, RunRecord] = {}

    def _run_lock(self, run_id: str) -> threading.RLock:
        """One lock per run: the recorder's workers read and append different runs at once, never
        one run from two threads."""
        with self._lock:
            lock = self._run_locks.get(run_id)
            if lock is None:
                lock = self._run_locks[run_id] = threading.RLock()
            return lock

    @property
    def root(self) -> Path:
        """The directory of a file store (EvidenceError for an object store)."""
        if not isinstance(self.storage, FileStorage):
            raise EvidenceError("this evidence store is not a directory")
        return self.storage.root

    def run_dir(self, run_id: str) -> Path:
        """A file store's directory of ``run_id``."""
        return self.root / check_run_id(run_id)

    def location(self, run_id: str) -> str:
        """Where the run's record is (a directory, an ``s3://`` URL)."""
        return self.storage.location(check_run_id(run_id))

    def exists(self, run_id: str) -> bool:
        stored = self.storage.read(check_run_id(run_id))
        return stored is not None and stored.events is not None

    def run_ids(self) -> list[str]:
        return self.storage.run_ids()

    def read(self, run_id: str) -> StoredRecord | None:
        """The run's record as stored (None: none), for verification and display."""
        return self.storage.read(check_run_id(run_id))

    def load(self, run_id: str) -> RunRecord:
        """Read a run's events, repairing what a crash left: a torn last line (an interrupted
        append of our own) is dropped and a stale summary rebuilt. A record that does not verify
        as a chain, or that its store saw rewritten, raises EvidenceError: the recorder never
        writes on top of a tampered log."""
        with self._run_lock(run_id):
            if run_id in self._cache:
                return self._cache[run_id]
            stored = self.storage.read(check_run_id(run_id))
            rec = RunRecord(run_id)
            if stored is not None and stored.problems:
                raise EvidenceError(f"{stored.location}: {stored.problems[0]}")
            if stored is not None and stored.events is not None:
                raw = stored.events
                if raw and not raw.endswith(b"\n"):
                    raw = raw[: raw.rfind(b"\n") + 1]
                    self.storage.repair_log(run_id, raw)
                problems, events, head = check_chain(raw)
                if problems:
                    raise EvidenceError(f"{stored.location}: {EVENTS_FILE} {problems[0]}")
                rec = RunRecord(run_id, events, raw, head)
                if events and self.signer is not None and _summary_head(stored.summary) != head:
                    self.storage.write_summary(run_id, len(events), canonical_document(
                        signed_document(events, head, self.signer)))
            self._cache[run_id] = rec
            return rec

    def append(self, run_id: str, items: Iterable[tuple[str, dict, str]]) -> RunRecord:
        """Append ``(kind, data, time)`` events and write the new summary. Raises EvidenceError
        without a signer, or when the store refuses the write (then nothing is cached: the next
        load reads what is stored)."""
        if self.signer is None:
            raise EvidenceError("no signing key configured")
        with self._run_lock(run_id):
            rec = self.load(run_id)
            items = list(items)
            if not items:
                return rec
            raw, head, events = rec.raw, rec.head, list(rec.events)
            added = b""
            for kind, data, time in items:
                ev = {"seq": len(events), "prev": head, "time": time, "kind": kind, "data": data}
                ev["hash"] = sha256_hex(canonical_line(ev))
                line = canonical_line(ev)
                ev = json.loads(line)  # exactly what a reader will see
                added += line + b"\n"
                head = sha256_hex(line)
                events.append(ev)
            try:
                self.storage.append(run_id, len(rec.events), added, raw + added, len(events),
                                    canonical_document(signed_document(events, head, self.signer)))
            except BaseException:
                self._cache.pop(run_id, None)
                raise
            new = RunRecord(run_id, events, raw + added, head)
            self._cache[run_id] = new
            return new

    def forget(self, run_id: str) -> None:
        """Drop a finished run's cached record and its lock."""
        with self._run_lock(run_id):
            self._cache.pop(run_id, None)
        with self._lock:
            self._run_locks.pop(run_id, None)

    def read_document(self, run_id: str) -> dict:
        """The latest summary, fields not checked (see :func:`verify_stored`); EvidenceError when
        missing, not JSON or not a JSON object."""
        stored = self.read(run_id)
        where = self.storage.location(run_id)
        if stored is None or stored.summary is None:
            raise EvidenceError(f"{where}: no evidence record for run {run_id}")
        try:
            doc = json.loads(stored.summary)
        except ValueError as e:
            raise EvidenceError(f"{where}: {stored.summary_name} unreadable ({e})") from None
        if not isinstance(doc, dict):
            raise EvidenceError(f"{where}: {stored.summary_name} is not a JSON object (malformed record)")
        return doc


def _summary_head(summary: bytes | None) -> str | None:
    """The head a stored summary signed, None when it has none (missing or unreadable)."""
    try:
        cur = json.loads(summary) if summary is not None else None
    except ValueError:
        return None
    evs = cur.get("events") if isinstance(cur, dict) else None
    return evs.get("head") if isinstance(evs, dict) else None


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
    "Storage",
    "StoredRecord",
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
    "verify_stored",
]
