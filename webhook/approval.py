"""``/mutate-tau``: a TauQuotaRequest's reviewer is the requesting user as the API server
authenticated them, written into ``tau.azure.com/reviewed-by`` whenever an approval annotation is
added, changed or removed, as kube-apiserver records who approved a CertificateSigningRequest from
the request's user, not the object. ``/validate-tau`` refuses a ``reviewed-by`` naming anyone else,
so the record holds even if this route was skipped.
"""

from __future__ import annotations

from taugate import labels, tau_admission
from taugate.webhook.decision import Decision
from taugate.webhook.patching import Edits


def mutate(request: dict) -> Decision:
    """The answer for one AdmissionRequest of ``/mutate-tau``: the reviewer recorded, or nothing."""
    obj = request.get("object")
    reviewer = tau_admission.reviewer_to_record(request)
    if reviewer is None or not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return Decision.allow(obj)
    edits = Edits(obj)
    annotations = edits.container(obj["metadata"], ("metadata",), "annotations", dict)
    claimed = annotations.get(labels.REVIEWED_BY)
    edits.set(annotations, ("metadata", "annotations"), labels.REVIEWED_BY, reviewer)
    warnings = [] if claimed is None else [
        f"{labels.REVIEWED_BY} is recorded as {reviewer!r}, the user who made this approval, not {claimed!r} "
        f"(taugate records the approving user itself; leave the annotation out)"]
    return Decision(True, warnings=warnings, patch=edits.patch(), object=obj)
