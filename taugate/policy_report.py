"""Audit results as PolicyReports: the Policy Reports working group's ``wgpolicyk8s.io/v1alpha2``
``PolicyReport`` (one per workspace namespace) and ``ClusterPolicyReport`` (the summary), the
objects Kyverno writes and Policy Reporter and ``kubectl get policyreports`` read (pure).

The schema is the working group's CRD as Kyverno ships it
(``config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml``, github.com/kyverno/kyverno
v1.19.1; the chart installs it where absent). What taugate writes:

- one ``PolicyReport`` named ``REPORT_NAME`` per namespace that holds audited workloads, scoped
  to that Namespace (so ``kubectl get policyreports -n NS`` shows ``Namespace NS`` and the
  counts);
- per violation one result: ``policy`` (the policy or built-in rule that found it), ``rule``
  (the same name: a taugate policy is one rule set with one enforcement action),
  ``result`` ``fail`` for a violation enforced with ``deny`` or ``dryrun`` and ``warn`` for one
  enforced with ``warn``, ``error`` for a policy that failed at run time on the object;
  ``resources`` the workload (apiVersion, kind, name, namespace, uid); ``message`` the
  violation's message; ``properties`` ``action`` (deny|warn|dryrun) and ``field`` (the field
  path); ``category`` says a policy of the library from a built-in rule of Kubernetes, Kueue or
  KubeRay; ``source`` ``taugate``;
- ``pass`` results are counted in ``summary.pass`` (one per workload and policy of the library
  that found nothing) but not listed: a namespace of 500 workloads and 10 policies would list
  5000 entries, and a report is one etcd object (at most ~1.5 MiB). Listed results stop at
  ``MAX_RESULTS`` per report; the rest are counted in the summary and the annotation
  ``REPORT_TRUNCATED`` says how many were left out;
- one ``ClusterPolicyReport`` named ``REPORT_NAME``: per namespace and policy with failures or
  warnings one result naming the namespace and the counts, and the sum of every summary.

Results carry no timestamp and are sorted (workload, then policy, field, message), so the same
cluster and the same policy set give byte-identical reports: the operator rewrites a report only
when ``report_changed`` says its content differs. The policy set's digest is the annotation
``tau.azure.com/policy-digest``.
"""

from __future__ import annotations

from collections.abc import Iterable
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
"""The name of taugate's PolicyReport in each namespace and of its ClusterPolicyReport."""

REPORT_TRUNCATED = "tau.azure.com/results-left-out"
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
    """The REST resource of every governed kind (``taugate.kinds.KINDS``, read at call time, so
    a kind added to the registry is audited with no change here), as the audit lists them."""
    return tuple(Resource(k.group, k.version, k.resource, k.kind, True) for k in KINDS)


@dataclass(frozen=True)
class WorkloadAudit:
    """What the audit found on one workload: its reference (``api_version``, ``kind``, ``name``,
    ``namespace``, ``uid``; ``uid`` empty for an object read from a file), its ``violations``
    (each with its enforcement action), the policies of the library that were evaluated on it
    (``evaluated``: empty when the workload could not be judged by them, e.g. no workload profile
    resolves) and the policies that failed at run time on it (``errors``: policy -> reason)."""

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
        """The audit of ``obj`` (a Kubernetes object as the API returns it)."""
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
        """The ``resources[]`` entry (a core/v1 ObjectReference): apiVersion, kind, name,
        namespace, and uid when known."""
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace}
        if self.uid:
            ref["uid"] = self.uid
        return ref


class Auditor(Protocol):
    """What judges workloads for the audit (``taugate.webhook.audit.PolicyAuditor``, given to the
    operator by the CLI): ``digest`` of the active policy set (it changes when the set does),
    ``check_for_changes()`` (reload the set if its files changed; True when a new one is active),
    and ``audit(objects, state)``, one ``WorkloadAudit`` per object admission would validate."""

    @property
    def digest(self) -> str: ...

    def check_for_changes(self) -> bool: ...

    def audit(self, objects: Iterable[dict[str, Any]], state: ClusterState) -> list[WorkloadAudit]: ...


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 3] + "..."


