"""The webhook's routes: the single source for the server and the Helm chart's webhook
configurations (a test checks the chart against this table).

Each route is one HTTPS path served by ``webhook.server`` and one entry in a
Mutating/ValidatingWebhookConfiguration: which API groups, versions and resources it intercepts,
for which operations. The validating workload route also names the ``scale`` subresource of
every kind that has one (``WorkloadKind.scale_path``), for UPDATE only: ``kubectl scale`` and an
HorizontalPodAutoscaler change replicas through it, and the API server sends a webhook a
subresource only when a rule names it (k8s.io/apiserver ``pkg/admission/plugin/webhook/predicates/rules``
``Matcher.resource``: ``deployments`` does not match ``deployments/scale``). No rule names
``*/status``: the status is the controllers', never a researcher's request. The one other subresource
named is a Pod's ``ephemeralcontainers`` (``kubectl debug``), judged for device access.
"""

from __future__ import annotations

from dataclasses import dataclass

from taugate.kinds import KIND_NAMES, KINDS, resources_by_group_version
from taugate.unmanaged import UNMANAGED_KINDS


@dataclass(frozen=True)
class Rule:
    """One ``rules[]`` entry of a webhook configuration (admissionregistration.k8s.io/v1)."""

    api_groups: tuple[str, ...]
    api_versions: tuple[str, ...]
    resources: tuple[str, ...]
    operations: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    """One webhook: ``name`` (a DNS name, as webhook configurations require), ``path`` on the
    server, ``type`` (mutating or validating) and its rules."""

    name: str
    path: str
    type: str
    rules: tuple[Rule, ...]


def _workload_resources() -> dict[tuple[str, str], tuple[str, ...]]:
    """The resources of the registered workload kinds (``taugate.kinds``), then of the kinds
    taugate does not manage but must see to refuse or warn their GPU workloads
    (``taugate.unmanaged.UNMANAGED_KINDS``), by ``(group, version)``."""
    out = dict(resources_by_group_version())
    for u in UNMANAGED_KINDS:
        out[(u.group, u.version)] = out.get((u.group, u.version), ()) + (u.resource,)
    return out


WORKLOAD_RULES = tuple(Rule((group,), (version,), resources, ("CREATE", "UPDATE"))
                       for (group, version), resources in _workload_resources().items())
"""One rule per API group and version of the registered workload kinds (``taugate.kinds``) and
the unmanaged kinds (``taugate.unmanaged``)."""
CLAIM_RULES = (Rule(("resource.k8s.io",), ("v1",), ("resourceclaims", "resourceclaimtemplates"), ("CREATE",)),
               Rule(("",), ("v1",), ("pods/ephemeralcontainers",), ("UPDATE",)))
"""Dynamic Resource Allocation claims and claim templates, judged as GPU requests (``webhook.claims``) when
created: their spec is immutable, and the scheduler and the claim controller update them all the time;
and the debug containers ``kubectl debug`` adds to a Pod, judged for device access."""


def _scale_rules() -> tuple[Rule, ...]:
    """UPDATE of the ``scale`` subresource of every workload kind that has one, one rule per API
    group and version (``taugate.webhook.scale`` judges it as an UPDATE of the parent's replicas).
    The unmanaged kinds' UPDATEs are never judged (``ungoverned``), so neither are their scales."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for k in KINDS:
        if k.scale_path is not None:
            out[(k.group, k.version)] = out.get((k.group, k.version), ()) + (f"{k.resource}/scale",)
    return tuple(Rule((group,), (version,), resources, ("UPDATE",)) for (group, version), resources in out.items())


SCALE_RULES = _scale_rules()
"""The ``scale`` subresources the validating workload route sees."""
TAU_RULES = (
    Rule(("tau.azure.com",), ("v1alpha1",), ("clusters", "workspaces", "quotarequests"), ("CREATE", "UPDATE")),
)
APPROVAL_RULES = (Rule(("tau.azure.com",), ("v1alpha1",), ("quotarequests",), ("CREATE", "UPDATE")),)
"""TauQuotaRequests, whose reviewer the mutating route records (``webhook.approval``)."""
TAU_KINDS = frozenset({"TauCluster", "TauWorkspace", "TauQuotaRequest"})
"""The kinds of ``TAU_RULES``' resources."""
ROUTED_KINDS = KIND_NAMES | TAU_KINDS | frozenset(u.kind for u in UNMANAGED_KINDS) | {"ResourceClaim",
                                                                                     "ResourceClaimTemplate"}
"""Every kind a route admits."""

ROUTES: tuple[Route, ...] = (
    Route("mutate.workloads.tau.azure.com", "/mutate", "mutating", WORKLOAD_RULES),
    Route("validate.workloads.tau.azure.com", "/validate", "validating", SCALE_RULES + CLAIM_RULES),
    Route("mutate.resources.tau.azure.com", "/mutate-tau", "mutating", APPROVAL_RULES),
    Route("validate.resources.tau.azure.com", "/validate-tau", "validating", TAU_RULES),
)
