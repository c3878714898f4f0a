"""Whether a policy set's answer depends on its input alone (then results may be remembered by the
whole input: ``webhook.policy.embedded.EmbeddedPolicyEngine``).

A set whose answer may change with nothing in the input changing calls one of OPA's
non-deterministic built-ins (``ast/builtins.go``, ``Nondeterministic: true``): ``time.now_ns``,
``http.send``, ``rand.intn``, ``uuid.rfc4122``, ``opa.runtime``, ``net.lookup_ip_addr``, ... Rego
has no higher-order functions, so a call names its built-in in the code: a set whose code (comments
and string literals skipped) names none of them is deterministic. The check can only err towards
"not deterministic" (a name in code that is not a call), which costs speed, never a decision.
"""

from __future__ import annotations

import re

NONDETERMINISTIC = ("time.now_ns", "http.send", "rand.intn", "uuid.rfc4122", "uuid.parse", "opa.runtime",
                    "net.lookup_ip_addr", "io.jwt.decode_verify")
"""OPA built-ins whose result can change while the input stays the same (OPA v1
``ast/builtins.go``, the built-ins marked ``Nondeterministic``; ``io.jwt.decode_verify`` reads the
clock)."""


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


def deterministic(sources: list[str] | tuple[str, ...]) -> bool:
    """True when no module of ``sources`` names a built-in of ``NONDETERMINISTIC`` in its code."""
    return not any(name in _code(source) for source in sources for name in NONDETERMINISTIC)


__all__ = ["NONDETERMINISTIC", "deterministic"]
