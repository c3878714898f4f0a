"""Where evidence records live: the ``Storage`` a store writes through, and ``open_storage``, which
picks one from a location. Two backends: local files (``files.py``, the default: a directory,
nothing to set up) and S3-compatible object storage (``s3.py``: ``s3://BUCKET/PREFIX``, each
append a new object under an optional Object Lock retention, so that not even the recorder can
rewrite what it wrote).

A backend moves bytes only; the chain, the summary and their checks are the store's
(``records.py``) and the verifier's (``verify.py``), the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

RetentionMode = Literal["COMPLIANCE", "GOVERNANCE"]


@dataclass(frozen=True)
class StoredRecord:
    """One run's record as a backend read it: ``events`` the log's bytes (``events.jsonl``; the
    segments of an object store joined in order), ``summary`` the latest signed summary's bytes
    (None when either is missing), ``summary_name`` where that summary was read (for messages) and
    ``problems`` what the backend itself saw that no byte check can (an object rewritten or
    deleted after it was written, a segment out of place): a record with problems never verifies."""

    location: str
    events: bytes | None
    summary: bytes | None
    summary_name: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Retention:
    """An Object Lock retention set on every object written: ``mode`` COMPLIANCE (no one can
    delete or shorten it before ``days`` have passed) or GOVERNANCE (only a user allowed to bypass
    governance retention can)."""

    mode: RetentionMode
    days: int


class Storage(Protocol):
    """What the evidence store needs from where records live. ``run_id`` is checked by the caller
    (``records.check_run_id``: 24 lowercase hex, so it never leaves its root)."""

    def location(self, run_id: str) -> str:
        """Where the run's record is, as a user would look for it (a directory, an ``s3://`` URL)."""
        ...

    def run_ids(self) -> list[str]:
        """The run-ids that have a record (an event log), sorted."""
        ...

    def read(self, run_id: str) -> StoredRecord | None:
        """The run's record, None when it has none. Raises EvidenceError when it cannot be read."""
        ...

    def append(self, run_id: str, first_seq: int, lines: bytes, log: bytes, count: int, summary: bytes) -> None:
        """Store the events ``lines`` (canonical lines, from ``first_seq``; ``log`` the whole log
        with them), then the summary of the first ``count`` events. Raises EvidenceError; an
        object store refuses to replace an event segment that exists (another writer)."""
        ...

    def write_summary(self, run_id: str, count: int, summary: bytes) -> None:
        """Store the summary of the first ``count`` events again (a crash left it behind)."""
        ...

    def repair_log(self, run_id: str, log: bytes) -> None:
        """Replace a log whose last line was torn by a crash with ``log`` (its complete lines)."""
        ...

    def problem(self) -> str | None:
        """Why records cannot be written here (one line), checked before the recorder starts."""
        ...


def is_object_store(location: str) -> bool:
    """``location`` names an S3 bucket (``s3://BUCKET[/PREFIX]``)."""
    return location.startswith("s3://")


def open_storage(location: str, retention: Retention | None = None) -> Storage:
    """The backend for ``location``: ``s3://BUCKET[/PREFIX]`` (boto3 is imported only then), else a
    directory. ``retention`` needs an object store: EvidenceError otherwise."""
    from taugate.controllers.recorder.evidence.format import EvidenceError

    if is_object_store(location):
        from taugate.controllers.recorder.evidence.stores.s3 import S3Storage

        return S3Storage.from_url(location, retention)
    if retention is not None:
        raise EvidenceError(f"{location}: an Object Lock retention needs an s3:// evidence root; a directory has "
                            "none (unset the retention, or write evidence to an S3 bucket)")
    from taugate.controllers.recorder.evidence.stores.files import FileStorage

    return FileStorage(location)
