"""The evidence record's format: file names, canonical bytes (sorted keys, no spaces / indent 2),
SHA-256 hashes, atomic writes, and the one error its readers and writers raise.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from taugate.files import MAX_EVIDENCE_BYTES, InputError, read_limited, write_atomic

SCHEMA = "taugate.evidence/v1"
EVENTS_FILE = "events.jsonl"
EVIDENCE_FILE = "evidence.json"
GENESIS = "0" * 64
NL = b"\n"
RUN_ID_RE = re.compile(r"^[0-9a-f]{24}$")
ORDER = ("Admitted", "Scheduled", "GPUHealthy", "Progressing", "Completed", "ArtifactSaved", "QuotaReleased",
         "GPUsReleased")


class EvidenceError(Exception):
    """A record cannot be read or written (missing, unreadable, or not a run-id)."""


def canonical_line(obj: Any) -> bytes:
    """One event as its canonical line (no newline): sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical_document(obj: Any) -> bytes:
    """``evidence.json``'s exact bytes: sorted keys, indent 2, UTF-8, trailing newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write an evidence file atomically (``taugate.files.write_atomic``: temp file, fsync,
    rename, directory fsync), creating its run directory."""
    write_atomic(path, data, 0o640, make_parents=True)


def read_evidence_file(path: Path) -> bytes:
    """The bytes of one file of a record, at most ``MAX_EVIDENCE_BYTES`` (``taugate.files.read_limited``);
    EvidenceError naming the file when it is missing, unreadable or larger."""
    try:
        return read_limited(path, MAX_EVIDENCE_BYTES, "evidence files")
    except InputError as e:
        raise EvidenceError(str(e)) from None
