"""An S3-compatible object store for the end-to-end tier: the Versity S3 Gateway (versitygw,
Apache-2.0), built from its Go module by ``tests/e2e/build.sh`` (``tests/e2e/gomod/versitygw``),
serving a local directory over HTTPS with a certificate of the test CA, with versioning (a
versioning directory) so that a bucket created with Object Lock behaves as AWS S3's does:
versioned, each object version lockable in GOVERNANCE or COMPLIANCE mode.

taugate reaches it as it reaches AWS: boto3 with the standard ``AWS_*`` variables (``env``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.controlplane import LOOPBACK, Process, free_port, start_process, wait_until
from tests.e2e.pki import CA

REGION = "us-east-1"


@dataclass
class ObjectStore:
    """A running versitygw: its endpoint, root credentials and CA bundle."""

    binary: Path
    workdir: Path
    access_key: str = field(default_factory=lambda: "taugate-" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    port: int = 0
    process: Process | None = None

    @property
    def endpoint(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    @property
    def ca_bundle(self) -> Path:
        return self.workdir / "ca.crt"

    def env(self) -> dict[str, str]:
        """What boto3 needs to reach this store (the chart sets the same from its values)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_CA_BUNDLE": str(self.ca_bundle), "AWS_REGION": REGION}

    def start(self) -> ObjectStore:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca = CA("taugate-e2e-object-store-ca")
        cert, key = ca.issue("versitygw", server_hosts=(LOOPBACK, "localhost"))
        self.ca_bundle.write_bytes(ca.pem)
        (self.workdir / "tls.crt").write_bytes(cert)
        (self.workdir / "tls.key").write_bytes(key)
        data, versions = self.workdir / "data", self.workdir / "versions"  # versitygw wants them apart
        for d in (data, versions):
            d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = start_process("versitygw", [
            str(self.binary), f"--port={LOOPBACK}:{self.port}", f"--access={self.access_key}",
            f"--secret={self.secret_key}", f"--region={REGION}", f"--cert={self.workdir / 'tls.crt'}",
            f"--key={self.workdir / 'tls.key'}", "posix", f"--versioning-dir={versions}", str(data)], self.workdir)
        wait_until("versitygw to list buckets", lambda: self._lists(), 30, processes=[self.process])
        return self

    def _lists(self) -> bool:
        try:
            self.client().list_buckets()
        except Exception:
            return False
        return True

    def client(self):
        """A boto3 S3 client with the root credentials (what an administrator, or an attacker
        holding the recorder's credentials, would use)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, verify=str(self.ca_bundle),
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard"}))

    def create_bucket(self, name: str, *, object_lock: bool = True) -> str:
        """A new bucket (with Object Lock, which turns versioning on); its ``s3://`` URL."""
        args = {"ObjectLockEnabledForBucket": True} if object_lock else {}
        self.client().create_bucket(Bucket=name, **args)
        return f"s3://{name}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
