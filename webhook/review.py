"""AdmissionReview in, decision out: the pure heart of the webhook (ARCHITECTURE.md section 2).
No I/O but the policy engine and ``ClusterState.claim_spec``'s read-through."""

from __future__ import annotations

import binascii
import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from taugate import demand, labels
from taugate import record as admission_record
from taugate.access import as_dict, metadata_of
from taugate.kinds import WorkloadKind, kind_for
from taugate.models import TauWorkspace
from taugate.pods import PodTemplate
from taugate.policy_input import build_policy_input
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.structure import ADMISSION_REVIEW, object_depth_problem, problems
from taugate.unmanaged import unmanaged_kind_for
from taugate.webhook import claims, mutation, pod_rules, ungoverned, validation
from taugate.webhook.decision import Action, Decision, Violation
from taugate.webhook.policy.sets import PolicyEvaluationError
from taugate.webhook.resolution import Resolution, Unresolved, resolve

ENGINE_FAILURE = "policy-engine"
"""The policy named by ``judge`` when the policy engine as a whole failed on an object."""
OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT"}


class ReviewError(ValueError):
    """``str(error)`` is the reason for the HTTP 400 answer."""


class Engine(Protocol):

    @property
    def digest(self) -> str: ...  # read-only: each engine derives it from its active policy set

    def evaluate(self, input: dict) -> list[Violation]: ...


def parse_review(body: bytes | str | dict) -> dict:
    """The whole review, checked (``taugate.structure.AdmissionReviewModel``). Raises
    ``ReviewError`` naming the first problem (``field: problem``)."""
    if isinstance(body, dict):
        review = body
    else:
        try:
            review = orjson.loads(body)
        except (orjson.JSONDecodeError, TypeError) as e:
            raise ReviewError(f"body is not JSON: {e}") from None
    found = problems(ADMISSION_REVIEW, review)
    if found:
        where, what = found[0]
        raise ReviewError(f"not a usable AdmissionReview: {where}: {what}" if where else
                          f"not a usable AdmissionReview: the body {what}")
    return review  # type: ignore[no-any-return]


@dataclass(slots=True)
class Context:
    """What one AdmissionRequest is decided with, built once per request (``Context.of``).
    Read-only by convention (a frozen dataclass costs ~0.8 us more to build, on every review);
    ``engine`` None: built-in checks only."""

    request: dict
    operation: str
    old: dict | None
    state: ClusterState
    settings: Settings
    engine: Engine | None

    @classmethod
    def of(cls, request: dict, state: ClusterState, settings: Settings, engine: Engine | None = None) -> Context:
        operation = request.get("operation")
        old = request.get("oldObject") if operation == "UPDATE" else None
        return cls(request, operation if isinstance(operation, str) else "", old if isinstance(old, dict) else None,
                   state, settings, engine)


@dataclass(slots=True)
class _Subject:
    """What the guard clauses leave (read-only, like ``Context``); ``templates`` have DRA GPUs
    folded in, ``alone``: otherwise left alone (``ungoverned.left_alone``)."""

    obj: dict
    kind: WorkloadKind
    templates: list[PodTemplate]
    workspace: TauWorkspace
    child: bool
    malformed: list[Violation]
    refused: list[Violation]
    alone: bool


def subject_of(ctx: Context) -> _Subject | None:
    """The guard clauses; None means "allow untouched"."""
    request, settings, state = ctx.request, ctx.settings, ctx.state
    if request.get("subResource"):
        return None
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    if ((request.get("userInfo") or {}).get("username")) == settings.service_account:
        return None
    obj = request.get("object")
    if not isinstance(obj, dict):
        return None
    gvk = request.get("kind") or {}
    kind = kind_for(gvk.get("group") or obj.get("apiVersion"), gvk.get("kind") or obj.get("kind"))
    if kind is None:
        return None
    meta = as_dict(obj.get("metadata"))
    namespace = request.get("namespace") or meta.get("namespace")
    ws = state.workspace_for(namespace) if isinstance(namespace, str) else None
    if ws is None:
        return None
    malformed, templates = kind.read(obj)
    child = not malformed and mutation.is_child(request, obj, settings)
    refused: list[Violation] = []
    if not malformed and not child:
        templates, refused = demand.govern(templates, ws.target_namespace, state, settings)
    alone = not malformed and ungoverned.left_alone(request, obj, kind, templates, child, settings)
    if alone and not refused:
        return None
    return _Subject(obj, kind, templates, ws, child, malformed, refused, alone)


