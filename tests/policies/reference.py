"""Test helper: a PolicyEngine on real OPA semantics.

``OpaLibraryEngine`` evaluates the same modules (the policy set's serving modules, generated
aggregate included) with ``opa-golib-python-bindings`` (OPA v1.20 as a library). The OPA-server
backend is tested against a real ``opa run --server`` (``tests/opa_server.py``).
"""

from __future__ import annotations

from opa_bindings import OpaEngine

from taugate.webhook.decision import Violation
from taugate.webhook.policy.engine import PolicySet


class OpaLibraryEngine:
    """``PolicyEngine`` evaluating ``data.taugate.aggregate.results`` with real OPA."""

    def __init__(self, ps: PolicySet):
        self.ps = ps
        self.digest = ps.digest
        self.engine = OpaEngine()
        for f in ps.serving_modules:
            self.engine.add_policy(f.rel, f.source)

    def evaluate(self, input: dict) -> list[Violation]:
        return self.ps.to_violations(self.engine.eval_document("taugate.aggregate.results", input))
