"""Evidence records in S3-compatible object storage (``s3://BUCKET[/PREFIX]``), written so that
history cannot be rewritten, not even by the recorder:

- every append is a new object, never a replaced one: ``PREFIX<run-id>/events/<first seq>.jsonl``
  holds the appended canonical lines, ``PREFIX<run-id>/evidence/<count>.json`` the signed summary
  of the first ``count`` events (numbers zero-padded to 12 digits, so keys sort in order); each
  is written with ``If-None-Match: *`` (S3 conditional writes), so a second writer of the same
  events is refused (HTTP 412), not mixed in;
- with a retention (``Retention``) each object carries an Object Lock (``x-amz-object-lock-mode``,
  ``-retain-until-date``): in COMPLIANCE mode no credential deletes it or shortens its lock before
  the period ends; the bucket must have been created with Object Lock, which also turns its
  versioning on;
- in a versioned bucket, a write over a key makes a new version and leaves the locked one; the
  reader reads each key's first version and reports any later version or delete marker as a
  problem, so such a record never verifies (``StoredRecord.problems``).

The client is boto3 (AWS's own, maintained with the service): it implements the request signing,
retries, Object Lock headers, conditional writes, checksums (Object Lock writes need one) and
version listing; its standard configuration chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
a web identity token as EKS pod identity and IRSA write it, ``AWS_REGION``, ``AWS_CA_BUNDLE``) and
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for an S3-compatible server (then path-style
addressing, which such servers serve without wildcard DNS) are used as they are.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from taugate.controllers.recorder.evidence.format import NL, RUN_ID_RE, EvidenceError
from taugate.controllers.recorder.evidence.stores import Retention, StoredRecord
from taugate.files import MAX_EVIDENCE_BYTES

SEGMENT_RE = re.compile(r"^events/(\d{12})\.jsonl$")
SUMMARY_RE = re.compile(r"^evidence/(\d{12})\.json$")


@dataclass(frozen=True)
class _Version:
    key: str  # relative to the run's prefix
    version_id: str | None
    size: int
    deleted: bool
    modified: dt.datetime
    position: int  # in the listing, which gives a key's versions newest first


class S3Storage:
    """A bucket (and key prefix) of run records (``taugate.controllers.recorder.evidence.stores.Storage``)."""

    def __init__(self, bucket: str, prefix: str = "", retention: Retention | None = None,
                 client: Any | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.retention = retention
        self._client = client
        self._versioned: bool | None = None

    @classmethod
    def from_url(cls, url: str, retention: Retention | None = None) -> S3Storage:
        """``s3://BUCKET[/PREFIX]``; EvidenceError for anything else."""
        rest = url[len("s3://"):] if url.startswith("s3://") else ""
        bucket, _, prefix = rest.partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise EvidenceError(f"{url}: not an S3 location; expected s3://BUCKET[/PREFIX] with a bucket name of "
                                "3-63 lowercase letters, digits, dots and hyphens")
        return cls(bucket, prefix, retention)

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise EvidenceError("an s3:// evidence root needs boto3: pip install --no-deps boto3 botocore "
                                    "s3transfer jmespath (docs/install.md, Evidence in object storage)") from None
            custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            self._client = boto3.session.Session().client("s3", config=Config(
                retries={"mode": "standard", "max_attempts": 5},
                s3={"addressing_style": "path" if custom else "auto"}))
        return self._client

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    def location(self, run_id: str) -> str:
        return self.url(f"{run_id}/")

    # --- reading ------------------------------------------------------------------------------

    def run_ids(self) -> list[str]:
        found: set[str] = set()
        for page in self._pages("list_objects_v2", Prefix=self.prefix, Delimiter="/"):
            for p in page.get("CommonPrefixes") or []:
                name = str(p.get("Prefix", ""))[len(self.prefix):].rstrip("/")
                if RUN_ID_RE.match(name):
                    found.add(name)
        return sorted(found)

    def read(self, run_id: str) -> StoredRecord | None:
        versions = self._versions(run_id)
        if not versions:
            return None
        by_key: dict[str, list[_Version]] = {}
        for v in versions:
            by_key.setdefault(v.key, []).append(v)
        problems: list[str] = []
        first: dict[str, _Version] = {}
        for key, vs in sorted(by_key.items()):
            # oldest first: by time, and, within the listing's one-second resolution, by its order
            written = sorted((v for v in vs if not v.deleted), key=lambda v: (v.modified, -v.position))
            if not written:
                problems.append(f"{key}: deleted; no version of it is left")
                continue
            first[key] = written[0]
            if len(written) > 1:
                problems.append(f"{key}: written again after it was recorded ({len(written)} versions; the first, "
                                f"version {written[0].version_id}, is the one recorded)")
            elif len(vs) > 1:
                problems.append(f"{key}: deleted after it was recorded (a delete marker hides version "
                                f"{written[0].version_id})")
            if not (SEGMENT_RE.match(key) or SUMMARY_RE.match(key)):
                problems.append(f"{key}: not an object of an evidence record (only events/*.jsonl and "
                                "evidence/*.json are written)")
        segments = sorted(k for k in first if SEGMENT_RE.match(k))
        summaries = sorted(k for k in first if SUMMARY_RE.match(k))
        events = self._join(run_id, [first[k] for k in segments], problems) if segments else None
        summary_key = summaries[-1] if summaries else "evidence/<count>.json"
        summary = self._get(run_id, first[summary_key], MAX_EVIDENCE_BYTES) if summaries else None
        return StoredRecord(self.location(run_id), events, summary, summary_key, tuple(problems))

    def _join(self, run_id: str, segments: list[_Version], problems: list[str]) -> bytes:
        """The log: the segments in order, each checked to start at the event its key names."""
        total = sum(v.size for v in segments)
        if total > MAX_EVIDENCE_BYTES:
            raise EvidenceError(f"{self.location(run_id)}: the event log is {total} bytes, over the "
                                f"{MAX_EVIDENCE_BYTES}-byte limit of evidence files")
        log = b""
        for v in segments:
            body = self._get(run_id, v, MAX_EVIDENCE_BYTES)
            m = SEGMENT_RE.match(v.key)
            seq = int(m.group(1)) if m else -1
            if log.count(NL) != seq or not body.endswith(NL):
                problems.append(f"{v.key}: out of place (the log before it has {log.count(NL)} lines, or it does "
                                "not end with a newline)")
            log += body
        return log

    def _get(self, run_id: str, v: _Version, limit: int) -> bytes:
        if v.size > limit:
            raise EvidenceError(f"{self.location(run_id)}{v.key}: {v.size} bytes, over the {limit}-byte limit of "
                                "evidence files")
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": f"{self.prefix}{run_id}/{v.key}"}
        if v.version_id and v.version_id != "null":
            args["VersionId"] = v.version_id
        body = self._call("get_object", **args)["Body"]
        try:
            data: bytes = body.read(limit + 1)
        finally:
            body.close()
        if len(data) > limit:
            raise EvidenceError(f"{self.location(run_id)}{v.key}: over the {limit}-byte limit of evidence files")
        return data

    def _versions(self, run_id: str) -> list[_Version]:
        """Every object (every version in a versioned bucket) under the run's prefix."""
        base = f"{self.prefix}{run_id}/"
        out: list[_Version] = []
        if self.versioned:
            for page in self._pages("list_object_versions", Prefix=base):
                for item, deleted in [(x, False) for x in page.get("Versions") or []] + \
                        [(x, True) for x in page.get("DeleteMarkers") or []]:
                    out.append(_Version(str(item["Key"])[len(base):], item.get("VersionId"), int(item.get("Size", 0)),
                                        deleted, item["LastModified"], len(out)))
        else:
            for page in self._pages("list_objects_v2", Prefix=base):
                for item in page.get("Contents") or []:
                    out.append(_Version(str(item["Key"])[len(base):], None, int(item.get("Size", 0)), False,
                                        item["LastModified"], len(out)))
        return out

    @property
    def versioned(self) -> bool:
        """Whether the bucket keeps versions (Enabled or Suspended; asked once)."""
        if self._versioned is None:
            status = self._call("get_bucket_versioning", Bucket=self.bucket).get("Status")
            self._versioned = status in ("Enabled", "Suspended")
        return self._versioned

    # --- writing ------------------------------------------------------------------------------

    def append(self, run_id: str, first_seq: int, lines: bytes, log: bytes, count: int, summary: bytes) -> None:
        if not self._put(run_id, f"events/{first_seq:012d}.jsonl", lines):
            raise EvidenceError(f"{self.location(run_id)}: event {first_seq} is already stored (another recorder "
                                "wrote it); the record is read again before the next write")
        self.write_summary(run_id, count, summary)

    def write_summary(self, run_id: str, count: int, summary: bytes) -> None:
        # 412: a summary of these events exists; the verifier reads the newest and checks it
        self._put(run_id, f"evidence/{count:012d}.json", summary)

    def repair_log(self, run_id: str, log: bytes) -> None:
        raise EvidenceError(f"{self.location(run_id)}: an event segment does not end with a newline; objects are "
                            "written whole, so this one was written by something else")

    def _put(self, run_id: str, key: str, body: bytes) -> bool:
        """Create the object (never replace one); False when it exists (HTTP 412 or 409)."""
        # The SHA-256 as a header: S3 checks the bytes it stores against it, Object Lock writes need a
        # checksum, and a header (unlike the SDK's default aws-chunked trailer) lets a server that
        # refuses early (412) answer before the body is read (versitygw closes the connection then).
        digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": f"{self.prefix}{run_id}/{key}", "Body": body,
                                "IfNoneMatch": "*", "ContentType": "application/json", "ChecksumSHA256": digest}
        if self.retention is not None:
            args["ObjectLockMode"] = self.retention.mode
            args["ObjectLockRetainUntilDate"] = dt.datetime.now(dt.UTC) + dt.timedelta(days=self.retention.days)
        try:
            self._call("put_object", **args)
        except _Exists:
            return False
        return True

    def problem(self) -> str | None:
        """The bucket is reachable with these credentials and, with a retention, has Object Lock."""
        try:
            self._call("head_bucket", Bucket=self.bucket)
            if self.retention is not None:
                conf = self._call("get_object_lock_configuration", Bucket=self.bucket)
                if (conf.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled") != "Enabled":
                    raise EvidenceError("Object Lock is not enabled on it")
        except EvidenceError as e:
            detail = str(e).removeprefix(f"{self.url()}: ")
            return (f"{self.url()}: evidence cannot be written to this bucket (--evidence-root / "
                    f"TAUGATE_RECORDER_EVIDENCE_ROOT): {detail}"
                    + ("; a retention needs a bucket created with Object Lock enabled"
                       if self.retention is not None else ""))
        return None

    # --- the client's errors, as one line -----------------------------------------------------

    def _pages(self, operation: str, **args: Any) -> Iterator[dict]:
        try:
            yield from self.client.get_paginator(operation).paginate(Bucket=self.bucket, **args)
        except EvidenceError:
            raise
        except Exception as e:
            raise EvidenceError(f"{self.url(args.get('Prefix', ''))}: {_describe(e)}") from None

    def _call(self, operation: str, **args: Any) -> dict:
        try:
            result: dict = getattr(self.client, operation)(**args)
            return result
        except EvidenceError:
            raise
        except Exception as e:
            code = _code(e)
            if operation == "put_object" and code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                raise _Exists() from None
            if operation == "get_object_lock_configuration" and code == "ObjectLockConfigurationNotFoundError":
                return {}
            where = self.url(str(args.get("Key", ""))[len(self.prefix):])
            raise EvidenceError(f"{where}: {operation} failed: {_describe(e)}") from None


class _Exists(Exception):
    """A conditional write found the object there."""


def _code(e: Exception) -> str:
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return ""
    error = response.get("Error") or {}
    return str(error.get("Code") or (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or "")


def _describe(e: Exception) -> str:
    """One line for a boto3 error: the S3 error code and message, or what went wrong on the way."""
    code = _code(e)
    if code:
        msg = ((getattr(e, "response", None) or {}).get("Error") or {}).get("Message") or ""
        return f"{code}{': ' + msg if msg else ''}"
    name = type(e).__name__
    if name == "NoCredentialsError":
        return ("no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a web identity token, or "
                "an instance role)")
    return f"{name}: {e}"
