"""Admission decisions as plain data: what ``review.mutate``/``review.validate`` return and the
server and the CLI render. A ``Decision`` is frozen: derive another with ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taugate.kinds.base import SHAPE_POLICY
from taugate.violation import Action, Violation

__all__ = ["Action", "Decision", "Violation"]

MAX_PROBLEMS_SHOWN = 20
"""Problems listed in a denial message; the rest are counted (``... and N more problem(s)``).
kubectl prints the whole message, and the API server stores it in events and audit logs: a
hostile object with thousands of broken fields must not make a megabyte-sized answer."""

MAX_LINE_CHARS = 1000
"""Characters of one problem line in a denial message (values quoted from the object included)."""


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else f"{line[:MAX_LINE_CHARS - 32]}... ({len(line)} characters in all)"


@dataclass(frozen=True)
class Decision:
    """The outcome of one admission step.

    ``patch`` is a JSONPatch (list of RFC 6902 operations) or None when nothing changes;
    ``object`` is the object after the patch (for the CLI); ``warnings`` are shown by kubectl;
    ``violations`` are every deny (all reported together); ``dryrun`` the ones only logged;
    ``code`` the HTTP-style status code placed in ``response.status.code`` on denial (503 when
    a policy failed at run time and so could not judge the request); ``policy_failures`` names
    the policies that failed on this object.
    """

    allowed: bool
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dryrun: list[Violation] = field(default_factory=list)
    patch: list[dict] | None = None
    object: dict | None = None
    code: int = 200
    reason: str = ""
    policy_failures: list[str] = field(default_factory=list)
    said_before: bool = False  # a reinvocation's answer: its warnings and dry-run hits were logged the first time

    @property
    def message(self) -> str:
        """The denial text: a headline, then one line per violation, at most
        ``MAX_PROBLEMS_SHOWN`` lines of at most ``MAX_LINE_CHARS`` characters, then
        ``... and N more problem(s)`` for those left out."""
        if self.allowed:
            return ""
        lines = [_clip(self.reason or f"taugate denied the request ({len(self.violations)} problem(s)):")]
        lines += [_clip(f"- {v.render()}") for v in self.violations[:MAX_PROBLEMS_SHOWN]]
        if len(self.violations) > MAX_PROBLEMS_SHOWN:
            lines.append(f"... and {len(self.violations) - MAX_PROBLEMS_SHOWN} more problem(s)")
        return "\n".join(lines)

    @property
    def causes(self) -> list[dict[str, str]]:
        """The denial's problems as ``metav1.StatusCause`` objects (``details.causes`` of the
        Status), one per violation in the order of ``message``, at most ``MAX_PROBLEMS_SHOWN``
        (the message counts the rest): ``field`` the violation's field path (left out when it
        has none, as apimachinery's ``omitempty``), ``message`` ``[policy] text`` clipped like a
        message line, ``reason`` a ``metav1.CauseType`` (k8s.io/apimachinery
        pkg/apis/meta/v1/types.go): ``FieldValueInvalid`` for a value no Kubernetes object could
        hold (the ``object-shape`` rule), ``InternalError`` for a policy that failed on the
        object (not the researcher's input), ``FieldValueForbidden`` for every other rule (a
        well-formed value the platform's policy does not permit here).

        The API server hands the webhook's ``response.status`` (a ``metav1.Status``) to the client
        as the error: k8s.io/apiserver@v0.37.2 pkg/admission/plugin/webhook/request/
        admissionreview.go ``VerifyAdmissionResponse`` keeps it whole, and the validating and
        mutating dispatchers return ``errors.ToStatusErr(name, result)``
        (pkg/admission/plugin/webhook/errors/statuserror.go), which only raises a code below 400
        to 400, sets ``status: Failure`` and prefixes the message with ``admission webhook
        "<name>" denied the request: ``; ``reason`` and ``details.causes`` reach kubectl and the
        client libraries as sent."""
        if self.allowed:
            return []
        failed = set(self.policy_failures)
        out = []
        for v in self.violations[:MAX_PROBLEMS_SHOWN]:
            reason = ("FieldValueInvalid" if v.policy == SHAPE_POLICY
                      else "InternalError" if v.policy in failed else "FieldValueForbidden")
            cause = {"reason": reason, "message": _clip(f"[{v.policy}] {v.message}")}
            if v.field:
                cause["field"] = _clip(v.field)
            out.append(cause)
        return out

    @classmethod
    def allow(cls, obj: dict | None = None, warnings: list[str] | None = None, *,
              dryrun: list[Violation] | None = None, policy_failures: list[str] | None = None) -> Decision:
        return cls(True, object=obj, warnings=list(warnings or []), dryrun=list(dryrun or []),
                   policy_failures=list(policy_failures or []))

    @classmethod
    def deny(cls, violations: list[Violation] | tuple[Violation, ...], *, warnings: list[str] | None = None,
             reason: str = "", obj: dict | None = None, code: int = 403, dryrun: list[Violation] | None = None,
             policy_failures: list[str] | None = None) -> Decision:
        return cls(False, violations=list(violations), warnings=list(warnings or []), reason=reason,
                   object=obj, code=code, dryrun=list(dryrun or []), policy_failures=list(policy_failures or []))
