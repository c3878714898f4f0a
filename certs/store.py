"""The certificate directory: file layout, atomic writes, generation and CA rotation.

Layout of a certificate directory (the names a Kubernetes ``kubernetes.io/tls`` Secret uses, so
the directory can be a mounted Secret volume):

- ``ca.crt``: the trust bundle, one PEM CA certificate, two while a rotation is in progress and
  until the next one (the value of the webhook configurations' ``caBundle``);
- ``ca.key``: the key of the CA that signed ``tls.crt`` (its certificate is the bundle entry with
  the same public key);
- ``tls.crt`` / ``tls.key``: the serving certificate and its key;
- ``ca-next.key``: only during a rotation, the key of the new CA already published in ``ca.crt``.

Every file is written atomically (temporary file in the same directory, ``fsync``, ``rename``,
then ``fsync`` of the directory); keys are mode 0600. A reader sees the old or the new file, never
a partial one. Operations on one directory are serialised with ``flock`` on ``.lock``.

Rotation (the order Kubernetes webhook CA rotation needs, as kube-apiserver reads ``caBundle``
from the webhook configuration, which lags behind the files):

1. ``publish``: a new CA is generated and published next to the current one (``ca.crt`` = current
   + new); the serving certificate is untouched, so everyone who trusts the old bundle still
   verifies it, and everyone who reloads the bundle trusts both.
2. wait until every client has the new bundle (locally: the server's reload interval; in a
   cluster: the caBundle patch plus kubelet's Secret volume sync, up to ~2 minutes);
3. ``switch``: a serving certificate for the same host names is issued by the new CA and replaces
   ``tls.crt``/``tls.key``; ``ca-next.key`` becomes ``ca.key``. Servers pick it up without a restart
   (``certs.serving``).
4. the old CA stays in the bundle (harmless: nothing it signed is served any more) until the next
   rotation's ``publish`` or an explicit ``trim``.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cryptography import x509

from certs.pki import (
    LOCAL_HOSTS,
    DEFAULT_CA_DAYS,
    DEFAULT_SERVING_DAYS,
    CertError,
    KeyPair,
    bundle_pem,
    fingerprint,
    generate_ca,
    generate_serving,
    issued_by,
    load_certificates,
    load_private_key,
    public_keys_match,
    service_dns_names,
)

CA_BUNDLE = "ca.crt"
CA_KEY = "ca.key"
CA_NEXT_KEY = "ca-next.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
LOCK = ".lock"


def write_atomic(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new content, never a
    mix, and the new content survives a crash once this returns (temp file + fsync + rename +
    directory fsync). ``mode`` is applied before the rename (0600 for keys). On error the
    temporary file is removed and ``path`` is unchanged."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``DIR/.lock`` (serialises generate/rotate on one directory)."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError) as e:
        raise CertError(f"{path}: cannot read: {e.strerror}") from None


def _certs_in(path: Path) -> list[x509.Certificate]:
    try:
        return load_certificates(_read(path))
    except CertError as e:
        if str(e).startswith(str(path)):
            raise
        raise CertError(f"{path}: {e}") from None


def _key_in(path: Path):
    try:
        return load_private_key(_read(path))
    except CertError as e:
        if str(e).startswith(str(path)):
            raise
        raise CertError(f"{path}: {e}") from None


def _check_dir(directory: str | Path, *, create: bool) -> Path:
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise CertError(f"{d}: not a directory")
    if not d.exists():
        if not create:
            raise CertError(f"{d}: no such directory")
        try:
            d.mkdir(parents=True, mode=0o700)
        except OSError as e:
            raise CertError(f"{d}: cannot create directory: {e.strerror}") from None
    if not os.access(d, os.W_OK):
        raise CertError(f"{d}: directory is not writable")
    return d


@dataclass(frozen=True)
class CertDirStatus:
    """What a certificate directory holds. ``bundle`` is the CA bundle in order; ``issuer`` the
    CA that signed ``serving``; ``pending`` the CA published by an unfinished rotation (None
    outside a rotation); times are UTC."""

    directory: Path
    bundle: tuple[x509.Certificate, ...]
    issuer: x509.Certificate
    serving: x509.Certificate
    pending: x509.Certificate | None

    @property
    def hosts(self) -> list[str]:
        """The serving certificate's SANs (DNS names, then IP addresses as text)."""
        return serving_hosts(self.serving)

    @property
    def expires(self) -> _dt.datetime:
        """When the first of the serving certificate and its CA expires."""
        return min(self.serving.not_valid_after_utc, self.issuer.not_valid_after_utc)