def _record(res: Resolution, ctx: Context, queued: bool = True) -> dict:
    """The admission record. The policy decisions are not in it: they are reproducible from the
    admitted object, the digest and the snapshot (``taugate policy eval``), and evaluating them in
    the mutating webhook would double the policy cost of every create."""
    return {"workspace": res.workspace.metadata.name, "profile": res.profile.name,
            "profileSetHash": ctx.state.profile_set_hash, "queue": res.queue if queued else None,
            "policyDigest": getattr(ctx.engine, "digest", None)}


def _admitted_resolution(ctx: Context, subject: _Subject) -> Resolution | None:
    """On UPDATE: the resolution of the profile ``old`` was admitted with, so its placement can be
    restored; None when it no longer resolves (nothing is placed, validation says what is wrong)."""
    obj, old = subject.obj, ctx.old
    old_meta = old.get("metadata") if isinstance(old, dict) else None
    old_labels = old_meta.get("labels") if isinstance(old_meta, dict) else None
    profile = old_labels.get(labels.WORKLOAD_PROFILE) if isinstance(old_labels, dict) else None
    if not isinstance(profile, str):
        return None
    meta = as_dict(obj.get("metadata"))
    now_labels = as_dict(meta.get("labels"))
    view = {**obj, "metadata": {**meta, "labels": {**now_labels, labels.WORKLOAD_PROFILE: profile}}}
    res = resolve(view, subject.templates, subject.workspace, ctx.state, ctx.settings)
    return res if isinstance(res, Resolution) else None


def _unrepresentable(obj: dict) -> Decision:
    """The denial of an object orjson cannot copy, naming the path where one is found."""
    where, what = object_depth_problem(obj) or ("", "holds a value no Kubernetes object can hold")
    return Decision.deny([Violation("object-shape", where, f"{what}; fix the manifest")], obj=obj)


def mutate(request: dict, state: ClusterState, settings: Settings, engine: Engine | None = None, *,
           in_place: bool = False) -> Decision:
    """The mutating webhook's answer for one AdmissionRequest. ``Decision.patch`` is None when
    nothing changes (reinvocation on our own output gives None).

    The edits are made on a deep copy of the object, or with ``in_place=True`` on the object
    itself, for a caller that owns the request (the server: the copy is ~8% of a RayJob CREATE).
    """
    ctx = Context.of(request, state, settings, engine)
    subject = subject_of(ctx)
    if subject is None:
        return Decision.allow(request.get("object"))
    obj = subject.obj
    warnings: list[str] = []
    if subject.malformed:
        return Decision.deny(subject.malformed, obj=obj)
    if subject.refused and ctx.operation == "CREATE":
        return Decision.deny(subject.refused, obj=obj)
    if subject.alone:  # only refused (on UPDATE, validation decides what the old object excuses)
        return Decision.allow(obj)
    try:
        doc = obj if in_place else mutation.deep_copy(obj)  # what the edits change
    except TypeError:  # orjson: nested past 255 levels, or an integer beyond 64 bits
        return _unrepresentable(obj)
    if subject.child:
        edits = mutation.edit_child(doc, subject.templates, subject.kind, ctx.old)
    elif ctx.operation == "UPDATE":
        kept = mutation.kept_overrides(obj, ctx.old, subject.kind, settings)
        # read before the edits: in place, doc is obj itself
        warnings += mutation.kept_warnings(obj, kept)
        restored = mutation.restore_warnings(obj, ctx.old, subject.kind)
        admitted = _admitted_resolution(ctx, subject) \
            if mutation.places_on_update(obj, ctx.old, subject.kind) else None
        edits = mutation.edit_update(doc, request.get("oldObject"), subject.templates, subject.kind,
                                     admitted, settings, kept)
        if edits is not None:
            warnings += restored + mutation.template_warnings(edits)
    else:
        res = resolve(obj, subject.templates, subject.workspace, state, settings)
        if isinstance(res, Unresolved):
            return Decision.deny(res.violations, obj=obj)
        queued = subject.kind.queued(obj)
        # read on the object as sent (doc may be the object itself): what the client said is in the warning
        overrides = subject.kind.create_overrides(as_dict(obj.get("spec")), queued=queued,
                                                  ray_shutdown=settings.ray_shutdown_after_job_finishes)
        edits = mutation.edit_create(doc, subject.kind, subject.templates, res, state, settings, overrides)
        warnings += [o.warning for o in overrides]
        mutation.annotate(edits, _record(res, ctx, queued), settings.admission_key_bytes(),
                          ctx.request.get("namespace"))
        if res.note:
            warnings.append(res.note)
    if edits is None:
        return Decision(True, patch=None, object=obj, warnings=warnings)
    patch = edits.patch()
    return Decision(True, patch=patch, object=edits.doc if patch else obj, warnings=warnings)


