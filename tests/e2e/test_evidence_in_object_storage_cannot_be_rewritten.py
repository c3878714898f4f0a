"""Evidence in S3-compatible object storage with Object Lock, against a real S3 server (versitygw,
built from its Go module: ``tests/e2e/objectstore.py``), through taugate's own store and CLI and
boto3 as an administrator or an attacker holding the recorder's credentials would use it.

The whole run recorded by the operator into the stack's bucket, then verified after its objects
left the cluster, is ``test_the_whole_run.py``'s batch Job test.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from taugate.controllers.recorder.evidence.records import EvidenceError, EvidenceStore, Signer
from taugate.controllers.recorder.evidence.stores import Retention
from taugate.controllers.recorder.evidence.stores.s3 import S3Storage
from tests.e2e.controlplane import build
from tests.e2e.objectstore import ObjectStore
from tests.paths import REPO

T = "2026-12-05T10:00:00Z"
LOCK = Retention("COMPLIANCE", 1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ObjectStore(build("versitygw")["versitygw"] / "versitygw", tmp_path_factory.mktemp("object-store")).start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def locked(store) -> str:
    """A bucket created with Object Lock (versioned, as AWS makes it): its ``s3://`` root."""
    return store.create_bucket("evidence-locked") + "/runs"


@pytest.fixture
def aws(store, monkeypatch):
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    return store.env()


def _record(url: str, run_id: str, signer: Signer, retention: Retention | None = LOCK) -> None:
    """A record of three events written in two appends, as the recorder writes one."""
    ev = EvidenceStore(S3Storage.from_url(url, retention), signer)
    ev.append(run_id, [("run", {"runId": run_id, "namespace": "vision", "object": {"kind": "Job", "name": "x"}}, T),
                       ("condition", {"type": "Admitted", "status": "True", "reason": "QuotaReserved"}, T)])
    ev.append(run_id, [("condition", {"type": "Scheduled", "status": "True", "reason": "Bound"}, T)])


def _taugate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taugate.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, **env})


def _sha(body: bytes) -> str:
    """The checksum as a header, as taugate sends it (versitygw answers a conditional PUT's 412
    before reading a body in boto3's default aws-chunked form, and closes the connection)."""
    return base64.b64encode(hashlib.sha256(body).digest()).decode()


def _key(url: str, run_id: str, name: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, f"{prefix}/{run_id}/{name}"


def test_a_record_in_an_object_lock_bucket_is_one_new_object_per_append_each_locked_and_verifies_from_the_bucket(
        store, locked, aws, tmp_path):
    signer, run_id = Signer.generate(), "a1" * 12
    _record(locked, run_id, signer)
    bucket, prefix = _key(locked, run_id, "")
    keys = sorted(o["Key"].removeprefix(prefix) for o in store.client().list_objects_v2(
        Bucket=bucket, Prefix=prefix)["Contents"])
    assert keys == ["events/000000000000.jsonl", "events/000000000002.jsonl",
                    "evidence/000000000002.json", "evidence/000000000003.json"]
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=23)
    for k in keys:
        head = store.client().head_object(Bucket=bucket, Key=prefix + k)
        assert head["ObjectLockMode"] == "COMPLIANCE" and head["ObjectLockRetainUntilDate"] > soon, (k, head)
    pub = tmp_path / "key.pub.pem"
    pub.write_bytes(signer.public_pem())
    ok = _taugate("evidence", "verify", run_id, f"--evidence-root={locked}", f"--public-key={pub}", env=aws)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"OK: run {run_id}: 3 events, hash chain intact"), ok.stdout
    shown = _taugate("evidence", "show", run_id, f"--evidence-root={locked}", env=aws)
    assert shown.returncode == 0 and "Scheduled" in shown.stdout and "Events: 3" in shown.stdout, shown.stdout
    status = _taugate("status", run_id, f"--evidence-root={locked}", "-o", "json", env=aws)
    assert status.returncode == 0 and json.loads(status.stdout)["evidence"]["verified"] is True, status.stdout


