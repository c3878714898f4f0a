"""The Rego policy engine behind one interface (ARCHITECTURE.md section 3).

What the rest of taugate calls::

    engine = load_policy_engine("policies/")            # webhook/engines.py; PolicyError if the set cannot load
    violations = engine.evaluate(input_document)        # list[webhook.decision.Violation]
    engine.digest                                       # sha256 of the active set's sources
    engine.store.check_for_changes()                    # hot reload, polled by the process's WorkQueue

Policy library layout (``policies/README.md`` is the author's guide): one folder per policy,
``<name>/policy.rego`` in package ``taugate.policies.<name with "_" for "-">`` defining
``deny contains v`` and/or ``warn contains v`` with ``v = {"msg", "field", "policy"}``,
``<name>/policy_test.rego`` (``test_`` rules), ``<name>/samples/``; shared helpers in ``lib/``.
Files ending in ``_test.rego`` are tests: loaded to check a set, never to serve it.
The engine adds one generated module, ``data.taugate.aggregate.results``, that names every
policy's ``deny``/``warn`` rule statically, so one engine query per admission request
evaluates every policy at once (a static reference is about twice as fast in regorus as
iterating ``data.taugate.policies[name]``).

Enforcement: a policy's ``deny`` results deny and its ``warn`` results warn, unless the
enforcement configuration (``policies/enforcement.yaml`` by default: a mapping
``policy-name: deny | warn | dryrun``) names the policy, in which case every result of that
policy gets the configured action (Gatekeeper's ``enforcementAction``, per policy).

Backends: ``embedded`` evaluates in process with regorus (``gordon-to-regorus``). A regorus
engine is *unsendable* (it panics when used from another thread), so every thread keeps its
own engine in a ``threading.local``, rebuilt when the active set's digest changes.
``opa`` pushes the same modules to an OPA server over its REST API (aiohttp, never on the
server's event loop) and asks it for the same ``data.taugate.aggregate.results`` document
(``webhook/policy/opa.py``).

Where each part lives: ``webhook/policy/sets.py`` (reading a folder into a ``PolicySet``, the
errors, the ``PolicyEngine`` interface), ``webhook/policy/embedded.py`` (the embedded backend
and the Rego test runner), ``webhook/policy/store.py`` (the active set and its reload),
``webhook/policy/opa.py`` (the OPA-server backend); this module names them in one place and
adds ``RecordingEngine`` and ``explain``.

Reload: a ``PolicyStore`` polls the files; a changed set becomes active only after it parses,
compiles and passes every ``test_`` rule of its own tests. Otherwise the error is logged,
``taugate_policy_reload_failures_total`` counts it, ``taugate_policy_set_broken`` is 1 and
the previous set keeps serving.
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
    """Wraps a ``PolicyEngine`` and keeps every input it evaluated and what came back (for
    ``taugate policy eval``, the sample runner and benchmarks: the input is exactly the one
    admission built). ``inputs[i]`` pairs with ``results[i]``."""

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
    """Every policy of the engine's active set with its results for ``input`` (an empty list
    for a policy that passed), and the policies that failed at run time on it with the engine's
    one-line reason, for ``taugate policy eval``."""
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
