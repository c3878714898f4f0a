"""The audit's pure core (ARCHITECTURE.md section 3, "Audit and PolicyReports"): a stored workload
judged as a CREATE now, with no mutation and no UPDATE excuse, under every enforcement action: the
rule of Gatekeeper's audit (open-policy-agent/gatekeeper ``pkg/audit/manager.go``,
``auditResources``) and of Kyverno's background scan (``pkg/background``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from taugate.access import metadata_of
from taugate.kinds import KINDS, kind_of
from taugate.policy_report import WorkloadAudit
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.webhook.decision import Violation
from taugate.webhook.mutation import controller_owner
from taugate.webhook.policy.engine import PolicyEngine
from taugate.webhook.review import ENGINE_FAILURE, judge

__all__ = ["ENGINE_FAILURE", "PolicyAuditor", "governed", "governed_kinds"]

class _Counting:
    """An engine wrapper that counts evaluations (zero: the policies never ran on the object)."""

    def __init__(self, engine: PolicyEngine):
        self.engine, self.calls = engine, 0

    @property
    def digest(self) -> str:
        return self.engine.digest

    @property
    def store(self):
        return getattr(self.engine, "store", None)

    def evaluate(self, input: dict) -> list[Violation]:
        self.calls += 1
        return self.engine.evaluate(input)


class PolicyAuditor:
    """Judges stored workloads with ``engine`` (its active set) and ``settings``. ``digest`` is the
    active set's digest (the operator audits again when it changes); ``audit`` gives one
    ``WorkloadAudit`` per object admission would validate (a registered kind, top-level, in a
    workspace of ``state``), in the order given."""

    def __init__(self, engine: PolicyEngine, settings: Settings | None = None):
        self.engine = engine
        self.settings = settings or Settings()

    @classmethod
    def load(cls, policy_dir: str | Path, settings: Settings | None = None) -> PolicyAuditor:
        """The embedded engine of ``policy_dir`` (its ``enforcement.yaml``), reloaded by
        ``check_for_changes`` as the webhook reloads. Raises ``PolicyError`` (one line)."""
        from taugate.webhook.engines import load_policy_engine

        engine = load_policy_engine(policy_dir)
        return cls(engine, settings)

    def check_for_changes(self) -> bool:
        """Reload the policy set if its files changed; True when a new set became active."""
        store = getattr(self.engine, "store", None)
        return bool(store.check_for_changes()) if store is not None else False

    @property
    def digest(self) -> str:
        return self.engine.digest

    def policies(self) -> frozenset[str]:
        """The names of the active set's policies (empty for an engine without a store)."""
        store = getattr(self.engine, "store", None)
        return frozenset(store.current.policies.values()) if store is not None else frozenset()

    def audit_one(self, obj: dict, state: ClusterState) -> WorkloadAudit | None:
        """The audit of one stored object, or None when admission would not validate it."""
        if kind_of(obj) is None:
            return None
        counting = _Counting(self.engine)
        violations, failed = judge(obj, state, self.settings, counting)
        if not counting.calls and not violations and not failed:
            return None  # outside a workspace, a child of a governed workload
        return WorkloadAudit.of(obj, violations, self.policies() if counting.calls else (),
                                failed or None)

    def audit(self, objects: Iterable[dict], state: ClusterState, *,
              go_on: Callable[[], None] = lambda: None) -> list[WorkloadAudit]:
        """The audits of ``objects`` (see the class docstring), ``go_on()`` before each (it raises
        to stop: the operator is stopping, ``controllers.audit.AuditLoop``). A child whose controller owner
        (a governed workload, ``mutation.controller_owner``) is among ``objects`` is judged
        through its owner and not again: KubeRay copies a RayJob's labels onto the RayCluster it
        creates (ray-operator v1.6.0 ``rayjob_controller.go``, ``constructRayClusterForRayJob``),
        so the stored-child rule of ``review.judge`` alone would report the owner's findings twice."""
        objects = list(objects)
        owners = {uid for o in objects if (uid := metadata_of(o).get("uid"))}
        out = []
        for obj in objects:
            go_on()
            owner = controller_owner(obj)
            if owner is not None and owner.get("uid") in owners:
                continue
            found = self.audit_one(obj, state)
            if found is not None:
                out.append(found)
        return out


def governed(objects: Iterable[dict]) -> list[dict]:
    """The objects of a registered workload kind (``taugate.kinds.KINDS``), in the order given."""
    return [o for o in objects if kind_of(o) is not None]


def governed_kinds() -> str:
    """The registered kinds, for messages: ``RayJob, RayCluster, Job``."""
    return ", ".join(k.kind for k in KINDS)
