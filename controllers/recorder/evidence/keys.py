"""Ed25519 keys for evidence: the recorder's signing key and the public keys verifiers pin.
"""

from __future__ import annotations

import base64
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from taugate.controllers.recorder.evidence.format import EvidenceError, sha256_hex
from taugate.files import MAX_KEY_FILE_BYTES, InputError, read_limited


def _read_key_file(path: str | os.PathLike, what: str) -> bytes:
    """A PEM file of at most ``MAX_KEY_FILE_BYTES``; EvidenceError naming it and ``what`` it holds."""
    try:
        return read_limited(path, MAX_KEY_FILE_BYTES, "key files")
    except InputError as e:
        raise EvidenceError(f"cannot read {what}: {e}") from None



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
        return cls.from_pem(_read_key_file(path, "signing key"), str(path))

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
    data = _read_key_file(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        return Signer.from_pem(data, str(path))._key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{path}: not an Ed25519 public key")
    return key
