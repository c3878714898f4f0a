"""Admission rules for taugate's own kinds (TauQuotaRequest, TauWorkspace, TauCluster): pure.

``validate_tau_object(request, settings, state=None)`` takes an AdmissionReview ``request``
(admission.k8s.io/v1: ``operation``, ``userInfo``, ``object``, ``oldObject``, ``subResource``)
and returns every violation as a dict a ``taugate.violation.Violation`` (action ``deny``); an empty
list allows the request. The webhook (``webhook.review.validate_tau``) renders them; the
TauWorkspace controller reuses ``reserved_namespaces`` and ``namespace_refusal`` so admission and
reconciliation refuse the same namespaces.

Rules:
- ``quota-approval``: only ``settings.admin_groups`` members and ``settings.admin_users`` may add,
  change or remove the approval annotations (``tau.azure.com/approved``, ``/rejected``,
  ``/reviewed-by``) of a TauQuotaRequest, and an approved request's ``spec`` is frozen for
  everyone else (a changed request needs a new review). Decided from ``userInfo`` (username,
  groups) as the API server authenticated it. The reviewer is the user who changed the approval
  (``reviewer_to_record``: the mutating route ``/mutate-tau`` writes their name into
  ``tau.azure.com/reviewed-by``, as the API server records a CertificateSigningRequest's
  approver from the request), and a ``reviewed-by`` naming anyone else is refused, so nobody
  approves "as" someone else.
- ``tau-schema``: the object matches the TauGrid schema (the pydantic models in taugate.models).
- ``workspace-namespace``: a TauWorkspace may not target a reserved namespace (``kube-system``,
  ``kube-public``, ``kube-node-lease``, ``default``, taugate's own namespace, the system
  namespace and every trusted controller's namespace) nor, when ``state`` is given, one another
  workspace already targets. Adopting an existing namespace needs an admin's annotation on it
  (``adoption_refusal``, judged by the TauWorkspace controller, which reads the Namespace).
- ``workspace-spec``: queue names are DNS-1123 labels (Kueue LocalQueue names); TauGrid's
  authorization rule (``workspace-rbac`` needs principalRef, kubernetesSubject and role;
  ``cluster-wide`` forbids them); ``defaults.workloadProfile`` names a known profile (with state).
- ``cluster-spec``: the TauCluster is the singleton ``cluster``; profile names are unique;
  ``workerCount >= 1``; ``defaultLocalQueue`` and ``workspaceDefaults.defaultQueue`` are valid
  LocalQueue names; TauGrid's priorities rule (both class names, or ``disableDefaultPriorities``);
  ``maxGpusPerPod`` not above ``gpusPerWorker``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from taugate import labels
from taugate.models import TauCluster, TauQuotaRequest, TauWorkspace
from taugate.settings import Settings
from taugate.structure import validation_problems
from taugate.violation import Violation

APPROVAL_KEYS = (labels.APPROVED, labels.REJECTED, labels.REVIEWED_BY)
DECISION_KEYS = (labels.APPROVED, labels.REJECTED)
"""The annotations that decide a TauQuotaRequest; ``reviewed-by`` records who changed them last."""
ALWAYS_RESERVED = ("kube-system", "kube-public", "kube-node-lease", "default")
# Kubernetes object names: DNS-1123 label (LocalQueue and Namespace names).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SA_USER = re.compile(r"^system:serviceaccount:([^:]+):([^:]+)$")


def _violation(policy: str, field: str, msg: str) -> Violation:
    return Violation(policy, field, msg)


def reserved_namespaces(settings: Settings) -> tuple[str, ...]:
    """Namespaces no workspace may target: Kubernetes' own (``kube-system``, ``kube-public``,
    ``kube-node-lease``, ``default``), the namespace taugate runs in (from
    ``settings.service_account``), the system namespace holding TauWorkspaces, and the namespace
    of every trusted controller (``settings.controller_users``, the chart's
    ``webhook.trustedControllers``: ``ray-system``, ``kueue-system``, ``jobset-system``...). A
    workspace's researchers may run pods as any ServiceAccount of their namespace, and a pod
    running as a trusted controller's account creates objects taugate takes as that controller's
    children (``mutation.is_child``), so none of those namespaces may become a workspace."""
    out = list(ALWAYS_RESERVED)
    for user in (settings.service_account or "", *settings.controller_users):
        m = _SA_USER.match(user)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    if settings.system_namespace and settings.system_namespace not in out:
        out.append(settings.system_namespace)
    return tuple(out)


def namespace_refusal(namespace: str, settings: Settings) -> str | None:
    """Why a workspace may not target ``namespace`` (None when it may)."""
    if namespace in reserved_namespaces(settings):
        return (f"namespace {namespace!r} is reserved (reserved: {', '.join(reserved_namespaces(settings))}); "
                f"set spec.target.namespace to a namespace of its own")
    if not _DNS_LABEL.match(namespace or "") or len(namespace) > 63:
        return f"namespace {namespace!r} is not a valid Namespace name (DNS-1123 label, at most 63 characters)"
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def adoption_refusal(namespace: dict[str, Any] | None, workspace: str) -> str | None:
    """Why TauWorkspace ``workspace`` may not adopt the existing Namespace ``namespace`` (None when
    it may, or when the namespace does not exist yet and taugate will create it): a namespace
    taugate did not create for this workspace (labels ``tau.azure.com/managed-by=taugate`` and
    ``tau.azure.com/workspace=<workspace>``, which it sets on the Namespaces it creates) is adopted
    only with a platform admin's opt-in on the Namespace itself, the annotation
    ``tau.azure.com/adopt-as-workspace=<workspace>`` (Namespaces are cluster-scoped, so only those
    RBAC lets update Namespaces can write it; a workspace's creator cannot)."""
    if namespace is None:
        return None
    meta = _object(namespace.get("metadata"))
    ns_labels, notes = _object(meta.get("labels")), _object(meta.get("annotations"))
    if ns_labels.get(labels.MANAGED_BY) == labels.MANAGED_BY_VALUE and ns_labels.get(labels.WORKSPACE) == workspace:
        return None
    if notes.get(labels.ADOPT_AS_WORKSPACE) == workspace:
        return None
    name = meta.get("name")
    return (f"namespace {name!r} exists and was not created by taugate for TauWorkspace {workspace!r}; adopting "
            f"it needs a platform admin's opt-in on the Namespace: kubectl annotate namespace {name} "
            f"{labels.ADOPT_AS_WORKSPACE}={workspace}")


def is_admin(user_info: dict[str, Any] | None, settings: Settings) -> bool:
    """Is the requester a platform admin (a member of ``settings.admin_groups`` or one of
    ``settings.admin_users``)?"""
    user_info = user_info or {}
    if user_info.get("username") in set(settings.admin_users):
        return True
    return bool(set(user_info.get("groups") or []) & set(settings.admin_groups))


def who_may_approve(settings: Settings) -> str:
    """A phrase naming the admins, for denial messages."""
    parts = []
    if settings.admin_groups:
        parts.append("members of group(s) " + ", ".join(settings.admin_groups))
    if settings.admin_users:
        parts.append("user(s) " + ", ".join(settings.admin_users))
    return " or ".join(parts) or "nobody (no admin groups or users are configured)"


def _schema_violations(model: type[BaseModel], obj: dict[str, Any]) -> list[Violation]:
    try:
        model.model_validate(obj)
    except ValidationError as e:
        return [_violation("tau-schema", field, f"{what}; see the TauGrid schema for {model.__name__}")
                for field, what in validation_problems(e)]
    return []


def _annotations(obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        return {}
    return dict(((obj.get("metadata") or {}).get("annotations")) or {})


def says_true(value: str | None) -> bool:
    """Does an approval annotation's value say yes (``"true"``, any case, surrounding spaces
    ignored)? The one reading the webhook and the TauQuotaRequest controller share, so no value
    counts as approved for one and not for the other."""
    return str(value or "").strip().lower() == "true"


def _decision_changed(request: dict[str, Any]) -> bool:
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    new_ann, old_ann = _annotations(request.get("object")), _annotations(old)
    return any(new_ann.get(k) != old_ann.get(k) for k in DECISION_KEYS)


def reviewer_to_record(request: dict[str, Any]) -> str | None:
    """The ``tau.azure.com/reviewed-by`` value the mutating route writes on a TauQuotaRequest
    CREATE or UPDATE that adds, changes or removes ``approved`` or ``rejected``: the requesting user's
    name as the API server authenticated it (``userInfo.username``). None when no approval
    annotation changes, when the object already names that user, or when the request has no
    user name (nothing to record: validation then refuses a reviewer it cannot check). A change of
    ``reviewed-by`` alone is no decision: validation refuses it."""
    kind = (request.get("kind") or {}).get("kind") or _object(request.get("object")).get("kind")
    if kind != "TauQuotaRequest" or request.get("subResource"):
        return None
    if request.get("operation") not in ("CREATE", "UPDATE") or not _decision_changed(request):
        return None
    username = (request.get("userInfo") or {}).get("username")
    if not isinstance(username, str) or not username:
        return None
    return None if _annotations(request.get("object")).get(labels.REVIEWED_BY) == username else username


def _quota_request(request: dict[str, Any], settings: Settings) -> list[Violation]:
    obj = request.get("object") or {}
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    out = _schema_violations(TauQuotaRequest, obj)
    new_ann, old_ann = _annotations(obj), _annotations(old)
    changed = [k for k in APPROVAL_KEYS if new_ann.get(k) != old_ann.get(k)]
    user = request.get("userInfo") or {}
    admin = is_admin(user, settings)
    if changed and not admin:
        verbs = []
        for k in changed:
            if k not in old_ann:
                verbs.append(f"adds {k}")
            elif k not in new_ann:
                verbs.append(f"removes {k}")
            else:
                verbs.append(f"changes {k}")
        out.append(_violation(
            "quota-approval", "metadata.annotations",
            f"{user.get('username') or 'this user'} {', '.join(verbs)}, but only platform admins may approve or "
            f"reject a TauQuotaRequest: {who_may_approve(settings)}; ask one of them to review it"))
    reviewer = new_ann.get(labels.REVIEWED_BY)
    decided = any(new_ann.get(k) != old_ann.get(k) for k in DECISION_KEYS)
    if admin and decided and reviewer is not None and reviewer != user.get("username"):
        out.append(_violation(
            "quota-approval", f"metadata.annotations[{labels.REVIEWED_BY}]",
            f"{labels.REVIEWED_BY} says {reviewer!r}, but this approval comes from {user.get('username')!r}; "
            f"allowed: the approving user, which taugate records itself; fix: leave {labels.REVIEWED_BY} out"))
    if admin and not decided and reviewer != old_ann.get(labels.REVIEWED_BY):
        out.append(_violation(
            "quota-approval", f"metadata.annotations[{labels.REVIEWED_BY}]",
            f"{labels.REVIEWED_BY} is taugate's record of who last approved or rejected this request "
            f"({old_ann.get(labels.REVIEWED_BY)!r}); it changes only with {labels.APPROVED} or {labels.REJECTED}, "
            f"not on its own ({reviewer!r} asked); fix: leave it as it is"))
    approved = old is not None and says_true(old_ann.get(labels.APPROVED))
    if approved and not admin and (obj.get("spec") or {}) != ((old or {}).get("spec") or {}):
        out.append(_violation(
            "quota-approval", "spec",
            f"the request was approved as it is; only {who_may_approve(settings)} may change an approved "
            f"request's spec; create a new TauQuotaRequest for a different amount"))
    return out


def _workspace(request: dict[str, Any], settings: Settings, state: Any) -> list[Violation]:
    obj = request.get("object") or {}
    out = _schema_violations(TauWorkspace, obj)
    if out:
        return out
    ws = TauWorkspace.model_validate(obj)
    ns = ws.target_namespace
    refusal = namespace_refusal(ns, settings)
    if refusal:
        out.append(_violation("workspace-namespace", "spec.target.namespace", refusal))
    if state is not None:
        other = state.workspaces.get(ns)
        this = (ws.metadata.name, ws.metadata.namespace)
        if other is not None and (other.metadata.name, other.metadata.namespace) != this:
            out.append(_violation("workspace-namespace", "spec.target.namespace",
                                  f"namespace {ns!r} belongs to TauWorkspace {other.metadata.name!r}; "
                                  f"one namespace serves one workspace"))
    spec = ws.spec
    if spec.queue is not None and not _DNS_LABEL.match(spec.queue):
        out.append(_violation("workspace-spec", "spec.queue",
                              f"{spec.queue!r} is not a valid LocalQueue name (DNS-1123 label: lowercase letters, "
                              f"digits and '-')"))
    cluster_wide = spec.authorization is not None and spec.authorization.mode == "cluster-wide"
    present = [n for n, v in (("principalRef", spec.principal_ref), ("kubernetesSubject", spec.kubernetes_subject),
                              ("role", spec.role)) if v is not None]
    if cluster_wide and present:
        out.append(_violation("workspace-spec", "spec.authorization.mode",
                              f"cluster-wide authorization must omit principalRef, kubernetesSubject and role "
                              f"(found {', '.join(present)}) (TauGrid rule)"))
    if not cluster_wide and len(present) < 3:
        missing = [n for n in ("principalRef", "kubernetesSubject", "role") if n not in present]
        out.append(_violation("workspace-spec", "spec",
                              f"workspace-rbac authorization needs principalRef, kubernetesSubject and role "
                              f"(missing {', '.join(missing)}) (TauGrid rule)"))
    wanted = spec.defaults.workload_profile
    if wanted and state is not None and state.cluster is not None:
        names = sorted(p.name for p in state.cluster.spec.workload_profiles)
        if wanted not in names:
            out.append(_violation("workspace-spec", "spec.defaults.workloadProfile",
                                  f"profile {wanted!r} is not in the TauCluster's workloadProfiles "
                                  f"({', '.join(names) or 'none'})"))
    return out


def _cluster(request: dict[str, Any], settings: Settings) -> list[Violation]:
    obj = request.get("object") or {}
    out: list[Violation] = []
    name = (obj.get("metadata") or {}).get("name") or request.get("name")
    if name != "cluster":
        out.append(_violation("cluster-spec", "metadata.name",
                              f"the TauCluster is a singleton named 'cluster', not {name!r}"))
    profiles = ((obj.get("spec") or {}).get("workloadProfiles")) or []
    seen: dict[str, int] = {}
    for i, p in enumerate(profiles if isinstance(profiles, list) else []):
        if not isinstance(p, dict):
            continue
        pname = p.get("name")
        if pname in seen:
            out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].name",
                                  f"profile name {pname!r} is already used by spec.workloadProfiles[{seen[pname]}]; "
                                  f"profile names must be unique"))
        elif isinstance(pname, str):
            seen[pname] = i
        wc = p.get("workerCount")
        if isinstance(wc, int) and not isinstance(wc, bool) and wc < 1:
            out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].workerCount",
                                  f"workerCount is {wc}; a profile runs at least 1 worker (set workerCount >= 1)"))
        q = p.get("defaultLocalQueue")
        if isinstance(q, str) and q and not _DNS_LABEL.match(q):
            out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].defaultLocalQueue",
                                  f"{q!r} is not a valid LocalQueue name (DNS-1123 label)"))
        pr = p.get("priorities") if isinstance(p.get("priorities"), dict) else None
        if pr is not None:
            disabled = pr.get("disableDefaultPriorities") is True
            names = [k for k in ("workloadPriorityClassName", "podPriorityClassName") if pr.get(k)]
            if disabled and names:
                out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].priorities",
                                      f"disableDefaultPriorities is true, so omit {', '.join(names)} (TauGrid rule)"))
            if not disabled and len(names) < 2:
                out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].priorities",
                                      "set both workloadPriorityClassName and podPriorityClassName, or "
                                      "disableDefaultPriorities: true (TauGrid rule)"))
        mg, gw = p.get("maxGpusPerPod"), p.get("gpusPerWorker")
        if isinstance(mg, int) and isinstance(gw, int) and gw > 0 and mg > gw:
            out.append(_violation("cluster-spec", f"spec.workloadProfiles[{i}].maxGpusPerPod",
                                  f"maxGpusPerPod {mg} is above gpusPerWorker {gw}; a cap must not exceed the profile"))
    dq = (((obj.get("spec") or {}).get("workspaceDefaults")) or {}).get("defaultQueue")
    if isinstance(dq, str) and not _DNS_LABEL.match(dq):
        out.append(_violation("cluster-spec", "spec.workspaceDefaults.defaultQueue",
                              f"{dq!r} is not a valid queue name (DNS-1123 label)"))
    known = {(v.field, v.policy) for v in out}
    for v in _schema_violations(TauCluster, obj):
        if not any(v.field.startswith(f) for f, _ in known):
            out.append(v)
    return out


def validate_tau_object(request: dict[str, Any], settings: Settings, state: Any = None) -> list[Violation]:
    """Every violation of the rules above in one AdmissionReview ``request`` (pure).

    Allowed untouched (empty list): subresource requests (``status``), DELETE and CONNECT, and
    kinds other than TauQuotaRequest, TauWorkspace, TauCluster. ``state`` (a
    ``taugate.snapshot.ClusterState``, optional) enables the checks that need cluster context
    (namespace owned by another workspace, unknown default profile). Each violation is
    a ``taugate.violation.Violation`` (action ``deny``)."""
    if not isinstance(request, dict) or request.get("subResource"):
        return []
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return []
    obj = request.get("object")
    if not isinstance(obj, dict):
        return [_violation("tau-schema", "", "the request carries no object")]
    kind = (request.get("kind") or {}).get("kind") or obj.get("kind")
    if kind == "TauQuotaRequest":
        return _quota_request(request, settings)
    if kind == "TauWorkspace":
        return _workspace(request, settings, state)
    if kind == "TauCluster":
        return _cluster(request, settings)
    return []
