"""Audit results as the Policy Reports working group's ``wgpolicyk8s.io/v1alpha2`` PolicyReports
(ARCHITECTURE.md section 3), pure. The schema is the CRD Kyverno ships
(``config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml``, kyverno v1.19.1).

A result's ``rule`` repeats its ``policy`` (a taugate policy is one rule set with one action);
``category`` tells a library policy from a built-in rule of Kubernetes, Kueue or KubeRay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from taugate import labels
from taugate.kinds import KINDS
from taugate.kubeaccess import Resource
from taugate.violation import Action, Violation

if TYPE_CHECKING:
    from taugate.snapshot import ClusterState

GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
SOURCE = "taugate"
REPORT_NAME = "taugate-policy-audit"

"""Annotation: how many results past ``MAX_RESULTS`` a report counts but does not list."""

MAX_RESULTS = 1000
"""Results listed in one report (~0.5 KiB each, well under etcd's 1.5 MiB object limit)."""

MAX_MESSAGE_CHARS = 1000
"""Characters of one result's message (a violation may quote values from the object)."""

CATEGORY_POLICY = "taugate policy"
CATEGORY_BUILTIN = "built-in rule (Kubernetes, Kueue, KubeRay)"

_RESULT_OF: dict[Action, str] = {"deny": "fail", "dryrun": "fail", "warn": "warn"}
SUMMARY_KEYS = ("pass", "fail", "warn", "error", "skip")


POLICY_REPORTS = Resource(GROUP, VERSION, "policyreports", "PolicyReport", True)
CLUSTER_POLICY_REPORTS = Resource(GROUP, VERSION, "clusterpolicyreports", "ClusterPolicyReport", False)


def workload_resources() -> tuple[Resource, ...]:
    """Read at call time, so a kind added to the registry is audited with no change here."""
    return tuple(Resource(k.group, k.version, k.resource, k.kind, True) for k in KINDS)


@dataclass(frozen=True)
class WorkloadAudit:
    """What the audit found on one workload. ``uid`` is empty for an object read from a file;
    ``evaluated`` is empty when the library could not judge it (no profile resolves)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str = ""
    violations: tuple[Violation, ...] = ()
    evaluated: frozenset[str] = frozenset()
    errors: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, obj: dict[str, Any], violations: Iterable[Violation] = (), evaluated: Iterable[str] = (),
           errors: dict[str, str] | None = None) -> WorkloadAudit:
        found = obj.get("metadata")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        name = meta.get("name") or meta.get("generateName") or ""
        return cls(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), str(name),
                   str(meta.get("namespace") or ""), str(meta.get("uid") or ""), tuple(violations),
                   frozenset(evaluated), tuple(sorted((errors or {}).items())))

    @property
    def passed(self) -> int:
        """Policies of the library that evaluated this workload and found nothing."""
        found = {v.policy for v in self.violations} | {p for p, _ in self.errors}
        return len(self.evaluated - found)

    def reference(self) -> dict[str, str]:
        """The ``resources[]`` entry (a core/v1 ObjectReference)."""
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace}
        if self.uid:
            ref["uid"] = self.uid
        return ref


class Auditor(Protocol):
    """What judges workloads for the audit (``taugate.webhook.audit.PolicyAuditor``, given to the
    operator by the CLI, which the controllers never import)."""

    @property
    def digest(self) -> str: ...

    def check_for_changes(self) -> bool: ...

    def audit(self, objects: Iterable[dict[str, Any]], state: ClusterState, *,
              go_on: Callable[[], None] = ...) -> list[WorkloadAudit]: ...


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 3] + "..."


def _result(audit: WorkloadAudit, v: Violation) -> dict[str, Any]:
    return {"source": SOURCE, "policy": v.policy, "rule": v.policy, "result": _RESULT_OF[v.action],
            "category": CATEGORY_POLICY if v.policy in audit.evaluated else CATEGORY_BUILTIN,
            "message": _clip(v.message), "resources": [audit.reference()],
            "properties": {"action": v.action, "field": v.field}}


def _error(audit: WorkloadAudit, policy: str, reason: str) -> dict[str, Any]:
    return {"source": SOURCE, "policy": policy, "rule": policy, "result": "error", "category": CATEGORY_POLICY,
            "message": _clip(f"the policy failed on this object ({reason}); it needs fixing"),
            "resources": [audit.reference()], "properties": {"action": "error", "field": ""}}


def _sort_key(r: dict[str, Any]) -> tuple[str, ...]:
    ref = r["resources"][0]
    return (ref["kind"], ref["name"], ref.get("uid", ""), r["policy"], r["properties"]["field"], r["result"],
            r["message"])


def _metadata(namespace: str | None, digest: str, left_out: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": REPORT_NAME, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE},
                            "annotations": {labels.POLICY_DIGEST: digest}}
    if namespace is not None:
        meta["namespace"] = namespace
    if left_out:
        meta["annotations"][labels.RESULTS_LEFT_OUT] = str(left_out)
    return meta


def namespace_report(namespace: str, audits: Iterable[WorkloadAudit], *, digest: str) -> dict[str, Any]:
    """Workloads of other namespaces are ignored."""
    results: list[dict[str, Any]] = []
    summary = dict.fromkeys(SUMMARY_KEYS, 0)
    for audit in audits:
        if audit.namespace != namespace:
            continue
        results += [_result(audit, v) for v in audit.violations]
        results += [_error(audit, p, why) for p, why in audit.errors]
        summary["pass"] += audit.passed
    for r in results:
        summary[r["result"]] += 1
    results.sort(key=_sort_key)
    return {"apiVersion": API_VERSION, "kind": "PolicyReport",
            "metadata": _metadata(namespace, digest, max(0, len(results) - MAX_RESULTS)),
            "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
            "summary": summary, "results": results[:MAX_RESULTS]}


def cluster_report(reports: Iterable[dict[str, Any]], *, digest: str) -> dict[str, Any]:
    """One result per namespace and policy with failures or warnings (``fail`` if any workload
    fails it, else ``warn``), and the sum of the summaries."""
    summary = dict.fromkeys(SUMMARY_KEYS, 0)
    results = []
    for report in sorted(reports, key=lambda r: r["metadata"]["namespace"]):
        ns = report["metadata"]["namespace"]
        for key in SUMMARY_KEYS:
            summary[key] += report["summary"][key]
        counts: dict[str, dict[str, int]] = {}
        for r in report["results"]:
            per = counts.setdefault(r["policy"], dict.fromkeys(("fail", "warn", "error"), 0))
            per[r["result"]] += 1
        for policy, per in sorted(counts.items()):
            worst = next(k for k in ("error", "fail", "warn") if per[k])
            results.append({
                "source": SOURCE, "policy": policy, "rule": policy, "result": worst,
                "message": f"{per['fail']} failing, {per['warn']} warning, {per['error']} error result(s) in "
                           f"namespace {ns}; kubectl get policyreport {REPORT_NAME} -n {ns} -o yaml lists them",
                "resources": [{"apiVersion": "v1", "kind": "Namespace", "name": ns}],
                "properties": {k: str(v) for k, v in per.items()} | {"report": f"{ns}/{REPORT_NAME}"}})
    return {"apiVersion": API_VERSION, "kind": "ClusterPolicyReport",
            "metadata": _metadata(None, digest, max(0, len(results) - MAX_RESULTS)),
            "summary": summary, "results": results[:MAX_RESULTS]}


@dataclass(frozen=True)
class Reports:

    namespaced: dict[str, dict[str, Any]] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)

    @property
    def failing(self) -> bool:
        """True when any result is ``fail`` or ``error`` (``taugate policy audit`` exits 1)."""
        s = self.cluster.get("summary") or {}
        return bool(s.get("fail") or s.get("error"))

    def all(self) -> list[dict[str, Any]]:
        return [*self.namespaced.values(), self.cluster]


def build_reports(audits: Iterable[WorkloadAudit], *, digest: str) -> Reports:
    audits = list(audits)
    namespaces = sorted({a.namespace for a in audits})
    namespaced = {ns: namespace_report(ns, audits, digest=digest) for ns in namespaces}
    return Reports(namespaced, cluster_report(namespaced.values(), digest=digest))


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) from ``current`` to ``desired`` in what taugate writes:
    ``results`` whole (a merge patch replaces arrays), the truncation annotation removed when
    ``desired`` lists every result."""
    annotations: dict[str, Any] = dict(desired["metadata"].get("annotations") or {})
    if labels.RESULTS_LEFT_OUT in ((current.get("metadata") or {}).get("annotations") or {}):
        annotations.setdefault(labels.RESULTS_LEFT_OUT, None)
    body: dict[str, Any] = {"metadata": {"labels": desired["metadata"]["labels"], "annotations": annotations}}
    for key in ("scope", "summary", "results"):
        if key in desired:
            body[key] = desired[key]
    return body


def report_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Compared in what taugate writes only: other writers' metadata and server fields are ignored."""
    if current is None:
        return True
    for key in ("scope", "summary", "results"):
        if (current.get(key) or None) != (desired.get(key) or None):
            return True
    cur_meta, want_meta = current.get("metadata") or {}, desired["metadata"]
    for part in ("labels", "annotations"):
        have = cur_meta.get(part) or {}
        want = want_meta.get(part) or {}
        if any(have.get(k) != v for k, v in want.items()):
            return True
        if part == "annotations" and labels.RESULTS_LEFT_OUT in have and labels.RESULTS_LEFT_OUT not in want:
            return True
    return False


_STRENGTH = {"none": 0, "dryrun": 1, "warn": 2, "deny": 3, "error": 3}


@dataclass(frozen=True, order=True)
class Change:
    """One result a proposed policy set enforces that the current one does not (``what_if``);
    ``action`` ``error``: the policy fails at run time on the workload; ``before``: what the current
    set does there."""

    namespace: str
    policy: str
    action: str
    workload: str
    field: str
    message: str
    before: str


def _actions(audits: Iterable[WorkloadAudit]) -> dict[tuple[str, str, str, str], tuple[str, str]]:
    """``(namespace, Kind/name, policy, field) -> (strongest action, its message)``."""
    out: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    for a in audits:
        workload = f"{a.kind}/{a.name}"
        found: list[tuple[str, str, str, str]] = [(v.policy, v.field, v.action, v.message) for v in a.violations]
        found += [(p, "", "error", f"the policy failed on this object ({why})") for p, why in a.errors]
        for policy, where, action, message in found:
            key = (a.namespace, workload, policy, where)
            if _STRENGTH[action] > _STRENGTH[out.get(key, ("none", ""))[0]]:
                out[key] = (action, message)
    return out


def what_if(current: Iterable[WorkloadAudit], proposed: Iterable[WorkloadAudit]) -> tuple[list[Change], list[Change]]:
    """``(enforced, relieved)`` between the current and a proposed policy set on the same
    workloads. ``enforced``: what the proposed set enforces more strongly (a new ``dryrun`` result
    is what the rule would deny once enforced, the documented roll-out); ``relieved``: the other
    way (``before`` is then the proposed action). A result is one workload, policy and field."""
    before, after = _actions(current), _actions(proposed)
    enforced, relieved = [], []
    for key, (action, message) in after.items():
        was = before.get(key, ("none", ""))[0]
        if _STRENGTH[action] > _STRENGTH[was]:
            enforced.append(Change(key[0], key[2], action, key[1], key[3], message, was))
    for key, (action, message) in before.items():
        now = after.get(key, ("none", ""))[0]
        if action != "dryrun" and _STRENGTH[action] > _STRENGTH[now]:
            relieved.append(Change(key[0], key[2], action, key[1], key[3], message, now))
    return sorted(enforced), sorted(relieved)
