"""The OPA-server backend against a real OPA server (``opa run --server``, built from the Go module
``github.com/open-policy-agent/opa`` pinned in tests/e2e/gomod/opa): the same decisions as the
embedded engine on every policy sample, the policies pushed again after a restart and on reload,
and a server that is down or late named in a ``PolicyUnavailable`` within the timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy.engine import PolicyError, PolicyUnavailable
from tests.policies.conftest import POLICIES
from tests.policies.test_hot_reload import tighten_queue_limit


@pytest.fixture
def remote_engine(opa_server):
    """``load_policy_engine(..., backend="opa")`` on the real server; closed after the test."""
    made = []

    def make(policy_dir=POLICIES, **kw):
        made.append(load_policy_engine(policy_dir, backend="opa", opa_url=opa_server.url, **kw))
        return made[-1]

    yield make
    for engine in made:
        engine.close()


def test_the_opa_server_backend_gives_the_same_decisions_as_the_embedded_engine(opa_server, remote_engine,
                                                                                  sample_inputs):
    remote, local = remote_engine(), load_policy_engine(POLICIES)
    assert remote.digest == local.digest and remote.remote and not local.remote
    assert len(sample_inputs) >= 48
    flagged = 0
    for doc in sample_inputs:
        mine = local.evaluate(doc)
        assert remote.evaluate(doc) == mine, doc["object"].get("name")
        flagged += bool(mine)
    assert flagged >= 20
    held = opa_server.policies()
    assert "taugate/lib/taugate.rego" in held and "taugate/taugate/aggregate.rego" in held
    written = (POLICIES / "gpu-total-fits-queue/policy.rego").read_text()
    assert held["taugate/gpu-total-fits-queue/policy.rego"] == written


def test_the_opa_backend_pushes_the_policies_again_after_the_server_lost_them(opa_server, remote_engine,
                                                                              sample_inputs):
    remote = remote_engine(opa_timeout_s=10)  # pushing every module and compiling takes > 1 s on a loaded machine
    doc = next(d for d in sample_inputs if d["object"]["totalGpus"] > 32)
    expected = remote.evaluate(doc)
    assert expected
    opa_server.restart()
    assert opa_server.policies() == {}
    assert remote.evaluate(doc) == expected
    assert "taugate/taugate/aggregate.rego" in opa_server.policies()


def test_a_reload_is_pushed_to_the_opa_server(opa_server, remote_engine, policy_copy, sample_inputs):
    remote = remote_engine(policy_copy)
    doc = next(d for d in sample_inputs if 12 <= d["object"]["totalGpus"] <= 16 and d["namespace"] == "vision")
    assert "gpu-total-fits-queue" not in {v.policy for v in remote.evaluate(doc)}
    tighten_queue_limit(policy_copy)
    assert remote.store.check_for_changes() is True
    assert "gpu-total-fits-queue" in {v.policy for v in remote.evaluate(doc)}
    assert "max / 4" in opa_server.policies()["taugate/gpu-total-fits-queue/policy.rego"]


def test_a_server_that_is_down_is_policy_unavailable_and_cannot_be_loaded(opa_server, remote_engine, sample_inputs):
    remote = remote_engine()
    opa_server.stop()
    with pytest.raises(PolicyUnavailable, match=f"OPA server at {opa_server.url} failed: ClientConnectorError"):
        remote.evaluate(sample_inputs[0])
    with pytest.raises(PolicyError, match="cannot push policies to OPA: OPA server at .* failed"):
        load_policy_engine(POLICIES, backend="opa", opa_url=opa_server.url)


def test_a_late_server_is_policy_unavailable_within_the_timeout(opa_server, remote_engine, sample_inputs):
    remote = remote_engine(opa_timeout_s=0.3)
    doc = sample_inputs[0]
    remote.evaluate(doc)
    opa_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(PolicyUnavailable, match="did not answer within 0.3 s"):
            remote.evaluate(doc)
        assert 0.25 <= time.monotonic() - started < 1.0
    finally:
        opa_server.resume()
    assert remote.evaluate(doc) == load_policy_engine(POLICIES).evaluate(doc)


async def test_the_opa_backend_refuses_to_wait_on_an_event_loop_and_answers_from_threads(remote_engine,
                                                                                         sample_inputs):
    remote = await asyncio.to_thread(remote_engine)
    doc = next(d for d in sample_inputs if d["object"]["totalGpus"] > 32)
    with pytest.raises(RuntimeError, match="not on an event loop"):
        remote.evaluate(doc)
    with pytest.raises(RuntimeError, match="not on an event loop"):
        load_policy_engine(POLICIES, backend="opa", opa_url=remote.url)
    answers = await asyncio.gather(*(asyncio.to_thread(remote.evaluate, doc) for _ in range(8)))
    assert all(a == answers[0] for a in answers) and answers[0]
    await asyncio.to_thread(remote.close)


def test_an_opa_url_that_is_not_http_is_refused():
    with pytest.raises(PolicyError, match="is not an http"):
        load_policy_engine(POLICIES, backend="opa", opa_url="unix:///run/opa.sock")


def test_a_module_the_opa_server_rejects_is_a_policy_error_naming_the_file_and_line(opa_server, remote_engine):
    import dataclasses

    remote = remote_engine()
    ps = remote.store.current
    [bad] = [f for f in ps.modules if f.rel == "head-without-gpu/policy.rego"]
    broken = dataclasses.replace(bad, source=bad.source + "\ndeny contains x if {\n\tx := \n}\n")
    with pytest.raises(PolicyError, match=r"head-without-gpu/policy.rego:\d+: OPA rejected the module: "):
        remote.push(dataclasses.replace(ps, modules=tuple(broken if f is bad else f for f in ps.modules)))
    assert opa_server.policies()["taugate/head-without-gpu/policy.rego"] == bad.source  # the served set is kept
