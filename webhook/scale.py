"""A change of replicas through the ``scale`` subresource, judged as the UPDATE of the parent's
replicas (ARCHITECTURE.md section 2). The review carries only the new and stored Scales, both built
from the stored parent with its uid and resourceVersion (Kubernetes
``pkg/registry/apps/deployment/storage/storage.go`` ``scaleFromDeployment``; apiextensions-apiserver
``pkg/registry/customresource/etcd.go`` ``scaleFromCustomResource``), and validating admission runs
inside the update (``ScaleREST.Update`` -> ``GuaranteedUpdate``: on a conflict it re-reads and asks again).
"""

from __future__ import annotations

from collections.abc import Callable

from taugate.access import as_dict, metadata_of
from taugate.fieldpath import field_path
from taugate.kinds import KINDS, WorkloadKind
from taugate.kubeaccess import Resource
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.webhook import mutation, review
from taugate.webhook.decision import Decision, Violation

SUBRESOURCE = "scale"
POLICY = "scale"
"""The ``Violation.policy`` of a scale request that cannot be judged as it stands."""

Reader = Callable[[Resource, str, str], "dict | None"]
"""Reads a stored object: ``(resource, namespace, name)`` -> the object, or None when it does not
exist; raises ``ObjectUnreadable`` when it cannot be read (``WatchStateProvider.read_object`` is one)."""

_SCALABLE: dict[tuple[str, str], WorkloadKind] = {(k.group, k.resource): k for k in KINDS if k.scale_path}


class ObjectUnreadable(Exception):
    """The API is unreachable or forbids the read; the message is one line."""


def is_scale(request: dict) -> bool:
    """A change through the ``scale`` subresource (the only one the workload rules name,
    ``webhook.routes.SCALE_RULES``); its decision reads the API, so never on the event loop."""
    return request.get("subResource") == SUBRESOURCE


def _deny(kind: WorkloadKind, name: str, what: str, fix: str, code: int = 403) -> Decision:
    path = field_path(kind.scale_path or ())
    return Decision.deny([Violation(POLICY, path, f"{what}; fix: {fix}")], code=code,
                         reason=f"taugate denied scaling {kind.kind} {name!r}:")


def _replicas(scale: object) -> int | None:
    """``spec.replicas`` of a Scale (int32, 0 when omitted, ``autoscaling/v1`` ``ScaleSpec``), or
    None when it is not a non-negative whole number."""
    spec = scale.get("spec") if isinstance(scale, dict) else None
    if spec is None:
        return 0
    if not isinstance(spec, dict):
        return None
    n = spec.get("replicas", 0)
    return n if type(n) is int and 0 <= n <= 2**31 - 1 else None


def _scaled(parent: dict, path: tuple[str | int, ...], replicas: int) -> dict | None:
    """A copy of ``parent`` with ``replicas`` at ``path`` (intermediate objects made, as the API
    server's ``unstructured.SetNestedField`` does); None when something on the way is not an
    object."""
    new = mutation.deep_copy(parent)
    at = new
    for key in path[:-1]:
        nxt = at.setdefault(key, {})
        if not isinstance(nxt, dict):
            return None
        at = nxt
    at[path[-1]] = replicas
    return new


def validate(request: dict, state: ClusterState, settings: Settings, engine: review.Engine | None = None,
             read: Reader | None = None) -> Decision:
    """``review.validate``'s answer, and for a ``scale`` of a governed kind in a workspace the answer
    for the UPDATE of the stored parent's replicas: the parent ``read`` must be the object the Scale
    was built from (same uid and resourceVersion, else 409: retry). Fails closed: without a reader
    (a snapshot holds no workloads) or a readable parent the scale is denied, naming the fix."""
    if not is_scale(request):
        return review.validate(request, state, settings, engine)
    res = as_dict(request.get("resource"))
    kind = _SCALABLE.get((str(res.get("group")), str(res.get("resource"))))
    namespace, name = request.get("namespace"), request.get("name")
    if (kind is None or request.get("operation") != "UPDATE" or not isinstance(namespace, str)
            or not isinstance(name, str) or state.workspace_for(namespace) is None
            or ((request.get("userInfo") or {}).get("username")) == settings.service_account):
        return Decision.allow(request.get("object"))
    replicas = _replicas(request.get("object"))
    if replicas is None:
        return _deny(kind, name, "the Scale's spec.replicas is not a whole number from 0 to 2147483647",
                     "give a replica count")
    scale_path = kind.scale_path or ()
    edit = f"change {field_path(scale_path)} on the {kind.kind} itself (kubectl patch or edit), which is judged " \
           f"as an UPDATE"
    if read is None:
        return _deny(kind, name, "taugate cannot read the stored object here (its cluster state is a snapshot, "
                                 "which holds no workloads), so it cannot judge this scale", edit)
    try:
        parent = read(Resource(kind.group, kind.version, kind.resource, kind.kind, True), namespace, name)
    except ObjectUnreadable as e:
        return _deny(kind, name, f"taugate could not read the stored {kind.kind} to judge this scale ({e}); the "
                                 f"request is denied rather than admitted unchecked", f"retry, or {edit}", code=503)
    old = metadata_of(request.get("oldObject"))
    if not isinstance(parent, dict) or metadata_of(parent).get("uid") != old.get("uid") or \
            metadata_of(parent).get("resourceVersion") != old.get("resourceVersion"):
        return _deny(kind, name, f"the {kind.kind} changed while it was being scaled", "retry the scale", code=409)
    new = _scaled(parent, scale_path, replicas)
    if new is None:
        return _deny(kind, name, f"{field_path(scale_path[:-1])} of the stored {kind.kind} is not an object",
                     "fix the object")
    gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
    update = {**{k: v for k, v in request.items() if k not in ("subResource", "requestSubResource")},
              "kind": gvk, "requestKind": gvk,
              "resource": {"group": kind.group, "version": kind.version, "resource": kind.resource},
              "requestResource": {"group": kind.group, "version": kind.version, "resource": kind.resource},
              "object": new, "oldObject": parent}
    return review.validate(update, state, settings, engine)
