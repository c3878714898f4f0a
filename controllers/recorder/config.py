"""Configuration of the recorder (``TAUGATE_RECORDER_*`` variables, pydantic-settings) and its
file-system probe, ``FilesystemProbe`` (no Kubernetes, no kopf imports).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Protocol

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from taugate.controllers.recorder.evidence.format import EvidenceError
from taugate.controllers.recorder.evidence.stores import (
    Retention,
    RetentionMode,
    Storage,
    is_object_store,
    open_storage,
)
from taugate.controllers.recorder.evidence.stores.s3 import S3Storage
from taugate.controllers.recorder.run.progress import parse_metrics_jsonl
from taugate.controllers.recorder.run.values import ArtifactListing, ProgressSample
from taugate.files import MAX_WORKLOAD_FILE_BYTES, read_limited


class RecorderConfig(BaseSettings):
    """- ``evidence_root``: where the evidence records are: a directory holding one directory per
      run-id (a local path, or a volume in a cluster), or ``s3://BUCKET[/PREFIX]`` for
      S3-compatible object storage (credentials and endpoint from boto3's standard ``AWS_*``
      variables: ``evidence/stores/s3.py``).
    - ``evidence_retention_mode`` (``COMPLIANCE`` or ``GOVERNANCE``) and
      ``evidence_retention_days``: the Object Lock retention set on every evidence object (an
      ``s3://`` root whose bucket has Object Lock enabled); unset, objects get the bucket's default
      retention, if any.
    - ``data_root``: where the workspaces' data volumes are visible to the operator; a run's
      data path is ``data_root / run_path`` with ``{namespace}``, ``{run_id}`` and ``{workspace}``
      filled in; ``None`` disables the file-system probe.
    - ``metrics_file``: the metrics JSONL inside the run's data path; ``step_keys``: the record
      keys that hold the training step, first match wins.
    - ``output_dir``: the run's output path inside its data path; ``index_files``: artifact index
      file names in it (JSON with ``{"artifacts": [...]}``).
    - ``log_pattern``: a Python regex for progress lines in pod logs (its first group is the
      step), ``None`` to read no logs; ``log_tail_lines``: lines read per pod.
    - ``evidence_log_lines`` and ``evidence_log_bytes``: the bounds of the log tail of each ended
      container instance kept in the evidence (the last lines, at most that many bytes);
      ``evidence_log_pods``: the most pods of a run whose tails are kept (0 keeps none);
      ``evidence_log_attempts``: reads of a tail that fail (an API error) before it is recorded
      as unavailable.
    - ``stall_seconds``: quiet period before ``Progressing=False/Stalled``.
    - ``poll_seconds``: how often active runs are re-read (metrics, artifacts, stall clock).
    - ``workers``: runs reconciled at once (never one run by two): a reconcile mostly waits on
      the API server and the evidence store, so a backlog of thousands of runs (a restart, an
      empty evidence root) drains several times faster than one at a time (docs/performance.md).
    - ``artifact_grace_seconds``: after the end, how long to wait for artifacts before the record
      is closed when none appear.
    - ``hash_max_bytes``: files larger than this are listed without a SHA-256.
    - ``signing_key_file`` / ``signing_key_secret`` (``namespace/name[/key]``, default key
      ``ed25519.pem``): the Ed25519 key that signs evidence.
    """

    model_config = SettingsConfigDict(env_prefix="TAUGATE_RECORDER_")

    evidence_root: str = "/var/lib/taugate/evidence"
    evidence_retention_mode: RetentionMode | None = None
    evidence_retention_days: int = Field(default=365, ge=1, le=36500)
    data_root: Path | None = Path("/var/lib/taugate/data")
    run_path: str = "{namespace}/runs/{run_id}"
    metrics_file: str = "metrics.jsonl"
    step_keys: tuple[str, ...] = ("step", "global_step", "iteration", "epoch")
    output_dir: str = "outputs"
    index_files: tuple[str, ...] = ("index.json", "artifacts.json")
    log_pattern: str | None = r"\bstep[=: ]+(\d+)"
    log_tail_lines: int = Field(default=200, ge=1, le=10000)
    evidence_log_lines: int = Field(default=100, ge=1, le=10000)
    evidence_log_bytes: int = Field(default=16384, ge=256, le=1 << 20)
    evidence_log_pods: int = Field(default=64, ge=0, le=10000)
    evidence_log_attempts: int = Field(default=5, ge=1, le=100)
    stall_seconds: float = Field(default=900.0, gt=0)
    poll_seconds: float = Field(default=30.0, gt=0)
    workers: int = Field(default=4, ge=1, le=64)
    artifact_grace_seconds: float = Field(default=600.0, ge=0)
    hash_max_bytes: int = Field(default=1 << 30, ge=0)
    signing_key_file: Path | None = None
    signing_key_secret: str | None = None

    @field_validator("evidence_root", mode="before")
    @classmethod
    def _location(cls, v: object) -> object:
        """A path (``Path`` or text) or an ``s3://`` URL, checked here so a bad one is one line at start."""
        v = os.fspath(v) if isinstance(v, os.PathLike) else v
        if isinstance(v, str) and is_object_store(v):
            try:
                S3Storage.from_url(v)
            except EvidenceError as e:
                raise ValueError(str(e)) from None
        elif isinstance(v, str) and not v:
            raise ValueError("empty; expected a directory or s3://BUCKET[/PREFIX]")
        return v

    @model_validator(mode="after")
    def _retention_needs_an_object_store(self) -> RecorderConfig:
        if self.evidence_retention_mode is not None and not is_object_store(self.evidence_root):
            raise ValueError(f"evidence_retention_mode {self.evidence_retention_mode} needs an s3:// evidence root "
                             f"(a bucket with Object Lock); {self.evidence_root} is a directory")
        return self

    @property
    def retention(self) -> Retention | None:
        """The Object Lock retention of evidence objects, None when unset."""
        if self.evidence_retention_mode is None:
            return None
        return Retention(self.evidence_retention_mode, self.evidence_retention_days)

    def storage(self) -> Storage:
        """Where evidence records are written (``evidence.stores.open_storage``)."""
        return open_storage(self.evidence_root, self.retention)

    @field_validator("log_pattern")
    @classmethod
    def _valid_regex(cls, v: str | None) -> str | None:
        if v:
            re.compile(v)
        return v or None


class RunProbe(Protocol):
    """Reads what a run wrote to its data path (the recorder's only file-system dependency)."""

    def metrics(self, namespace: str, run_id: str, workspace: str | None = None) -> ProgressSample | None:
        """The run's metrics so far, or None when there are none."""
        ...

    def artifacts(self, namespace: str, run_id: str, workspace: str | None = None, *,
                  with_hashes: bool = False) -> ArtifactListing | None:
        """What is under the run's output path (None when the probe cannot tell); SHA-256 of each
        file only ``with_hashes``."""
        ...

    def describe(self, namespace: str, run_id: str, workspace: str | None = None) -> str:
        """Where the run's metrics are expected, for messages."""
        ...


class FilesystemProbe:
    """``RunProbe`` over ``RecorderConfig.data_root``. Artifact hashes are computed only when asked
    (``with_hashes``, at the end of a run) and cached by (path, size, mtime), so a large checkpoint
    is hashed once.
    """

    MAX_FILES = 1000

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._metrics: dict[str, tuple[int, int, int, float | None]] = {}  # path -> inode, offset, records, step

    def run_dir(self, namespace: str, run_id: str, workspace: str | None = None) -> Path | None:
        """None without a data root or when the template leaves the root."""
        if self.config.data_root is None:
            return None
        rel = self.config.run_path.format(namespace=namespace, run_id=run_id, workspace=workspace or namespace)
        path = (self.config.data_root / rel).resolve()
        root = self.config.data_root.resolve()
        if root != path and root not in path.parents:
            return None  # a template that escapes the root
        return path

    def describe(self, namespace: str, run_id: str, workspace: str | None = None) -> str:
        """The metrics file path, for messages."""
        d = self.run_dir(namespace, run_id, workspace)
        return str(d / self.config.metrics_file) if d else ""

    def metrics(self, namespace: str, run_id: str, workspace: str | None = None) -> ProgressSample | None:
        """Read incrementally: only complete lines appended since the last call are parsed (a
        file that shrank or was replaced is read again), at most ``MAX_WORKLOAD_FILE_BYTES`` a call
        (a piece of a line longer than that is skipped: no metrics record). Anything but a regular
        file (a FIFO, ``/dev/zero``) is not read."""
        d = self.run_dir(namespace, run_id, workspace)
        if d is None:
            return None
        path = d / self.config.metrics_file
        key = str(path)
        try:
            if not path.is_file():
                return None
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    return None
                ino, offset, records, step = self._metrics.get(key, (st.st_ino, 0, 0, None))
                if ino != st.st_ino or st.st_size < offset:
                    offset, records, step = 0, 0, None
                f.seek(offset)
                chunk = f.read(MAX_WORKLOAD_FILE_BYTES)
        except OSError:
            return None
        complete = chunk[: chunk.rfind(b"\n") + 1]
        if not complete and len(chunk) == MAX_WORKLOAD_FILE_BYTES:
            complete = chunk  # one line longer than a read: skipped (it parses as no record)
        n, s = parse_metrics_jsonl(complete.decode("utf-8", errors="replace"), self.config.step_keys)
        records += n
        if s is not None:
            step = s if step is None else max(step, s)
        self._metrics[key] = (st.st_ino, offset + len(complete), records, step)
        if records == 0:
            return None
        return ProgressSample({"kind": "File", "path": key}, records, step)

    def _sha256(self, path: Path, size: int, mtime: int) -> str | None:
        if size > self.config.hash_max_bytes:
            return None
        key = (str(path), size, mtime)
        if key not in self._hashes:
            h = hashlib.sha256()
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self._hashes[key] = h.hexdigest()
        return self._hashes[key]

    def artifacts(self, namespace: str, run_id: str, workspace: str | None = None, *,
                  with_hashes: bool = False) -> ArtifactListing | None:
        """The artifact index (first of ``index_files`` that parses) and the files under the
        output path (hidden ones, e.g. a writer's temporary file, skipped)."""
        d = self.run_dir(namespace, run_id, workspace)
        if d is None:
            return None
        out = d / self.config.output_dir
        if not out.is_dir():
            return ArtifactListing(str(out), None, ())
        return ArtifactListing(str(out), self._index(out), tuple(self._files(out, with_hashes)))

    def _index(self, out: Path) -> dict | None:
        """The first of ``index_files`` under ``out`` that parses as a JSON object or list, as
        ``{"file": name, "artifacts": [...]}``; None without one."""
        for name in self.config.index_files:
            p = out / name
            if not p.is_file():
                continue
            try:
                parsed = json.loads(read_limited(p, MAX_WORKLOAD_FILE_BYTES, "artifact indexes"))
            except ValueError:  # InputError (unreadable, too large) or not JSON
                continue
            if isinstance(parsed, list):
                parsed = {"artifacts": parsed}
            if isinstance(parsed, dict):
                listed = parsed.get("artifacts")
                return {"file": name, "artifacts": listed if isinstance(listed, list) else []}
        return None

    def _files(self, out: Path, with_hashes: bool) -> list[dict]:
        """Sorted walk; hidden files skipped; at most ``MAX_FILES``."""
        files: list[dict] = []
        for dirpath, dirnames, filenames in os.walk(out):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.startswith("."):
                    continue  # temp files of writers in progress
                p = Path(dirpath) / fn
                try:
                    st = p.stat()
                except OSError:
                    continue
                entry: dict = {"path": str(p.relative_to(out)), "size": st.st_size}
                if with_hashes:
                    try:
                        digest = self._sha256(p, st.st_size, st.st_mtime_ns)
                    except OSError:
                        digest = None
                    if digest:
                        entry["sha256"] = digest
                files.append(entry)
                if len(files) >= self.MAX_FILES:
                    return files
        return files
