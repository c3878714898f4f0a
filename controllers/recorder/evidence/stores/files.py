"""Evidence records as local files, one directory per run-id: ``ROOT/<run-id>/events.jsonl`` and
``evidence.json``, each replaced atomically (``format.atomic_write``). The default: nothing to set
up. What protects it is the file system's permissions; a record that must outlive the cluster or
be kept from its own writer belongs in an object store with a retention lock (``s3.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from taugate.controllers.recorder.evidence.format import (
    EVENTS_FILE,
    EVIDENCE_FILE,
    RUN_ID_RE,
    atomic_write,
    read_evidence_file,
)
from taugate.controllers.recorder.evidence.stores import StoredRecord


class FileStorage:
    """A directory of run directories (``taugate.controllers.recorder.evidence.stores.Storage``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def location(self, run_id: str) -> str:
        return str(self.run_dir(run_id))

    def run_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if RUN_ID_RE.match(p.name) and (p / EVENTS_FILE).exists())

    def read(self, run_id: str) -> StoredRecord | None:
        d = self.run_dir(run_id)
        if not d.is_dir():
            return None
        data: dict[str, bytes | None] = {}
        for path in (d / EVENTS_FILE, d / EVIDENCE_FILE):
            exists = path.exists() or path.is_symlink()
            data[path.name] = read_evidence_file(path) if exists else None
        return StoredRecord(str(d), data[EVENTS_FILE], data[EVIDENCE_FILE], EVIDENCE_FILE)

    def append(self, run_id: str, first_seq: int, lines: bytes, log: bytes, count: int, summary: bytes) -> None:
        d = self.run_dir(run_id)
        atomic_write(d / EVENTS_FILE, log)
        atomic_write(d / EVIDENCE_FILE, summary)

    def write_summary(self, run_id: str, count: int, summary: bytes) -> None:
        atomic_write(self.run_dir(run_id) / EVIDENCE_FILE, summary)

    def repair_log(self, run_id: str, log: bytes) -> None:
        atomic_write(self.run_dir(run_id) / EVENTS_FILE, log)

    def problem(self) -> str | None:
        """Create the directory when missing and prove it writable (a probe file is written and
        removed)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".taugate-write-probe-"):
                pass
        except OSError as e:
            return (f"{self.root}: the evidence directory cannot be created or written "
                    f"(--evidence-root / TAUGATE_RECORDER_EVIDENCE_ROOT): {e.strerror or e.__class__.__name__}")
        return None

