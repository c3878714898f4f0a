"""The certificate directory: the ``certs.bundle`` items under a ``kubernetes.io/tls`` Secret's
names, so it can be a mounted Secret volume. Every file is written atomically (temporary file,
``fsync``, ``rename``, ``fsync`` of the directory) in a crash-safe order, keys mode 0600; one
directory's operations are serialised with ``flock`` on ``.lock``.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from taugate.certs import bundle
from taugate.certs.bundle import (
    CA_BUNDLE,
    CA_KEY,
    CA_NEXT_KEY,
    ITEMS,
    TLS_CERT,
    TLS_KEY,
    CertSet,
    CertStatus,
    check,
)
from taugate.certs.pki import (
    DEFAULT_CA_DAYS,
    DEFAULT_SERVING_DAYS,
    LOCAL_HOSTS,
    CertError,
    check_validity,
    fingerprint,
    service_dns_names,
)
from taugate.files import (
    MAX_KEY_FILE_BYTES,
    InputError,
    read_limited,
    write_atomic,  # noqa: F401  (re-exported: certs.store.write_atomic)
)

LOCK = ".lock"


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``DIR/.lock`` (serialises generate/rotate on one directory)."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _check_dir(directory: str | Path, *, create: bool) -> Path:
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise CertError(f"{d}: is not a directory")
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
class CertDirStatus(CertStatus):
    """``certs.bundle.CertStatus`` plus its ``directory``."""

    directory: Path = Path(".")


def read_set(directory: str | Path) -> CertSet:
    """``CertError`` names a missing file."""
    d = Path(directory)
    if not d.is_dir():
        raise CertError(f"{d}: is not a directory" if d.exists() else f"{d}: no such directory")
    items: dict[str, bytes | None] = {}
    for name in ITEMS:
        if name == CA_NEXT_KEY and not (d / name).exists():
            items[name] = None
            continue
        try:
            items[name] = read_limited(d / name, MAX_KEY_FILE_BYTES, "certificate and key files")
        except InputError as e:
            raise CertError(str(e)) from None
    return CertSet.from_items(items, lambda n: str(d / n))


# Write order: a crash between two writes always leaves a set that ``check`` accepts (or, during
# ``generate``, an incomplete one that ``generate --force`` replaces): the new CA key before the
# bundle that names its certificate; the serving pair before the CA key that vouches for it.
_WRITE_ORDER = (CA_NEXT_KEY, TLS_KEY, TLS_CERT, CA_KEY, CA_BUNDLE)
_KEYS = {CA_KEY, CA_NEXT_KEY, TLS_KEY}


def write_set(directory: Path, new: CertSet, old: CertSet | None = None) -> None:
    """Write the items of ``new`` that differ from ``old`` atomically, in a crash-safe order,
    keys mode 0600; ``ca-next.key`` is removed last when ``new`` has none."""
    before = old.items() if old else {}
    after = new.items()
    for name in _WRITE_ORDER:
        if name in after and after[name] != before.get(name):
            write_atomic(directory / name, after[name], 0o600 if name in _KEYS else 0o644)
    if CA_NEXT_KEY not in after:
        with suppress(FileNotFoundError):
            (directory / CA_NEXT_KEY).unlink()


def inspect(directory: str | Path) -> CertDirStatus:
    """Read and cross-check (no writes); ``CertError`` names the file."""
    d = Path(directory)
    st = check(read_set(d), lambda n: str(d / n))
    return CertDirStatus(st.bundle, st.issuer, st.serving, st.pending, directory=d)


def _step(directory: str | Path, fn: Callable[[CertSet, Callable[[str], str]], CertSet]) -> CertDirStatus:
    d = _check_dir(directory, create=False)
    with locked(d):
        old = read_set(d)
        new = fn(old, lambda n: str(d / n))
        if new != old:
            write_set(d, new, old)
    return inspect(d)


def generate(directory: str | Path, *, service: str, namespace: str, extra_hosts: tuple[str, ...] = LOCAL_HOSTS,
             ca_days: int = DEFAULT_CA_DAYS, days: int = DEFAULT_SERVING_DAYS, force: bool = False,
             now: _dt.datetime | None = None) -> CertDirStatus:
    """A CA and a serving certificate in ``directory`` (created mode 0700 if missing); SANs:
    ``service_dns_names`` plus ``extra_hosts`` (localhost and 127.0.0.1 by default).

    Refuses (``CertError``) to overwrite an existing ``ca.crt`` or ``tls.crt`` unless ``force``:
    replacing a CA in place breaks every client that trusts it (use ``rotate``). Invalid names or
    periods are refused before anything is created; a directory this call created is removed
    again when it fails."""
    check_validity(ca_days=ca_days, days=days)
    service_dns_names(service, namespace)
    created = not Path(directory).exists()
    d = _check_dir(directory, create=True)
    try:
        with locked(d):
            existing = [n for n in (CA_BUNDLE, TLS_CERT) if (d / n).exists()]
            if existing and not force:
                raise CertError(f"{d / existing[0]}: already exists; use 'taugate certs rotate' to replace "
                                f"certificates without breaking clients, or --force")
            write_set(d, bundle.create(service=service, namespace=namespace, extra_hosts=extra_hosts,
                                       ca_days=ca_days, days=days, now=now))
    except BaseException:
        if created:
            shutil.rmtree(d, ignore_errors=True)
        raise
    return inspect(d)


def publish_new_ca(directory: str | Path, *, ca_days: int = DEFAULT_CA_DAYS,
                   now: _dt.datetime | None = None) -> CertDirStatus:
    """Rotation step 1 (``certs.bundle.publish``): a new CA is published next to the current
    one. Idempotent: when a rotation is already pending, nothing changes."""
    return _step(directory, lambda cs, where: bundle.publish(cs, ca_days=ca_days, now=now, where=where))


def switch_serving(directory: str | Path, *, days: int = DEFAULT_SERVING_DAYS,
                   now: _dt.datetime | None = None) -> CertDirStatus:
    """Rotation step 2 (``certs.bundle.switch``): serve a certificate of the pending CA.
    ``CertError`` when no rotation is pending (run ``publish_new_ca`` first, and wait)."""
    return _step(directory, lambda cs, where: bundle.switch(cs, days=days, now=now, where=where))


def trim_bundle(directory: str | Path) -> CertDirStatus:
    """Drop every CA but the current issuer from ``ca.crt`` (``CertError`` during a rotation)."""
    return _step(directory, lambda cs, where: bundle.trim(cs, where))


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
