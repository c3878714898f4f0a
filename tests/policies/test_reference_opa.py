"""Real OPA semantics: the embedded engine (regorus) and OPA itself must agree.

`opa-golib-python-bindings` embeds OPA v1.20 as a library; scripts/install-test-deps.sh
installs it. If it is missing these tests FAIL (an import error), they never skip.
"""

from __future__ import annotations

import opa_bindings  # noqa: F401  - imported only so that a missing package must fail this module, not skip it

from taugate.webhook.policy.engine import EmbeddedPolicyEngine, PolicyStore, read_policy_set
from taugate.webhook.policy_tests import run_policy_tests
from tests.policies.conftest import POLICIES
from tests.policies.reference import OpaLibraryEngine


def _summary(report):
    return {str(s.path): (s.decision.allowed, [v.render() for v in s.decision.violations], sorted(s.decision.warnings),
                          [v.render() for v in s.decision.dryrun])
            for s in report.samples}


def test_every_sample_gets_the_same_decision_and_messages_from_real_opa():
    embedded = run_policy_tests(POLICIES)
    opa = run_policy_tests(POLICIES, engine_factory=OpaLibraryEngine)
    assert embedded.ok and opa.ok, (embedded.problems, opa.problems)
    mine, theirs = _summary(embedded), _summary(opa)
    assert len(mine) >= 48
    assert mine == theirs
    # The comparison is not vacuous: samples are denied and warned with messages.
    assert sum(not allowed for allowed, *_ in mine.values()) >= 15
    assert sum(bool(w) for _, _, w, _ in mine.values()) >= 3


def test_every_rego_test_passes_under_real_opa():
    ps = read_policy_set(POLICIES)
    engine = OpaLibraryEngine(ps)
    for f in ps.tests:
        engine.engine.add_policy(f.rel, f.source)
    # One query per package: a package's document holds every test rule that is true; a failing
    # test is undefined, hence missing.
    documents: dict[str, dict] = {}
    failed = []
    for t in ps.test_rules():
        package = t.file.package
        if package not in documents:
            documents[package] = engine.engine.eval_document(package, {})
        if documents[package].get(t.name) is not True:
            failed.append((t.file.display, t.line, t.name))
    assert failed == []
    assert len(ps.test_rules()) >= 24


def test_opa_compiles_the_library_with_its_strict_type_checker():
    """OPA type-checks every module at load (regorus resolves lazily): the whole set must pass."""
    ps = read_policy_set(POLICIES)
    engine = OpaLibraryEngine(ps)
    assert engine.engine.eval_document("taugate.aggregate.results", {}) == []


def test_the_embedded_engine_and_opa_agree_on_a_denied_input(example_state, settings):
    from tests.policies.test_engine import image_classifier_input

    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    ps = read_policy_set(POLICIES)
    mine = EmbeddedPolicyEngine(PolicyStore(POLICIES)).evaluate(doc)
    theirs = OpaLibraryEngine(ps).evaluate(doc)
    assert mine == theirs
    assert {v.policy for v in mine} == {"gpu-total-fits-queue", "gpu-healthy-capacity"}
