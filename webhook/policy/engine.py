"""The Rego policy engine behind one interface (ARCHITECTURE.md section 3): the parts (``sets``,
``embedded``, ``store``, ``opa``) named in one place, plus ``RecordingEngine`` and ``explain``.
Enforcement is per policy, as Gatekeeper's ``enforcementAction``. The generated aggregate module
names every policy's rules statically (about twice as fast in regorus as iterating
``data.taugate.policies[name]``).
"""

from __future__ import annotations

import json

from taugate.webhook.decision import Violation
from taugate.webhook.policy.embedded import (
    EmbeddedPolicyEngine,
    TestOutcome,
    build_regorus_engine,
    check_policy_set,
    run_rego_tests,
)
from taugate.webhook.policy.sets import (
    ACTIONS,
    AGGREGATE_MODULE,
    AGGREGATE_PACKAGE,
    POLICIES_PACKAGE,
    RESULTS_RULE,
    PolicyEngine,
    PolicyError,
    PolicyEvaluationError,
    PolicySet,
    PolicyUnavailable,
    RegoFile,
    TestRule,
    load_enforcement,
    package_key,
    read_policy_set,
)
from taugate.webhook.policy.store import PolicyStore


class RecordingEngine:
    """Keeps every input a ``PolicyEngine`` evaluated and what came back (``taugate policy
    eval``, the sample runner, benchmarks): ``inputs[i]`` pairs with ``results[i]``."""

    def __init__(self, engine: PolicyEngine):
        self.engine = engine
        self.inputs: list[dict] = []
        self.results: list[list[Violation]] = []

    @property
    def digest(self) -> str:
        return self.engine.digest

    @property
    def remote(self) -> bool:
        return bool(getattr(self.engine, "remote", False))

    @property
    def store(self) -> PolicyStore | None:
        return getattr(self.engine, "store", None)

    def evaluate(self, input: dict) -> list[Violation]:
        self.inputs.append(json.loads(json.dumps(input)))
        found = self.engine.evaluate(input)
        self.results.append(list(found))
        return found


def explain(engine: PolicyEngine, input: dict) -> tuple[dict[str, list[Violation]], dict[str, str]]:
    """Every policy of the active set with its results for ``input`` (empty for a pass), and the
    policies that failed at run time on it with the engine's one-line reason."""
    store: PolicyStore | None = getattr(engine, "store", None)
    out: dict[str, list[Violation]] = {name: [] for name in sorted(store.current.policies.values())} if store else {}
    try:
        found, failed = engine.evaluate(input), {}
    except PolicyEvaluationError as e:
        found, failed = e.results, dict(e.failed) or {"(policy engine)": e.reason}
    for v in found:
        out.setdefault(v.policy, []).append(v)
    return out, failed


__all__ = [
    "ACTIONS", "AGGREGATE_MODULE", "AGGREGATE_PACKAGE", "POLICIES_PACKAGE", "RESULTS_RULE", "EmbeddedPolicyEngine",
    "RecordingEngine", "PolicyEngine", "PolicyError", "PolicyEvaluationError", "PolicySet", "PolicyStore",
    "PolicyUnavailable", "RegoFile", "TestOutcome", "TestRule", "build_regorus_engine", "check_policy_set", "explain",
    "load_enforcement", "package_key", "read_policy_set", "run_rego_tests",
]
