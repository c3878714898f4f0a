"""Admission rules for taugate's own kinds (TauQuotaRequest, TauWorkspace, TauCluster): pure.

The TauWorkspace controller reuses ``reserved_namespaces`` and ``namespace_refusal`` so admission
and reconciliation refuse the same namespaces. A TauQuotaRequest's reviewer is the user who
changed the approval, written by ``/mutate-tau`` (as the API server records a
CertificateSigningRequest's approver), and a ``reviewed-by`` naming anyone else is refused, so
nobody approves "as" someone else; an approved request's ``spec`` is frozen for non-admins.
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
    """Namespaces no workspace may target: Kubernetes' own, taugate's, the system namespace, and
    every trusted controller's. A workspace's researchers may run pods as any ServiceAccount of
    their namespace, and a pod running as a trusted controller's account creates objects taugate
    takes as that controller's children (``mutation.is_child``)."""
    out = list(ALWAYS_RESERVED)
    for user in (settings.service_account or "", *settings.controller_users):
        m = _SA_USER.match(user)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    if settings.system_namespace and settings.system_namespace not in out:
        out.append(settings.system_namespace)
    return tuple(out)


def namespace_refusal(namespace: str, settings: Settings) -> str | None:
    if namespace in reserved_namespaces(settings):
        return (f"namespace {namespace!r} is reserved (reserved: {', '.join(reserved_namespaces(settings))}); "
                f"set spec.target.namespace to a namespace of its own")
    if not _DNS_LABEL.match(namespace or "") or len(namespace) > 63:
        return f"namespace {namespace!r} is not a valid Namespace name (DNS-1123 label, at most 63 characters)"
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def adoption_refusal(namespace: dict[str, Any] | None, workspace: str) -> str | None:
    """Why TauWorkspace ``workspace`` may not adopt the existing ``namespace`` (None when it may or
    it does not exist yet). One taugate did not create for it is adopted only with
    ``tau.azure.com/adopt-as-workspace=<workspace>`` on the Namespace: Namespaces are
    cluster-scoped, so only those RBAC lets update them can write it, not a workspace's creator."""
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
    user_info = user_info or {}
    if user_info.get("username") in set(settings.admin_users):
        return True
    return bool(set(user_info.get("groups") or []) & set(settings.admin_groups))


def who_may_approve(settings: Settings) -> str:
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
    """``"true"``, any case, spaces ignored: the one reading the webhook and the TauQuotaRequest
    controller share, so no value counts as approved for one and not the other."""
    return str(value or "").strip().lower() == "true"


def _decision_changed(request: dict[str, Any]) -> bool:
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    new_ann, old_ann = _annotations(request.get("object")), _annotations(old)
    return any(new_ann.get(k) != old_ann.get(k) for k in DECISION_KEYS)


def reviewer_to_record(request: dict[str, Any]) -> str | None:
    """The ``tau.azure.com/reviewed-by`` value ``/mutate-tau`` writes when ``approved`` or
    ``rejected`` changes: ``userInfo.username`` as the API server authenticated it. None when
    nothing changes, the object names that user already, or there is no user name (validation then
    refuses a reviewer it cannot check)."""
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
    """Every violation of one AdmissionReview ``request`` (pure); an empty list allows it.
    ``state`` enables the checks that need cluster context (a namespace owned by another workspace,
    an unknown default profile)."""
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
