"""One broken rule, the one type every check reports: where (``field``, a Kubernetes field path,
``taugate.fieldpath.field_path``), what was asked, what is allowed, how to fix it, and which rule
(``policy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["deny", "warn", "dryrun"]


@dataclass(frozen=True)
class Violation:
    """One broken rule. ``message`` holds asked / allowed / fix in one sentence or three;
    ``action`` is the enforcement (``deny`` rejects, ``warn`` becomes an AdmissionReview
    warning, ``dryrun`` is only logged and counted)."""

    policy: str
    field: str
    message: str
    action: Action = "deny"

    def render(self) -> str:
        """``[policy] field: message``, the form kubectl shows the researcher."""
        where = f"{self.field}: " if self.field else ""
        return f"[{self.policy}] {where}{self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "field": self.field, "msg": self.message, "action": self.action}
