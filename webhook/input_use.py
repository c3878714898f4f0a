"""Which parts of the policy input a policy set reads, and whether its answer depends on anything else.

Admission hands every policy the whole ``input`` document (``taugate.policy_input``). Much of it is
different on every request and read by no policy of the library: the object's ``metadata`` (name,
run-id label), ``userInfo``, ``operation``. ``scan`` reads the Rego source of a policy set and finds
which of those parts (``TRIMMABLE``) no rule can reach; ``InputUse.trim`` drops them. Two inputs with
the same trimmed document then get the same results, so the engine evaluates the trimmed document
and remembers results by it (``webhook.regorus_engine.EmbeddedPolicyEngine``): a sweep of jobs of
one shape, the old object of an UPDATE, and a retried request are evaluated once.

The scan is conservative, never clever. A part is kept when any rule could read it:

- ``input`` anywhere not followed by a field (``x := input``, ``with input as``, ``walk(input, ...)``,
  ``input[k]``) keeps everything;
- ``input.object`` not followed by a literal field (``o := input.object``, ``f(input.object)``,
  ``input.object[k]``) keeps all of ``object``, ``metadata`` included (an alias can reach it);
- a literal reference (``input.object.metadata.name``, ``input["userInfo"]``) keeps that part.

Comments and string literals are skipped. A set whose answer may change with nothing in the input
changing (``time.now_ns``, ``http.send``, ``rand.intn``, ``uuid.rfc4122``, ``opa.runtime``,
``net.lookup_ip_addr``: OPA's non-deterministic built-ins, ``ast/builtins.go`` ``Nondeterministic:
true``) is marked ``deterministic=False`` and its results are never remembered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

TRIMMABLE: tuple[tuple[str, ...], ...] = (("operation",), ("userInfo",), ("object", "metadata"))
"""The parts of the input a policy set may leave unread: different on every request (a new name
and run-id, another user, CREATE or UPDATE), so remembering results is useless unless they go."""

NONDETERMINISTIC = ("time.now_ns", "http.send", "rand.intn", "uuid.rfc4122", "uuid.parse", "opa.runtime",
                    "net.lookup_ip_addr", "io.jwt.decode_verify")
"""OPA built-ins whose result can change while the input stays the same (OPA v1
``ast/builtins.go``, the built-ins marked ``Nondeterministic``; ``io.jwt.decode_verify`` reads the
clock)."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_STEP = re.compile(rf'\s*(?:\.\s*({_NAME})|\[\s*"((?:[^"\\]|\\.)*)"\s*\])')
_INPUT = re.compile(r"(?<![A-Za-z0-9_.])input(?![A-Za-z0-9_])")


def _code(source: str) -> str:
    """``source`` with comments removed and every string literal replaced by ``""`` of the same
    kind (so ``"# not a comment"`` and ``"input"`` in a message are not read as code). Rego's
    strings: ``"..."`` with backslash escapes, and raw ```...``` strings."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c == "#":
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif c == '"':
            j = i + 1
            while j < n and source[j] != '"' and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            # A key in brackets stays readable: input["userInfo"] is a reference, not a message.
            literal = source[i:j + 1]
            out.append(literal if re.fullmatch(r'"[A-Za-z0-9_]*"', literal) else '""')
            i = j + 1
        elif c == "`":
            j = source.find("`", i + 1)
            out.append('""')
            i = n if j < 0 else j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class InputUse:
    """What a policy set reads of its input: ``unread`` are the ``TRIMMABLE`` parts no rule can
    reach (paths of keys, e.g. ``("object", "metadata")``); ``deterministic`` is False when a rule
    calls a built-in of ``NONDETERMINISTIC`` (then results are never remembered)."""

    unread: frozenset[tuple[str, ...]]
    deterministic: bool

    @cached_property
    def read(self) -> frozenset[tuple[str, ...]]:
        """The ``TRIMMABLE`` parts some rule can reach (what ``trim`` keeps of them)."""
        return frozenset(TRIMMABLE) - self.unread

    def trim(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` (the policy input) without the ``unread`` parts: a shallow copy where something
        goes, ``doc`` itself where nothing does. Never changes ``doc``."""
        if not self.unread:
            return doc
        out = {k: v for k, v in doc.items() if (k,) not in self.unread}
        for path in self.unread:
            if len(path) == 2 and isinstance(out.get(path[0]), dict) and path[1] in out[path[0]]:
                out[path[0]] = {k: v for k, v in out[path[0]].items() if k != path[1]}
        return out


def scan(sources: list[str] | tuple[str, ...]) -> InputUse:
    """The ``InputUse`` of the Rego modules ``sources`` (every module the engine serves: the
    policies, their library and the generated aggregate; ``_test.rego`` files never run at
    admission and are not passed)."""
    whole = False
    read: set[tuple[str, ...]] = set()
    deterministic = True
    for source in sources:
        code = _code(source)
        if any(name in code for name in NONDETERMINISTIC):
            deterministic = False
        for m in _INPUT.finditer(code):
            path = _path_after(code, m.end())
            if not path:
                whole = True
                break
            read.add(path)
        if whole:
            break
    if whole:
        return InputUse(frozenset(), deterministic)
    unread = frozenset(p for p in TRIMMABLE if not any(r[:len(p)] == p or p[:len(r)] == r for r in read))
    return InputUse(unread, deterministic)


def _path_after(code: str, at: int) -> tuple[str, ...]:
    """The literal keys that follow ``input`` at ``code[at:]``, at most two (``object``,
    ``metadata``): one key when the second is not literal (``input.object[k]``). A key in a string
    the scan could not read as a plain name (``input[`userInfo`]``, ``input.object["meta\\u0064ata"]``,
    both valid Rego for the literal key) is not literal: what lies under it is kept."""
    path: list[str] = []
    while len(path) < 2:
        m = _STEP.match(code, at)
        if not m:
            break
        key = m.group(1) if m.group(1) is not None else m.group(2)
        if not key:  # a string ``_code`` blanked (escaped, raw, or not a plain name): it may name any key
            break
        path.append(key)
        at = m.end()
    return tuple(path)


__all__ = ["NONDETERMINISTIC", "TRIMMABLE", "InputUse", "scan"]
