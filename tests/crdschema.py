"""Validate custom resources against a CRD's ``openAPIV3Schema`` with ``jsonschema``.

The OpenAPI dialect of CRDs is not JSON Schema; it is translated so:
``x-kubernetes-int-or-string`` becomes integer-or-string, ``nullable: true`` admits null, and
``additionalProperties: false`` is added to every object with ``properties`` unless it has
``x-kubernetes-preserve-unknown-fields`` (the API server prunes unknown fields; we reject them,
so a typo cannot pass). ``metadata`` is left open (the API server validates ObjectMeta itself), and a required
field with a ``default`` is not required (the API server defaults before it validates).
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import jsonschema
import yaml


def translate(schema: dict, *, top: bool = True) -> dict:
    """A JSON Schema (draft 7) equivalent of a CRD structural schema."""
    s = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-") and k not in ("nullable", "format")}
    if schema.get("x-kubernetes-int-or-string"):
        s.pop("type", None)
        s.pop("anyOf", None)
        s["type"] = ["integer", "string"]
    if "required" in s and "properties" in s:
        # The API server applies ``default`` before validating, so a defaulted field is never missing.
        s["required"] = [r for r in s["required"] if "default" not in s["properties"].get(r, {})]
    if "properties" in s:
        s["properties"] = {k: ({"type": "object"} if top and k == "metadata" else translate(v, top=False))
                           for k, v in s["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in s:
            s["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = translate(s["additionalProperties"], top=False)
    if isinstance(s.get("items"), dict):
        s["items"] = translate(s["items"], top=False)
    for key in ("anyOf", "allOf", "oneOf"):
        if key in s:
            s[key] = [translate(x, top=False) for x in s[key]]
    if schema.get("nullable") and "type" in s:
        t = s["type"]
        s["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    return s


@cache
def crd_validator(path: str, version: str = "v1") -> jsonschema.Draft7Validator:
    """A validator for the named version of the CRD in the file at ``path``."""
    crd = yaml.safe_load(Path(path).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return jsonschema.Draft7Validator(translate(copy.deepcopy(v["schema"]["openAPIV3Schema"])))
    raise KeyError(f"{path}: no version {version}")


def crd_errors(obj: dict, path: str | Path, version: str = "v1") -> list[str]:
    """Every schema error of ``obj``, as ``path: message`` strings (empty when valid)."""
    v = crd_validator(str(path), version)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]