def _result(audit: WorkloadAudit, v: Violation) -> dict[str, Any]:
    """One PolicyReportResult for violation ``v`` of ``audit``'s workload."""
    return {"source": SOURCE, "policy": v.policy, "rule": v.policy, "result": _RESULT_OF[v.action],
            "category": CATEGORY_POLICY if v.policy in audit.evaluated else CATEGORY_BUILTIN,
            "message": _clip(v.message), "resources": [audit.reference()],
            "properties": {"action": v.action, "field": v.field}}


def _error(audit: WorkloadAudit, policy: str, reason: str) -> dict[str, Any]:
    """The ``error`` result of a policy that failed at run time on the workload."""
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
        meta["annotations"][REPORT_TRUNCATED] = str(left_out)
    return meta


def namespace_report(namespace: str, audits: Iterable[WorkloadAudit], *, digest: str) -> dict[str, Any]:
    """The PolicyReport of ``namespace`` from the audits of its workloads (those of other
    namespaces are ignored), produced by the policy set with ``digest``."""
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
    """The ClusterPolicyReport summarising namespace ``reports``: one result per namespace and
    policy with failures or warnings (``fail`` if any workload fails it, else ``warn``), naming
    the namespace and the counts, and the sum of their summaries."""
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
    """Every report of one audit: ``namespaced`` (PolicyReports by namespace, sorted) and
    ``cluster`` (the ClusterPolicyReport)."""

    namespaced: dict[str, dict[str, Any]] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)

    @property
    def failing(self) -> bool:
        """True when any result is ``fail`` or ``error`` (``taugate policy audit`` exits 1)."""
        s = self.cluster.get("summary") or {}
        return bool(s.get("fail") or s.get("error"))

    def all(self) -> list[dict[str, Any]]:
        """The namespace reports in namespace order, then the cluster report."""
        return [*self.namespaced.values(), self.cluster]


def build_reports(audits: Iterable[WorkloadAudit], *, digest: str) -> Reports:
    """The PolicyReport of every namespace with an audited workload, and the ClusterPolicyReport."""
    audits = list(audits)
    namespaces = sorted({a.namespace for a in audits})
    namespaced = {ns: namespace_report(ns, audits, digest=digest) for ns in namespaces}
    return Reports(namespaced, cluster_report(namespaced.values(), digest=digest))


def merge_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns the stored report ``current`` into ``desired``
    in what taugate writes: ``scope``, ``summary`` and ``results`` whole (a merge patch replaces
    arrays), taugate's labels and annotations, and the truncation annotation removed when
    ``desired`` lists every result."""
    annotations: dict[str, Any] = dict(desired["metadata"].get("annotations") or {})
    if REPORT_TRUNCATED in ((current.get("metadata") or {}).get("annotations") or {}):
        annotations.setdefault(REPORT_TRUNCATED, None)
    body: dict[str, Any] = {"metadata": {"labels": desired["metadata"]["labels"], "annotations": annotations}}
    for key in ("scope", "summary", "results"):
        if key in desired:
            body[key] = desired[key]
    return body


def report_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """True when the stored report ``current`` (None: absent) differs from ``desired`` in what
    taugate writes: scope, summary, results, and its own labels and annotations (other writers'
    metadata and server fields are ignored)."""
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
        if part == "annotations" and REPORT_TRUNCATED in have and REPORT_TRUNCATED not in want:
            return True
    return False


_STRENGTH = {"none": 0, "dryrun": 1, "warn": 2, "deny": 3, "error": 3}


@dataclass(frozen=True, order=True)
class Change:
    """One result a proposed policy set enforces that the current one does not (``what_if``):
    in ``namespace``, ``policy`` would ``action`` (``deny``, ``warn``, or ``error``: the policy
    fails at run time on the workload) the ``workload`` (``Kind/name``) at ``field`` with
    ``message``; ``before`` is what the current set does there (``none``, ``dryrun``, ``warn``)."""

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
    """Compare the audits of the same workloads under the current and a proposed policy set:
    ``(enforced, relieved)``. ``enforced``: every result the proposed set denies, warns, fails
    on or finds under ``dryrun`` that the current set does not enforce as strongly (a rule moved
    from ``dryrun`` to ``deny``, a new rule, a tightened one; a new ``dryrun`` result is what the
    rule would deny once enforced, the documented roll-out); ``relieved``: every result the current set denies or warns
    that the proposed set no longer enforces as strongly (``before`` is then the proposed
    action). A result is one workload, policy and field path; both lists are sorted by
    namespace, policy, action and workload."""
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