def test_a_locked_object_cannot_be_replaced_or_its_version_deleted_not_even_with_the_recorders_credentials(
        store, locked, aws):
    signer, run_id = Signer.generate(), "b2" * 12
    _record(locked, run_id, signer)
    s3 = store.client()
    bucket, key = _key(locked, run_id, "events/000000000000.jsonl")
    with pytest.raises(ClientError) as replaced:  # the recorder's own guard: a key is written once
        s3.put_object(Bucket=bucket, Key=key, Body=b"{}\n", IfNoneMatch="*", ChecksumSHA256=_sha(b"{}\n"))
    assert replaced.value.response["Error"]["Code"] == "PreconditionFailed"
    version = s3.head_object(Bucket=bucket, Key=key)["VersionId"]
    for bypass in (False, True):  # COMPLIANCE: no bypass, not for the bucket's owner
        with pytest.raises(ClientError) as deleted:
            s3.delete_object(Bucket=bucket, Key=key, VersionId=version, BypassGovernanceRetention=bypass)
        assert deleted.value.response["Error"]["Code"] == "AccessDenied", deleted.value.response
    ok = _taugate("evidence", "verify", run_id, f"--evidence-root={locked}", env=aws)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_an_object_written_again_or_hidden_by_a_delete_marker_fails_verification_naming_it_and_the_original_is_shown(
        store, locked, aws):
    signer, run_id = Signer.generate(), "c3" * 12
    _record(locked, run_id, signer)
    s3 = store.client()
    bucket, key = _key(locked, run_id, "events/000000000002.jsonl")
    # A versioned bucket takes a plain PUT over a key as a new version; the locked one stays.
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"forged":true}\n')
    bad = _taugate("evidence", "verify", run_id, f"--evidence-root={locked}", env=aws)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.startswith(f"TAMPERED: run {run_id}: events/000000000002.jsonl: written again after it was "
                                 "recorded (2 versions"), bad.stdout
    shown = _taugate("evidence", "show", run_id, f"--evidence-root={locked}", env=aws)
    assert shown.returncode == 1 and shown.stdout.startswith("WARNING: this evidence record does not verify")
    assert "Scheduled" in shown.stdout and "forged" not in shown.stdout, shown.stdout  # the version recorded
    # A DELETE without a version hides the latest summary behind a delete marker: named too.
    run2 = "d4" * 12
    _record(locked, run2, signer)
    bucket, key = _key(locked, run2, "evidence/000000000003.json")
    s3.delete_object(Bucket=bucket, Key=key)
    hidden = _taugate("evidence", "verify", run2, f"--evidence-root={locked}", env=aws)
    assert hidden.returncode == 1 and "evidence/000000000003.json: deleted after it was recorded" in hidden.stdout, \
        hidden.stdout
    # The recorder never writes on top of either.
    for rid in (run_id, run2):
        with pytest.raises(EvidenceError, match="after it was recorded"):
            EvidenceStore(S3Storage.from_url(locked), signer).load(rid)


def test_a_second_recorder_appending_the_same_events_is_refused_and_nothing_is_written_twice(store, locked, aws):
    signer, run_id = Signer.generate(), "e5" * 12
    first = EvidenceStore(S3Storage.from_url(locked, Retention("GOVERNANCE", 1)), signer)
    second = EvidenceStore(S3Storage.from_url(locked, Retention("GOVERNANCE", 1)), signer)
    first.append(run_id, [("run", {"runId": run_id}, T)])
    second.load(run_id)
    first.append(run_id, [("condition", {"type": "Admitted", "status": "True"}, T)])
    with pytest.raises(EvidenceError, match="event 1 is already stored"):
        second.append(run_id, [("condition", {"type": "Admitted", "status": "True"}, T)])
    assert len(second.load(run_id).events) == 2  # read again: the first recorder's two events
    ok = _taugate("evidence", "verify", run_id, f"--evidence-root={locked}", env=aws)
    assert ok.returncode == 0 and "2 events" in ok.stdout, ok.stdout + ok.stderr


def test_the_operator_will_not_start_recording_with_a_retention_into_a_bucket_without_object_lock(
        store, aws, tmp_path):
    plain = store.create_bucket("evidence-no-lock", object_lock=False)
    key = tmp_path / "ed25519.pem"
    assert _taugate("evidence", "keygen", f"--out={key}", env=aws).returncode == 0
    args = ("operator", "--record", f"--signing-key-file={key}", f"--kubeconfig={tmp_path / 'none'}")
    refused = _taugate(*args, f"--evidence-root={plain}", "--evidence-retention=COMPLIANCE:30", env=aws)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == (
        f"taugate: {plain}/: evidence cannot be written to this bucket (--evidence-root / "
        "TAUGATE_RECORDER_EVIDENCE_ROOT): Object Lock is not enabled on it; a retention needs a bucket created "
        "with Object Lock enabled"), refused.stderr
    missing = _taugate(*args, "--evidence-root=s3://no-such-bucket/runs", env=aws)
    assert missing.returncode == 2 and "s3://no-such-bucket/runs/: evidence cannot be written" in missing.stderr \
        and "head_bucket failed" in missing.stderr, missing.stderr
    wrong = _taugate(*args, f"--evidence-root={plain}", env={**aws, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert wrong.returncode == 2 and "head_bucket failed" in wrong.stderr, wrong.stderr
    on_disk = _taugate(*args, f"--evidence-root={tmp_path / 'ev'}", "--evidence-retention=GOVERNANCE:30", env=aws)
    assert on_disk.returncode == 2 and "needs an s3:// evidence root" in on_disk.stderr, on_disk.stderr
