"""Every ``input.`` reference of a policy set checked against the input's JSON Schema
(``policies/input.schema.json``), so a rule on a path the input never has is an error naming the
file and line instead of a rule that silently never fires.

The references come from the engine's own parse of each module (regorus ``get_ast_as_json``): a
chain of ``.field`` and ``[...]`` steps rooted at ``input``, read up to its first step that is not a
literal (a variable, ``_``, a call). A path is unknown when a step names a property an object of
the schema does not declare and that object allows no others (``additionalProperties: false``);
objects without that (``input.review.object``: any Kubernetes object) accept any path below them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regorus

from taugate.files import MAX_POLICY_FILE_BYTES, InputError, read_text_limited
from taugate.webhook.policy.sets import PolicyError, PolicySet

SCHEMA_FILE = "input.schema.json"


@dataclass(frozen=True)
class InputReference:
    """``input`` followed by the literal ``path`` at ``file``:``line``."""

    file: str
    line: int
    path: tuple[str | int, ...]

    def render(self) -> str:
        return "input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path)


def schema_for(ps: PolicySet) -> Path:
    """The schema a set is checked against: its folder's ``input.schema.json``, else the bundled one."""
    from taugate.settings import Settings

    own = ps.root / SCHEMA_FILE
    return own if own.is_file() else Path(Settings().policy_dir) / SCHEMA_FILE


def input_references(ps: PolicySet) -> list[InputReference]:
    """Every ``input`` reference in the set's modules (not its tests, which build their own inputs)."""
    out: list[InputReference] = []
    for f in ps.modules:
        engine = regorus.Engine()
        try:
            engine.add_policy(f.rel, f.source)
            ast = json.loads(engine.get_ast_as_json())
        except (RuntimeError, ValueError):
            continue  # a parse error is the compile step's to report
        for module in ast:
            _walk(module.get("ast"), f.display, out)
    return out


def _chain(node: Any) -> tuple[str, tuple[str | int | None, ...]] | None:
    """``(root variable, steps)`` of a reference node (a step None: not a literal)."""
    steps: list[str | int | None] = []
    while isinstance(node, dict) and len(node) == 1:
        (kind, body), = node.items()
        if kind == "RefDot":
            steps.append(body["field"][1])
        elif kind == "RefBrack":
            index = body.get("index") or {}
            (ikind, ibody), = index.items() if isinstance(index, dict) and len(index) == 1 else (("", {}),)
            value = ibody.get("value") if isinstance(ibody, dict) else None
            steps.append(value if ikind in ("String", "RawString") and isinstance(value, str)
                         else value if ikind == "Number" and isinstance(value, int) else None)
        elif kind == "Var":
            return body.get("value"), tuple(reversed(steps))
        else:
            return None
        node = body["refr"]
    return None


def _walk(node: Any, file: str, out: list[InputReference]) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, file, out)
        return
    if not isinstance(node, dict):
        return
    if len(node) == 1 and next(iter(node)) in ("RefDot", "RefBrack"):
        found = _chain(node)
        body = next(iter(node.values()))
        if found is not None and found[0] == "input":
            path: list[str | int] = []
            for step in found[1]:
                if step is None:
                    break
                path.append(step)
            out.append(InputReference(file, body["span"]["line"], tuple(path)))
            _walk_indexes(node, file, out)
            return
    for value in node.values():
        _walk(value, file, out)


def _walk_indexes(node: Any, file: str, out: list[InputReference]) -> None:
    """The index expressions of a reference chain (``input.a[input.b]``) may hold references too."""
    while isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("RefDot", "RefBrack"):
        body = next(iter(node.values()))
        if "index" in body:
            _walk(body["index"], file, out)
        node = body["refr"]


def _resolve(schema: dict, node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        target: Any = schema
        for part in ref.lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        node = target
    return node


def known(schema: dict, path: tuple[str | int, ...], node: Any = None,
          at: tuple[str | int, ...] = ()) -> tuple[bool, tuple[str | int, ...], list[str]]:
    """Whether ``path`` can exist in a document of ``schema`` (from ``node``, default the root):
    ``(ok, where it stops, the properties declared there)``."""
    node = _resolve(schema, schema if node is None else node)
    if not path or not isinstance(node, dict):
        return True, at, []
    branches = node.get("anyOf") or node.get("oneOf")
    if branches:
        tried = [known(schema, path, branch, at) for branch in branches]
        return next((t for t in tried if t[0]), tried[0])
    step, rest = path[0], path[1:]
    if isinstance(step, int) or ("items" in node and "properties" not in node):
        items = node.get("items")
        return (True, at, []) if items is None else known(schema, rest, items, at + (step,))
    props = node.get("properties") or {}
    if step in props:
        return known(schema, rest, props[step], at + (step,))
    extra = node.get("additionalProperties", True)
    if extra is False:
        return False, at, sorted(props)
    if isinstance(extra, dict):
        return known(schema, rest, extra, at + (step,))
    return True, at, []


def unknown_references(ps: PolicySet) -> list[str]:
    """One line per ``input`` reference of the set that the input schema does not have:
    ``file:line: input.a.b is not in the input (SCHEMA: input.a has ...)``. Raises ``PolicyError``
    when the schema cannot be read."""
    path = schema_for(ps)
    try:
        schema = json.loads(read_text_limited(path, MAX_POLICY_FILE_BYTES, "policy files"))
    except (InputError, OSError, ValueError) as e:
        raise PolicyError(f"cannot read the input schema: {e}", str(path)) from None
    out = []
    for ref in input_references(ps):
        ok, where, props = known(schema, ref.path)
        if not ok:
            at = InputReference(ref.file, ref.line, where).render()
            out.append(f"{ref.file}:{ref.line}: {ref.render()} is not in the policy input ({path}: {at} has "
                       f"{', '.join(props) or 'no properties'}); see policies/README.md, The input")
    return out