class PolicyFailure(Exception):
    """The policy engine failed on an object: ``failed`` maps each failing policy to its reason
    (empty when the engine as a whole failed), ``results`` holds the other policies' violations."""

    def __init__(self, reason: str, failed: dict[str, str], results: list[Violation]):
        super().__init__(reason)
        self.reason, self.failed, self.results = reason, failed, results
        self.found: list[Violation] = []  # what the built-in checks found before the policies ran


def _policies(ctx: Context, engine: Engine, obj: dict, templates: list[PodTemplate],
              res: Resolution) -> list[Violation]:
    """Raises ``PolicyFailure`` on a Rego runtime error; the engine's ``PolicyUnavailable`` passes
    through (nothing decided)."""
    args: dict[str, Any] = dict(obj=obj, templates=templates, operation=ctx.request.get("operation", "CREATE"),
                                user_info=ctx.request.get("userInfo"), namespace=res.workspace.target_namespace,
                                workspace=res.workspace, profile=res.profile, queue=res.queue, state=ctx.state,
                                gpu_class_label=ctx.settings.gpu_class_label, request=ctx.request)
    try:
        return list(engine.evaluate(build_policy_input(**args)))
    except PolicyEvaluationError as e:  # PolicyUnavailable (no answer at all) is the server's: HTTP 503
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise PolicyFailure(reason, dict(e.failed), list(e.results)) from None


def _policy_failure_decision(failure: PolicyFailure, obj: dict, found: list[Violation],
                             engine: Engine | None) -> Decision:
    """An object nested deeper than ``MAX_DEPTH`` is denied naming the path (the object's fault);
    otherwise each failing policy is reported under its own enforcement action (``deny``: 503, fail
    closed, since the policy could not judge it), every other result kept."""
    deep = object_depth_problem(obj)
    if deep:
        return Decision.deny([Violation("object-shape", deep[0], f"{deep[1]}; fix the manifest")], obj=obj)
    if not failure.failed:  # no single policy fails alone (e.g. OPA reported one error for the whole query)
        return Decision.deny([], obj=obj, code=503, reason=(
            f"taugate's policy engine failed on this object ({failure.reason}); the request is denied rather than "
            f"admitted unchecked; retry, and tell the platform team if it keeps happening"))
    ps = getattr(getattr(engine, "store", None), "current", None)
    failed = []
    for policy, why in sorted(failure.failed.items()):
        action: Action = ps.action(policy, "deny") if ps is not None else "deny"
        failed.append(Violation(policy, "", f"the policy failed on this object ({why}); it could not judge the "
                                            f"request; tell the platform team (the policy needs fixing)", action))
    return _decide(found + failure.results + failed, "", code=503 if any(v.action == "deny" for v in failed) else 403,
                   obj=obj, policy_failures=[v.policy for v in failed])


def _violations(ctx: Context, subject: _Subject, obj: dict, templates: list[PodTemplate],
                old: dict | None) -> tuple[list[Violation], str]:
    """Every violation of ``obj`` and the resolution's note (why the profile applies)."""
    res = resolve(obj, templates, subject.workspace, ctx.state, ctx.settings)
    found: list[Violation] = []
    resolved = res if isinstance(res, Resolution) else None
    if isinstance(res, Unresolved):
        found += res.violations
    found += validation.structural(obj, subject.kind, templates, resolved, old,
                                   elastic_jobs=ctx.settings.kueue_elastic_jobs)
    if resolved is not None and ctx.engine is not None:
        try:
            found += _policies(ctx, ctx.engine, obj, templates, resolved)
        except PolicyFailure as e:
            e.found = found
            raise
    return found, (resolved.note if resolved is not None else "")