def serving_hosts(cert: x509.Certificate) -> list[str]:
    """The DNS names and IP addresses of a certificate's SubjectAlternativeName, in order."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out: list[str] = []
    for name in san:
        if isinstance(name, x509.DNSName):
            out.append(name.value)
        elif isinstance(name, x509.IPAddress):
            out.append(str(name.value))
    return out


def _find(bundle: list[x509.Certificate], key) -> x509.Certificate | None:
    return next((c for c in bundle if public_keys_match(c, key)), None)


def inspect(directory: str | Path) -> CertDirStatus:
    """Read and cross-check a certificate directory (no writes).

    Raises ``CertError`` naming the file when a file is missing or damaged, when ``ca.key`` has
    no certificate in ``ca.crt``, when ``tls.key`` does not belong to ``tls.crt`` or when
    ``tls.crt`` was not signed by the ``ca.key`` CA."""
    d = Path(directory)
    if not d.is_dir():
        raise CertError(f"{d}: no such directory")
    bundle = _certs_in(d / CA_BUNDLE)
    ca_key = _key_in(d / CA_KEY)
    issuer = _find(bundle, ca_key)
    if issuer is None:
        raise CertError(f"{d / CA_KEY}: no certificate for this key in {d / CA_BUNDLE}")
    serving = _certs_in(d / TLS_CERT)[0]
    if not public_keys_match(serving, _key_in(d / TLS_KEY)):
        raise CertError(f"{d / TLS_KEY}: does not belong to {d / TLS_CERT}")
    pending = None
    if (d / CA_NEXT_KEY).exists():
        pending = _find(bundle, _key_in(d / CA_NEXT_KEY))
    if not issued_by(serving, issuer) and not (pending is not None and issued_by(serving, pending)):
        raise CertError(f"{d / TLS_CERT}: not signed by the CA of {d / CA_KEY}")
    return CertDirStatus(d, tuple(bundle), issuer, serving, pending)


def generate(directory: str | Path, *, service: str, namespace: str, extra_hosts: tuple[str, ...] = LOCAL_HOSTS,
             ca_days: int = DEFAULT_CA_DAYS, days: int = DEFAULT_SERVING_DAYS, force: bool = False,
             now: _dt.datetime | None = None) -> CertDirStatus:
    """Create a CA and a serving certificate for Service ``service`` in ``namespace`` in
    ``directory`` (created mode 0700 if missing). SANs: ``service_dns_names`` plus
    ``extra_hosts`` (localhost and 127.0.0.1 by default, for local serving).

    Refuses (``CertError``) to overwrite an existing ``ca.crt`` or ``tls.crt`` unless ``force``:
    replacing a CA in place breaks every client that trusts it (use ``rotate``)."""
    d = _check_dir(directory, create=True)
    with locked(d):
        existing = [n for n in (CA_BUNDLE, TLS_CERT) if (d / n).exists()]
        if existing and not force:
            raise CertError(f"{d / existing[0]}: already exists; use 'taugate certs rotate' to replace "
                            f"certificates without breaking clients, or --force")
        ca = generate_ca(days=ca_days, now=now)
        serving = generate_serving(ca, [*service_dns_names(service, namespace), *extra_hosts], days=days, now=now)
        # Keys before certificates: a certificate on disk always has its key on disk.
        write_atomic(d / CA_KEY, ca.key_pem, 0o600)
        write_atomic(d / CA_BUNDLE, ca.cert_pem)
        write_atomic(d / TLS_KEY, serving.key_pem, 0o600)
        write_atomic(d / TLS_CERT, serving.cert_pem)
        try:
            (d / CA_NEXT_KEY).unlink()
        except FileNotFoundError:
            pass
    return inspect(d)


def publish_new_ca(directory: str | Path, *, ca_days: int = DEFAULT_CA_DAYS,
                   now: _dt.datetime | None = None) -> CertDirStatus:
    """Rotation step 1: generate a new CA and publish it next to the current one
    (``ca.crt`` = current issuer + new CA; CAs older than the current issuer are dropped).
    Idempotent: when a rotation is already pending, nothing changes."""
    d = _check_dir(directory, create=False)
    with locked(d):
        st = inspect(d)
        if st.pending is not None:
            return st
        ca = generate_ca(days=ca_days, now=now)
        write_atomic(d / CA_NEXT_KEY, ca.key_pem, 0o600)
        write_atomic(d / CA_BUNDLE, bundle_pem([st.issuer, ca.cert]))
    return inspect(d)


def switch_serving(directory: str | Path, *, days: int = DEFAULT_SERVING_DAYS,
                   now: _dt.datetime | None = None) -> CertDirStatus:
    """Rotation step 2: issue a serving certificate for the same host names from the pending
    CA, replace ``tls.key``/``tls.crt`` and make the pending CA the issuer (``ca.key``).
    Raises ``CertError`` when no rotation is pending (run ``publish_new_ca`` first, and wait)."""
    d = _check_dir(directory, create=False)
    with locked(d):
        st = inspect(d)
        if st.pending is None:
            raise CertError(f"{d}: no new CA is published (no {CA_NEXT_KEY}); rotation step 'publish' comes first")
        hosts = st.hosts
        if not hosts:
            raise CertError(f"{d / TLS_CERT}: has no SubjectAlternativeName to carry over")
        next_ca = KeyPair(bundle_pem([st.pending]), _read(d / CA_NEXT_KEY))
        serving = generate_serving(next_ca, hosts, days=days, now=now)
        write_atomic(d / TLS_KEY, serving.key_pem, 0o600)
        write_atomic(d / TLS_CERT, serving.cert_pem)
        os.replace(d / CA_NEXT_KEY, d / CA_KEY)
    return inspect(d)


def trim_bundle(directory: str | Path) -> CertDirStatus:
    """Drop every CA but the current issuer from ``ca.crt`` (after a rotation, once nothing
    signed by the old CA is served). Raises ``CertError`` during a rotation."""
    d = _check_dir(directory, create=False)
    with locked(d):
        st = inspect(d)
        if st.pending is not None:
            raise CertError(f"{d}: a rotation is in progress ({CA_NEXT_KEY} exists); finish it with 'switch' first")
        if len(st.bundle) > 1:
            write_atomic(d / CA_BUNDLE, bundle_pem([st.issuer]))
    return inspect(d)


def rotate(directory: str | Path, *, wait_seconds: float = 2.0, ca_days: int = DEFAULT_CA_DAYS,
           days: int = DEFAULT_SERVING_DAYS, sleep: Callable[[float], None] = time.sleep,
           on_step: Callable[[str, CertDirStatus], None] | None = None) -> CertDirStatus:
    """A full rotation: ``publish_new_ca``, wait ``wait_seconds`` for clients to pick up the
    bundle, ``switch_serving``. Resumes an interrupted rotation (a pending CA is reused).
    ``on_step(name, status)`` is called after each step ("publish", "switch")."""
    st = publish_new_ca(directory, ca_days=ca_days)
    if on_step:
        on_step("publish", st)
    if wait_seconds > 0:
        sleep(wait_seconds)
    st = switch_serving(directory, days=days)
    if on_step:
        on_step("switch", st)
    return st


def describe(st: CertDirStatus) -> list[str]:
    """Human-readable lines: bundle entries, issuer, serving certificate, hosts, expiry."""
    lines = [f"directory: {st.directory}"]
    for c in st.bundle:
        role = "issuer" if c == st.issuer else "pending" if c == st.pending else "previous"
        lines.append(f"ca.crt: {c.subject.rfc4514_string()} ({role}) expires "
                     f"{c.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ} sha256 {fingerprint(c)[:16]}")
    lines.append(f"tls.crt: hosts {', '.join(st.hosts)} expires {st.serving.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}")
    return lines
