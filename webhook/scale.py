"""A change of replicas through the ``scale`` subresource, judged exactly as the UPDATE of the
parent's replicas field (issue 27).

``kubectl scale`` and an HorizontalPodAutoscaler do not update a Deployment: they update its
``scale`` subresource, an ``autoscaling/v1`` ``Scale`` (``spec.replicas`` and little else). The
AdmissionReview then carries ``kind: autoscaling/v1 Scale``, ``resource`` the parent's resource
(``apps/v1 deployments``), ``subResource: scale``, and the new and the stored Scale as
``object`` and ``oldObject``; it does not carry the parent. Both Scales are built from the stored
parent and carry its name, uid and resourceVersion (Kubernetes ``pkg/registry/apps/deployment/
storage/storage.go`` ``scaleFromDeployment``; apiextensions-apiserver ``pkg/registry/customresource/
etcd.go`` ``scaleFromCustomResource`` for a CRD's ``subresources.scale``), and the API server runs
validating admission inside its update, on the object it is about to change (``ScaleREST.Update``
-> ``GuaranteedUpdate``): on a conflict it re-reads and asks again.

So the validating webhook reads the stored parent (``read``: the one API call of a decision,
wired by the server from its ``StateProvider``), checks it is the object the Scale was built from
(same uid and resourceVersion; otherwise it changed in between and the request is denied with
409, retry), sets the new replicas at the kind's ``scale_path`` (``WorkloadKind.scale_path``, the
``specReplicasPath``) and decides that UPDATE with ``review.validate``: the same resolution,
built-in rules, policies and UPDATE excuse as a ``kubectl patch`` of the field. It fails closed:
without a reader (``taugate serve --cluster``: a snapshot holds no workloads), or when the parent
cannot be read, the scale is denied, naming why and the fix (change the field on the object).

Outside this module's case (no ``scale`` subresource, a kind without one, not a workspace,
taugate's own service account) the decision is ``review.validate``'s or an allow, and nothing is
read.
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
    """The stored object could not be read (the API is unreachable, or forbids it); the message is
    one line."""


def is_scale(request: dict) -> bool:
    """Is ``request`` a change through the ``scale`` subresource (the only subresource the
    workload rules name, ``webhook.routes.SCALE_RULES``)? Such a decision reads the API, so the
    server never makes it on its event loop."""
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
    """The validating workload webhook's answer: ``review.validate``'s, and for a ``scale``
    request of a governed kind in a workspace the answer for the UPDATE of the stored parent's
    replicas (the module docstring says how); ``read`` reads the parent."""
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
