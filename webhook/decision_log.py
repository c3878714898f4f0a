"""The webhook's decision log: every denial, warning and dry-run hit, once, as one structured line
(ARCHITECTURE.md section 2), from the webhook that answered: the API server stops at the first
denial (k8s.io/apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go and
validating/dispatcher.go), and a reinvoked ``/mutate`` sees its own output (``Decision.said_before``:
nothing to change and the record taugate signed for it), so logs no warning or dry-run hit again.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from taugate.webhook.decision import Decision

log = logging.getLogger("taugate.webhook.decisions")

_POLICY = re.compile(r"^\[([^\]]+)\]")
MUTATION_RULE = "taugate"
"""The rule named for a warning of what mutation set or restored (it carries no ``[policy]``)."""


def _rule(line: str) -> str:
    m = _POLICY.match(line)
    return m.group(1) if m else MUTATION_RULE


def subject(req: dict) -> dict[str, Any]:
    """The fields naming a request's author and object: ``uid``, ``operation``, ``user``, ``dry_run``
    and ``object`` (``kind``, ``namespace``, ``name``, or ``generateName`` before the API server gives
    a name); every value is read from the AdmissionRequest, never trusted to be a string."""
    obj = req.get("object") if isinstance(req.get("object"), dict) else req.get("oldObject")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    kind, user = req.get("kind"), req.get("userInfo")
    kind, user = (kind if isinstance(kind, dict) else {}), (user if isinstance(user, dict) else {})
    ref = {"kind": str(kind.get("kind") or ""), "namespace": str(req.get("namespace") or "")}
    name = req.get("name") or meta.get("name")
    if name:
        ref["name"] = str(name)
    else:
        ref["generateName"] = str(meta.get("generateName") or "")
    return {"uid": str(req.get("uid") or ""), "operation": str(req.get("operation") or ""),
            "user": str(user.get("username") or ""), "dry_run": req.get("dryRun") is True, "object": ref}


def log_decision(path: str, req: dict, decision: Decision) -> int:
    """Log ``decision`` (the answer of webhook ``path`` to ``req``): one ``denied`` line, one
    ``warned`` line, one ``dryrun`` line, each only when there is something to say. Returns how many
    lines were written (the server's tests count them)."""
    lines = 0
    about: dict[str, Any] | None = None

    def write(level: int, what: str, policies: list[str], problems: list[str]) -> None:
        nonlocal lines, about
        about = about if about is not None else subject(req)
        ref = about["object"]
        who = ref.get("name") or f"{ref.get('generateName', '')}*"
        log.log(level, "%s %s %s %s/%s by %s: %s", what, about["operation"], ref["kind"], ref["namespace"], who,
                about["user"] or "?", "; ".join(problems),
                extra={"decision": what, "path": path, **about, "policies": sorted(set(policies)),
                       "problems": problems})
        lines += 1

    if not decision.allowed:
        problems = [v.render() for v in decision.violations] or [decision.reason]
        write(logging.INFO, "denied", [v.policy for v in decision.violations] or ["taugate"], problems)
    if decision.warnings and not decision.said_before:
        write(logging.INFO, "warned", [_rule(w) for w in decision.warnings], list(decision.warnings))
    if decision.dryrun and not decision.said_before:
        write(logging.INFO, "dryrun", [v.policy for v in decision.dryrun], [v.render() for v in decision.dryrun])
    return lines
