"""The OPA-server backend (opa-python-client) against a local OPA REST stand-in."""

from __future__ import annotations

import pytest

from tests.policies.conftest import POLICIES
from tests.policies.reference import OpaStandIn
from tests.policies.test_hot_reload import tighten_queue_limit, wait_for
from taugate.webhook.policy import PolicyError, PolicyEvaluationError, RecordingEngine
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy_testing import run_policy_tests


@pytest.fixture
def opa():
    server = OpaStandIn().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sample_inputs():
    """Every policy input the samples produce through admission (embedded engine)."""
    inputs = []

    def factory(ps):
        from taugate.webhook.policy import EmbeddedPolicyEngine, PolicyStore

        rec = RecordingEngine(EmbeddedPolicyEngine(PolicyStore(POLICIES)))
        inputs.append(rec)
        return rec

    report = run_policy_tests(POLICIES, engine_factory=factory)
    assert report.ok
    return [doc for rec in inputs for doc in rec.inputs]


def test_the_opa_server_backend_gives_the_same_decisions_as_the_embedded_engine(opa, sample_inputs):
    remote = load_policy_engine(POLICIES, backend="opa", opa_url=opa.url)
    local = load_policy_engine(POLICIES)
    assert remote.digest == local.digest
    assert len(sample_inputs) >= 48
    flagged = 0
    for doc in sample_inputs:
        mine = local.evaluate(doc)
        assert remote.evaluate(doc) == mine
        flagged += bool(mine)
    assert flagged >= 20
    assert ("POST", "/v1/data/taugate/aggregate/results") in opa.requests
    assert any(path == "/v1/policies/taugate/lib/taugate.rego" for _, path in opa.requests)
    remote.close()


def test_the_opa_backend_pushes_the_policies_again_after_the_server_lost_them(opa, sample_inputs):
    remote = load_policy_engine(POLICIES, backend="opa", opa_url=opa.url)
    doc = next(d for d in sample_inputs if d["object"]["totalGpus"] > 32)
    expected = remote.evaluate(doc)
    opa.forget_policies()
    assert remote.evaluate(doc) == expected
    assert "taugate/taugate/aggregate.rego" in opa.policies


def test_a_reload_is_pushed_to_the_opa_server(opa, policy_copy, sample_inputs):
    remote = load_policy_engine(policy_copy, backend="opa", opa_url=opa.url)
    doc = next(d for d in sample_inputs if 12 <= d["object"]["totalGpus"] <= 16 and d["namespace"] == "vision")
    assert "gpu-total-fits-queue" not in {v.policy for v in remote.evaluate(doc)}
    remote.start_watching(0.1)
    try:
        tighten_queue_limit(policy_copy)
        wait_for(lambda: "gpu-total-fits-queue" in {v.policy for v in remote.evaluate(doc)})
        assert "max / 4" in opa.policies["taugate/gpu-total-fits-queue/policy.rego"]
    finally:
        remote.stop_watching()


def test_an_unreachable_opa_server_is_a_clear_error(opa, sample_inputs):
    remote = load_policy_engine(POLICIES, backend="opa", opa_url=opa.url)
    opa.stop()
    with pytest.raises(PolicyEvaluationError, match=f"OPA server at {opa.url} failed"):
        remote.evaluate(sample_inputs[0])
    with pytest.raises(PolicyError, match="cannot push policies to OPA"):
        load_policy_engine(POLICIES, backend="opa", opa_url=opa.url)