def validate(request: dict, state: ClusterState, settings: Settings, engine: Engine | None = None) -> Decision:
    """The validating webhook's answer on the final object (after every mutating webhook, Kueue's
    included), all violations reported together.

    On UPDATE only violations the old object did not already have deny, so Kueue and KubeRay can
    always update an object admitted under older rules: a violation is excused when the old object
    broke the same ``policy`` at the same ``field``, whatever either message says (a message quotes
    values, which an UPDATE may change without fixing anything).
    """
    ctx = Context.of(request, state, settings, engine)
    if request.get("subResource") == "ephemeralcontainers":
        return claims.debug_verdict(request, state, settings)
    claim = claims.verdict(request, state, settings)
    if claim is not None:
        return claim
    ungated = pod_rules.gate_removals(request, ctx.old, state, settings)
    if ungated:
        return Decision.deny(ungated, obj=request.get("object"))
    unmanaged = ungoverned.verdict(request, state, settings)
    subject = subject_of(ctx) if unmanaged is None else None
    if subject is None or subject.child:  # not judged as a governed workload: only what bypasses scheduling
        bypass = pod_rules.unjudged_bypasses(ctx.request, ctx.old, ctx.state, ctx.settings)
        if bypass:
            return Decision.deny(bypass + (unmanaged.violations if unmanaged is not None else []),
                                 obj=request.get("object"))
        return unmanaged if unmanaged is not None else Decision.allow(request.get("object"))
    if subject.malformed:
        return Decision.deny(subject.malformed, obj=subject.obj)
    old, ns = ctx.old, subject.workspace.target_namespace
    refused = subject.refused
    if refused and old is not None:  # an UPDATE never fails for what the stored object already did
        before = {(v.policy, v.field) for v in demand.stored(subject.kind, old, ns, state, settings)[2]}
        refused = [v for v in refused if (v.policy, v.field) not in before]
    if subject.alone:  # a CPU-only workload reaching devices: judged for what bypasses scheduling too
        refused = refused + pod_rules.unjudged_bypasses(request, old, state, settings)
        return Decision.deny(refused, obj=subject.obj) if refused else Decision.allow(subject.obj)
    if refused:
        return Decision.deny(refused, obj=subject.obj)
    added = ungoverned.gpus_added(request, subject.kind, subject.templates)
    if added is not None:
        return added
    try:
        found, note = _violations(ctx, subject, subject.obj, subject.templates, old)
    except PolicyFailure as e:
        return _policy_failure_decision(e, subject.obj, e.found, engine)
    old_malformed, old_templates, _ = demand.stored(subject.kind, old if found else None, ns, state, settings)
    if found and old is not None and not old_malformed:  # nothing to excuse: skip the old object
        try:
            before = {(v.policy, v.field) for v in _violations(ctx, subject, old, old_templates, None)[0]}
        except PolicyFailure:  # the old object cannot be judged, so nothing of the new one is excused
            before = set()
        found = [v for v in found if v.policy in pod_rules.SELF_EXCUSED or (v.policy, v.field) not in before]
    return _decide(found, note, obj=subject.obj)


def judge(obj: dict, state: ClusterState, settings: Settings, engine: Engine | None) -> tuple[list[Violation], dict]:
    """Every violation of a stored ``obj`` as validation would find it on a CREATE of it now, and
    the policies that failed on it (policy -> reason); ``([], {})`` for an object validation
    leaves alone. No mutation and no UPDATE excuse: the rule of Gatekeeper's audit
    (``pkg/audit/manager.go``). A stored Pod's ``spec.nodeName`` is where kube-scheduler bound it,
    not what its author wrote, so the Pod is judged without it."""
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1" and isinstance(spec, dict) and "nodeName" in spec:
        obj = {**obj, "spec": {k: v for k, v in spec.items() if k != "nodeName"}}
    ctx = Context.of(request_for(obj, namespace=metadata_of(obj).get("namespace")), state, settings, engine)
    subject = subject_of(ctx)
    if subject is None or mutation.is_child({"operation": "UPDATE", "oldObject": obj}, obj, settings):
        return [], {}
    if subject.malformed:
        return subject.malformed, {}
    if subject.alone:
        return list(subject.refused), {}
    try:
        return subject.refused + _violations(ctx, subject, subject.obj, subject.templates, None)[0], {}
    except PolicyFailure as e:
        return subject.refused + e.found + e.results, dict(e.failed) or {ENGINE_FAILURE: e.reason}


def _decide(found: list[Violation], note: str, *, obj: dict, code: int = 403,
            policy_failures: list[str] | None = None) -> Decision:
    if not found and not policy_failures:  # the usual answer
        return Decision(True, object=obj)
    deny = [v for v in found if v.action == "deny"]
    warnings = [v.render() for v in found if v.action == "warn"]
    dryrun = [v for v in found if v.action == "dryrun"]
    if deny:
        reason = f"taugate denied the request ({len(deny)} problem(s)){'; ' + note if note else ''}:"
        return Decision.deny(deny, warnings=warnings, obj=obj, reason=reason, code=code, dryrun=dryrun,
                             policy_failures=policy_failures)
    return Decision.allow(obj, warnings, dryrun=dryrun, policy_failures=policy_failures)


