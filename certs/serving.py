"""TLS for the webhook server: ``ServingTLS`` reloads ``tls.crt``/``tls.key`` into the *same live*
``SSLContext`` when they change, so the server never restarts (new handshakes use the new
certificate). A pair that does not belong together or parse (a rotation half-written, a Secret
volume mid-update) is ignored until the next check; the pair is verified in memory and loaded from
a private snapshot of exactly those bytes, so what is loaded is what was verified.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import ssl
import tempfile
from pathlib import Path

from prometheus_client import Gauge

from taugate.certs.pki import CertError, fingerprint, load_certificates, load_private_key, public_keys_match
from taugate.certs.store import CA_BUNDLE, TLS_CERT, TLS_KEY, generate
from taugate.files import MAX_KEY_FILE_BYTES, InputError, read_limited

log = logging.getLogger("taugate.certs")

CERT_EXPIRY = Gauge("taugate_certificate_expiry_timestamp_seconds",
                    "Unix time (seconds) at which the serving certificate in use expires")
"""Set on every certificate load; alert well before ``time() - expiry`` reaches zero."""


def _stat_id(path: Path) -> tuple[int, int, int, int] | None:
    try:
        s = os.stat(path)  # follows symlinks: a Secret volume swaps its ..data link
    except OSError:
        return None
    return (s.st_ino, s.st_dev, s.st_size, s.st_mtime_ns)


class ServingTLS:
    """A live server ``SSLContext`` (TLS >= 1.2) that reloads ``DIR/tls.crt`` + ``DIR/tls.key``.

    ``context``: pass it to the server once. ``check()``: call it every ~1 s and on SIGHUP
    (from the thread that runs the server's event loop, so no handshake sees a half-loaded
    context); returns True when a new certificate was loaded. ``ca_path``: the CA bundle next to
    the certificate (``DIR/ca.crt``; it may not exist when the files come from elsewhere).
    ``fingerprint``: SHA-256 of the serving certificate (DER) in use.

    Raises ``CertError`` (naming the file) at construction when the initial pair is unusable.
    """

    def __init__(self, directory: str | Path, *, owns_directory: bool = False):
        self.directory = Path(directory)
        self.cert_path = self.directory / TLS_CERT
        self.key_path = self.directory / TLS_KEY
        self.ca_path = self.directory / CA_BUNDLE
        self._owns = owns_directory
        self._snapshot_dir = Path(tempfile.mkdtemp(prefix="taugate-tls-live-"))
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stat: tuple | None = None
        self._digest = ""
        self.fingerprint = ""
        self.reloads = 0
        try:
            self._load(initial=True)
        except BaseException:
            shutil.rmtree(self._snapshot_dir, ignore_errors=True)
            raise

    def _read_pair(self) -> tuple[bytes, bytes]:
        try:
            return (read_limited(self.cert_path, MAX_KEY_FILE_BYTES, "certificate and key files"),
                    read_limited(self.key_path, MAX_KEY_FILE_BYTES, "certificate and key files"))
        except InputError as e:
            raise CertError(str(e)) from None

    def _load(self, *, initial: bool = False) -> bool:
        stat = (_stat_id(self.cert_path), _stat_id(self.key_path))
        if not initial and stat == self._stat:
            return False
        cert_pem, key_pem = self._read_pair()
        digest = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if digest == self._digest:
            self._stat = stat
            return False
        try:
            cert = load_certificates(cert_pem)[0]
        except CertError as e:
            raise CertError(f"{self.cert_path}: {e}") from None
        try:
            key = load_private_key(key_pem)
        except CertError as e:
            raise CertError(f"{self.key_path}: {e}") from None
        if not public_keys_match(cert, key):
            raise CertError(f"{self.key_path}: does not belong to {self.cert_path}")
        # Load exactly the verified bytes: a private copy the other writers cannot touch.
        crt, k = self._snapshot_dir / "tls.crt", self._snapshot_dir / "tls.key"
        fd = os.open(k, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        crt.write_bytes(cert_pem)
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(crt, k)  # trial first
            self.context.load_cert_chain(crt, k)
        except ssl.SSLError as e:
            raise CertError(f"{self.cert_path}: rejected by OpenSSL: {e.reason or e}") from None
        finally:
            k.unlink(missing_ok=True)
        self._stat, self._digest = stat, digest
        self.fingerprint = fingerprint(cert)
        CERT_EXPIRY.set(cert.not_valid_after_utc.timestamp())
        if not initial:
            self.reloads += 1
            log.info("serving certificate reloaded from %s (sha256 %s)", self.cert_path, self.fingerprint[:16])
        return True

    def check(self) -> bool:
        """Reload the certificate if the files changed; True when a new one is now served.
        Never raises: an unusable pair is logged and the current certificate stays."""
        try:
            return self._load()
        except CertError as e:
            log.warning("keeping the current serving certificate: %s", e)
            return False
        except OSError as e:
            log.warning("keeping the current serving certificate: %s: %s", self.cert_path, e)
            return False

    def describe(self) -> str:
        """One line for the server's start-up message."""
        return f"TLS certificate {self.cert_path} (sha256 {self.fingerprint[:16]}), CA bundle {self.ca_path}"

    def close(self) -> None:
        """Remove private temporary files (and the generated directory, for a self-signed start)."""
        shutil.rmtree(self._snapshot_dir, ignore_errors=True)
        if self._owns:
            shutil.rmtree(self.directory, ignore_errors=True)


def serving_tls(cert_dir: str | Path | None, *, service: str = "taugate-webhook",
                namespace: str = "taugate-system") -> ServingTLS:
    """The TLS of ``taugate serve``: ``cert_dir``'s ``tls.crt``/``tls.key`` (``CertError`` naming
    the file when missing or unusable), or, when ``cert_dir`` is None, a new self-signed CA and
    serving certificate (SANs of Service ``service`` in ``namespace`` plus localhost/127.0.0.1)
    in a private temporary directory, the CA at ``.ca_path``."""
    if cert_dir is not None:
        d = Path(cert_dir)
        if not d.is_dir():
            raise CertError(f"{d}: is not a directory" if d.exists() else f"{d}: no such directory")
        return ServingTLS(d)
    d = Path(tempfile.mkdtemp(prefix="taugate-tls-"))
    try:
        generate(d, service=service, namespace=namespace)
        return ServingTLS(d, owns_directory=True)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
