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
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from taugate.files import write_atomic

SCHEMA = "taugate.evidence/v1"
EVENTS_FILE = "events.jsonl"
EVIDENCE_FILE = "evidence.json"
GENESIS = "0" * 64
NL = b"\n"
RUN_ID_RE = re.compile(r"^[0-9a-f]{24}$")
ORDER = ("Admitted", "Scheduled", "GPUHealthy", "Progressing", "Completed", "ArtifactSaved", "QuotaReleased", "GPUsReleased")


class EvidenceError(Exception):
    """A record cannot be read or written (missing, unreadable, or not a run-id)."""


# --------------------------------------------------------------------------------------------
# canonical bytes and hashes


def canonical_line(obj: Any) -> bytes:
    """One event as its canonical line (no newline): sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical_document(obj: Any) -> bytes:
    """``evidence.json``'s exact bytes: sorted keys, indent 2, UTF-8, trailing newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# keys


class Signer:
    """An Ed25519 signing key.

    ``key_id`` is the SHA-256 (hex) of the raw 32-byte public key; ``public_key_b64`` the raw
    public key in base64. Load one with :meth:`from_pem` / :meth:`from_file` (PKCS#8 PEM, or the
    raw 32-byte seed, as a file or as a Kubernetes Secret's data value).
    """

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public_raw = raw
        self.public_key_b64 = base64.b64encode(raw).decode()
        self.key_id = sha256_hex(raw)

    @classmethod
    def generate(cls) -> Signer:
        """A fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, origin: str = "key") -> Signer:
        """Parse a PKCS#8 PEM Ed25519 private key or a raw 32-byte seed; raises EvidenceError."""
        if len(data) == 32:
            return cls(Ed25519PrivateKey.from_private_bytes(data))
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as e:
            raise EvidenceError(f"{origin}: not a PEM private key ({e})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise EvidenceError(f"{origin}: not an Ed25519 private key ({type(key).__name__})")
        return cls(key)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Signer:
        """Read a key file (e.g. a Secret mounted as a volume); raises EvidenceError."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise EvidenceError(f"{path}: cannot read signing key ({e.strerror})") from None
        return cls.from_pem(data, str(path))

    def private_pem(self) -> bytes:
        """The key as unencrypted PKCS#8 PEM (what a Secret or key file holds)."""
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def public_pem(self) -> bytes:
        """The public key as SubjectPublicKeyInfo PEM (what ``verify --public-key`` reads)."""
        return self._key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        return self._key.sign(data)


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    """Read an Ed25519 public key (SubjectPublicKeyInfo PEM) or a private key PEM (its public
    half); raises EvidenceError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise EvidenceError(f"{path}: cannot read public key ({e.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        return Signer.from_pem(data, str(path))._key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{path}: not an Ed25519 public key")
    return key


# --------------------------------------------------------------------------------------------
# atomic file writes


def atomic_write(path: Path, data: bytes) -> None:
    """Write an evidence file atomically (``taugate.files.write_atomic``: temp file, fsync,
    rename, directory fsync), creating its run directory."""
    write_atomic(path, data, 0o640, make_parents=True)


# --------------------------------------------------------------------------------------------
# the fold


def _condition_entry(ev: Mapping) -> dict:
    d = dict(ev.get("data") if isinstance(ev.get("data"), dict) else {})
    d["recordedAt"] = ev.get("time")
    return d


def fold(events: Sequence[Mapping]) -> dict:
    """The evidence document for a list of events (pure; the same events give the same bytes).

    Shape: ``{"schema", "runId", "namespace", "object", "admittedObject", "admission", "profile",
    "profileSetHash", "workspace", "queue", "conditions": [current condition per type, lifecycle
    order], "timeline": [every transition with recordedAt], "failures": [...], "artifacts":
    {...}, "phase", "final"}``.
    """
    doc: dict[str, Any] = {"schema": SCHEMA, "runId": None, "namespace": None, "object": None,
                           "admittedObject": None, "admission": {}, "profile": None, "profileSetHash": None,
                           "workspace": None, "queue": None, "conditions": [], "timeline": [],
                           "failures": [], "artifacts": None, "phase": None, "final": False}
    current: dict[str, dict] = {}
    for ev in events:
        kind = ev.get("kind")
        data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        if kind == "run":
            for k in ("runId", "namespace", "object", "admittedObject", "admission", "profile",
                      "profileSetHash", "workspace", "queue"):
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
                raw = path.read_bytes()
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
                        cur = json.loads(ev_path.read_bytes())
                        evs = cur.get("events") if isinstance(cur, dict) else None
                        stale = not isinstance(evs, dict) or evs.get("head") != head
                    except ValueError:
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
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise EvidenceError(f"{path}: no evidence record for run {run_id}") from None
        except (OSError, ValueError) as e:
            raise EvidenceError(f"{path}: unreadable ({e})") from None
        if not isinstance(doc, dict):
            raise EvidenceError(f"{path}: not a JSON object (malformed record)")
        return doc


# --------------------------------------------------------------------------------------------
# verification


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
        except ValueError as e:
            return [f"line {n}: not JSON ({e.msg})"], events, head
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
    """Verify a run directory: the event chain, ``evidence.json``'s canonical form, digest and
    Ed25519 signature (against ``public_key`` when given, else the key recorded in the file),
    that its head and count are the log's, and that its content is the fold of the log.

    Raises EvidenceError when the run directory does not exist or a file cannot be read (bad
    input: there is no record to check). A record directory missing one of its files, an empty
    log, or a summary that is not a JSON object is a failed verification (tampering or
    corruption), not an error.
    """
    d = Path(run_dir)
    ev_path, doc_path = d / EVENTS_FILE, d / EVIDENCE_FILE
    if not d.is_dir():
        raise EvidenceError(f"{d}: no evidence record (directory missing)")
    data: dict[str, bytes] = {}
    for path in (ev_path, doc_path):
        try:
            data[path.name] = path.read_bytes()
        except FileNotFoundError:
            return Verification(False, (f"{path.name}: missing from the record",))
        except OSError as e:
            raise EvidenceError(f"{path}: unreadable ({e.strerror})") from None
    raw, doc_raw = data[EVENTS_FILE], data[EVIDENCE_FILE]
    if not raw:
        return Verification(False, (f"{EVENTS_FILE}: the log is empty (every record starts with its run event)",), 1)
    problems, events, head = check_chain(raw)
    if problems:
        return Verification(False, tuple(f"{EVENTS_FILE} {p}" for p in problems), _line_of(problems[0]))
    try:
        doc = json.loads(doc_raw)
    except ValueError as e:
        return Verification(False, (f"{EVIDENCE_FILE}: not JSON ({e})",))
    if not isinstance(doc, dict):
        return Verification(False, (f"{EVIDENCE_FILE}: not a JSON object (malformed)",))
    if canonical_document(doc) != doc_raw:
        return Verification(False, (f"{EVIDENCE_FILE}: not byte-identical to its canonical form (edited)",))
    sig = doc.get("signature")
    if not isinstance(sig, dict):
        return Verification(False, (f"{EVIDENCE_FILE}: no signature",))
    body = {k: v for k, v in doc.items() if k != "signature"}
    digest = hashlib.sha256(canonical_document(body)).digest()
    key_id = sig.get("keyId")
    if sig.get("digest") != digest.hex():
        return Verification(False, (f"{EVIDENCE_FILE}: content does not match its signed digest (edited)",), key_id=key_id)
    pinned = public_key is not None
    try:
        value = base64.b64decode(str(sig.get("value")), validate=True)
        recorded = base64.b64decode(str(sig.get("publicKey")), validate=True)
    except (ValueError, TypeError):
        return Verification(False, (f"{EVIDENCE_FILE}: signature fields are not base64 (edited)",), key_id=key_id)
    if (sig.get("algorithm") != "Ed25519" or base64.b64encode(value).decode() != sig.get("value")
            or base64.b64encode(recorded).decode() != sig.get("publicKey") or sha256_hex(recorded) != key_id
            or set(sig) != {"algorithm", "keyId", "publicKey", "digest", "value"}):
        return Verification(False, (f"{EVIDENCE_FILE}: signature block is inconsistent (edited)",), key_id=key_id)
    try:
        if public_key is None:
            public_key = Ed25519PublicKey.from_public_bytes(recorded)
        elif sha256_hex(public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)) != key_id:
            return Verification(False, (f"{EVIDENCE_FILE}: signed by key {key_id}, not by the given public key",),
                                key_id=key_id, pinned=True)
        public_key.verify(value, digest)
    except (InvalidSignature, ValueError, TypeError):
        return Verification(False, (f"{EVIDENCE_FILE}: Ed25519 signature does not verify",), key_id=key_id, pinned=pinned)
    evs = body.get("events") if isinstance(body.get("events"), dict) else {}
    if evs.get("head") != head or evs.get("count") != len(events):
        n = len(events)
        return Verification(False, (f"{EVENTS_FILE} line {n}: the log's head (line {n}) is not the head signed in "
                                    f"{EVIDENCE_FILE} ({evs.get('count')} events)",), n, key_id, pinned, n)
    expected = fold(events)
    actual = {k: v for k, v in body.items() if k != "events"}
    if canonical_document(expected) != canonical_document(actual):
        return Verification(False, (f"{EVIDENCE_FILE}: content is not the fold of {EVENTS_FILE}",), None, key_id, pinned, len(events))
    return Verification(True, (), None, key_id, pinned, len(events))