def validate_tau(request: dict, state: ClusterState, settings: Settings) -> Decision:
    """Validate taugate's own kinds with the pure rules in ``taugate.tau_admission``."""
    if request.get("subResource") or request.get("operation") not in ("CREATE", "UPDATE"):
        return Decision.allow(request.get("object"))
    from taugate import tau_admission  # core module; imported lazily so admission starts without it

    deep = object_depth_problem(request.get("object"))
    if deep:  # before pydantic or a message reads any value (as workload_problems does for workloads)
        return Decision.deny([Violation("object-shape", deep[0], f"{deep[1]}; fix the manifest")])
    violations = tau_admission.validate_tau_object(request, settings, state=state)
    return Decision.deny(violations) if violations else Decision.allow(request.get("object"))


# metav1.StatusReason for the codes a decision carries (Kubernetes api/errors conventions).
_REASONS = {403: "Forbidden", 409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def review_response(review: dict, decision: Decision) -> dict:
    req = review.get("request") or {}
    response: dict[str, Any] = {"uid": req.get("uid", ""), "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": decision.code, "reason": _REASONS.get(decision.code, "Forbidden"),
                              "message": decision.message}
        if causes := decision.causes:
            response["status"]["details"] = {"causes": causes}
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = binascii.b2a_base64(orjson.dumps(decision.patch), newline=False).decode()
    return {"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
            "response": response}


def request_for(obj: dict, *, namespace: str | None, operation: str = "CREATE", user_info: dict | None = None,
                old: dict | None = None, dry_run: bool = True) -> dict:
    """A synthetic AdmissionRequest for ``obj``, as the API server would send it."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) else ""
    gvk = {"group": group, "version": version, "kind": kind}
    workload = kind_for(group, kind) or unmanaged_kind_for(group, kind)
    resource = workload.resource if workload is not None else kind.lower() + "s"
    return {"uid": str(uuid.uuid4()), "kind": gvk,
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": gvk, "namespace": namespace, "name": metadata_of(obj).get("name"),
            "operation": operation, "userInfo": user_info or {"username": "taugate-cli", "groups": []},
            "object": obj, "oldObject": old, "dryRun": dry_run}


def decide(request: dict, state: ClusterState, settings: Settings, engine: Engine | None = None, *,
           in_place: bool = False) -> Decision:
    """The workload webhook's one answer (``/mutate``): ``mutate``, then ``validate`` of the
    mutated object, so a create costs the API server one call; the patch is the mutation's,
    warnings come from both. What must hold of the final object, after any later mutating webhook,
    the API server's own policy keeps (``taugate.admission_policy``)."""
    m = mutate(request, state, settings, engine, in_place=in_place)
    if not m.allowed:
        return m
    final = m.object if isinstance(m.object, dict) else request.get("object")
    v = validate({**request, "object": final}, state, settings, engine)
    return dataclasses.replace(v, patch=m.patch if v.allowed else None, object=final,
                               warnings=list(dict.fromkeys(m.warnings + v.warnings)),
                               said_before=m.patch is None and _signed_for(request, final, settings))


def _signed_for(request: dict, obj: Any, settings: Settings) -> bool:
    """A CREATE of ``obj`` carrying the admission record taugate signed for it: our own output,
    seen again on reinvocation."""
    if request.get("operation") != "CREATE" or not isinstance(obj, dict):
        return False
    meta = as_dict(obj.get("metadata"))
    found = admission_record.decode(as_dict(meta.get("annotations")).get(labels.ADMISSION_RECORD))
    here = {**obj, "metadata": {**meta, "namespace": meta.get("namespace") or request.get("namespace")}}
    key = settings.admission_key_bytes()
    if key is None:  # nothing can be verified (``taugate serve`` without a key): its presence is what there is
        return found is not None
    return found is not None and admission_record.verify(found, here, key).trusted


def admit(obj: dict, *, state: ClusterState, settings: Settings, engine: Engine | None = None,
          namespace: str | None = None, operation: str = "CREATE", user_info: dict | None = None,
          old: dict | None = None) -> Decision:
    """``obj`` as the API server would have taugate decide it (``decide``)."""
    ns = namespace or metadata_of(obj).get("namespace")
    try:
        obj = mutation.deep_copy(obj)
    except TypeError:  # orjson: nested past 255 levels, or an integer beyond 64 bits
        return _unrepresentable(obj)
    if ns and isinstance(obj.get("metadata"), dict):
        obj["metadata"].setdefault("namespace", ns)
    return decide(request_for(obj, namespace=ns, operation=operation, user_info=user_info, old=old), state, settings,
                  engine)
