"""The admission record (annotation ``tau.azure.com/admission``, ARCHITECTURE.md section 4): what
the webhook decided on CREATE, bound to the object and its run-id and signed (``hmac-sha256:<hex>``,
RFC 2104, over the canonical JSON) with ``TAUGATE_ADMISSION_KEY``, since any user may write the
annotation. It cannot hold the object's ``uid``; the recorder binds a run to the first root's uid.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import orjson

from taugate import labels
from taugate.access import as_dict

SIGNATURE_PREFIX = "hmac-sha256:"


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes the signature covers: ``record`` without ``signature``, as JSON with sorted keys
    and no spaces. Raises ``TypeError`` for values JSON cannot hold."""
    return orjson.dumps({k: v for k, v in record.items() if k != "signature"}, option=orjson.OPT_SORT_KEYS)


def _mac(record: dict[str, Any], key: bytes) -> str:
    return SIGNATURE_PREFIX + hmac.new(key, canonical(record), hashlib.sha256).hexdigest()


def binding_of(obj: dict[str, Any], namespace: str | None = None) -> dict[str, str]:
    """``{"namespace", "kind", "name"}``, or ``generateName`` for a name still to be generated: the
    API server sets ``metadata.name`` and ``uid`` only after mutating admission (k8s.io/apiserver
    ``pkg/registry/rest/create.go`` ``BeforeCreate`` runs inside the storage call, after the
    admission chain of ``handlers/create.go``). ``namespace`` fills an object that names none, as
    the API server fills it from the request."""
    meta = as_dict(obj.get("metadata"))
    out = {"namespace": str(meta.get("namespace") or namespace or ""), "kind": str(obj.get("kind") or "")}
    if isinstance(meta.get("name"), str) and meta["name"]:
        out["name"] = meta["name"]
    else:
        out["generateName"] = str(meta.get("generateName") or "")
    return out


def sign(record: dict[str, Any], obj: dict[str, Any], key: bytes | None,
         namespace: str | None = None) -> dict[str, Any]:
    """``record`` bound to ``obj`` (its ``object`` binding and the run-id label ``obj`` carries)
    and, with a ``key``, signed. Without a key (``taugate admit`` offline) the record is bound but
    unsigned, and a recorder that holds a key will not trust it."""
    run_id = as_dict(as_dict(obj.get("metadata")).get("labels")).get(labels.RUN_ID)
    out = {**record, "object": binding_of(obj, namespace), "runId": run_id}
    if key:
        out["signature"] = _mac(out, key)
    return out


@dataclass(frozen=True)
class RecordCheck:
    """``trusted`` when signed with the key and bound to the object; otherwise ``reason`` says why
    not, in one line."""

    trusted: bool
    reason: str = ""


def verify(record: Any, obj: dict[str, Any], key: bytes | None) -> RecordCheck:
    """Trusted only when a ``key`` is given, the signature matches, and the binding is ``obj``'s:
    same namespace and kind, same name (or, for a record made before the name was generated, a
    name that starts with the recorded ``generateName``, or no name yet and the same
    ``generateName``: the object still in admission), and the run-id label of ``obj``. ``obj``
    must carry its namespace (the stored object does; in admission, fill it from the request)."""
    if key is None:
        return RecordCheck(False, "no admission key is configured (TAUGATE_ADMISSION_KEY), "
                                  "so no record can be verified")
    if not isinstance(record, dict):
        return RecordCheck(False, "the record is not a JSON object")
    sig = record.get("signature")
    if not isinstance(sig, str) or not sig.startswith(SIGNATURE_PREFIX):
        return RecordCheck(False, "the record is not signed")
    try:
        expected = _mac(record, key)
    except TypeError:
        return RecordCheck(False, "the record holds values JSON cannot")
    if not hmac.compare_digest(sig, expected):
        return RecordCheck(False, "the record's signature does not match (edited, or signed with another key)")
    bound = as_dict(record.get("object"))
    meta = as_dict(obj.get("metadata"))
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    here = f"{obj.get('kind')} {meta.get('namespace')}/{name}"
    if bound.get("namespace") != meta.get("namespace") or bound.get("kind") != obj.get("kind"):
        return RecordCheck(False, f"the record was made for {bound.get('kind')} in namespace "
                                  f"{bound.get('namespace')!r}, not for {here}")
    if "name" in bound and bound["name"] != name:
        return RecordCheck(False, f"the record was made for {bound.get('kind')} {bound['name']!r}, not for {here}")
    generated = bound.get("generateName") if isinstance(bound.get("generateName"), str) else None
    at_admission = not name and generated is not None and meta.get("generateName") == generated
    if "name" not in bound and not (generated is not None and (at_admission or (name and name.startswith(generated)))):
        return RecordCheck(False, f"the record was made for a name generated from {bound.get('generateName')!r}, "
                                  f"not for {here}")
    run_id = as_dict(meta.get("labels")).get(labels.RUN_ID)
    if record.get("runId") != run_id:
        return RecordCheck(False, f"the record is for run {record.get('runId')!r}, "
                                  f"but {here} carries run-id {run_id!r}")
    return RecordCheck(True)


def encode(record: dict[str, Any]) -> str:
    """The annotation value: compact JSON with sorted keys."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS).decode()


def decode(raw: Any) -> dict[str, Any] | None:
    """The parsed annotation value, or None when it is absent or not a JSON object."""
    if not isinstance(raw, str):
        return None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
