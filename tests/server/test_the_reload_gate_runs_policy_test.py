"""The hot-reload gate runs what ``taugate policy test`` runs (issue 29 item 4): parse, ``test_``
rules, samples and the run-time check on generated inputs. A changed set that fails any of them
stays inactive: the reason is logged, ``taugate_policy_set_broken`` is 1, the ``PolicySetCurrent``
condition on ``/readyz`` is False with the reason, and every decision stays what it was."""

from __future__ import annotations

import logging
import shutil

import pytest
from prometheus_client import REGISTRY

from taugate.webhook.engines import load_policy_engine
from tests.paths import POLICIES
from tests.policies.test_hot_reload import LIMIT_RULE
from tests.server.https import admission_review, check_response, workload_request
from tests.server.test_policy_runtime_failures import breakable_library, breaking_object


@pytest.fixture
def library(tmp_path):
    """The bundled library plus a policy that passes its tests and samples but fails at run time."""
    return breakable_library(tmp_path)


def _served(tmp_path):
    """A copy of the bundled library, and an engine serving it."""
    root = tmp_path / "served"
    shutil.copytree(POLICIES, root)
    return root, load_policy_engine(root)


def test_a_policy_that_fails_only_on_generated_inputs_is_never_activated(library, tmp_path, caplog):
    root, engine = _served(tmp_path)
    digest = engine.digest
    shutil.copytree(library / "priority-class-prefix", root / "priority-class-prefix")  # passes its tests and samples
    with caplog.at_level(logging.ERROR, logger="taugate.policy"):
        assert engine.store.check_for_changes() is False
    reason = engine.store.last_error
    assert "priority-class-prefix failed at run time" in reason and "priorityClassName" in reason
    assert engine.digest == digest
    assert REGISTRY.get_sample_value("taugate_policy_set_broken") == 1.0
    condition = engine.store.condition()
    assert condition["type"] == "PolicySetCurrent" and condition["status"] == "False"
    assert condition["reason"] == "ReloadRejected" and reason in condition["message"]
    assert any(reason in r.getMessage() for r in caplog.records)
    assert "priority-class-prefix" not in engine.store.current.policies.values()


def test_a_set_whose_samples_fail_is_never_activated(tmp_path):
    root, engine = _served(tmp_path)
    digest = engine.digest
    folder = root / "gpu-total-fits-queue"
    policy = folder / "policy.rego"
    policy.write_text(policy.read_text().replace(
        LIMIT_RULE, "\tis_number(input.cluster.queue.gpu.max)\n\tallowed := input.cluster.queue.gpu.max / 4\n"))
    (folder / "policy_test.rego").write_text(
        "package taugate.policies.gpu_total_fits_queue\n\nimport data.taugate.lib.fixtures as fx\n\n"
        "test_a_quarter_of_the_quota if {\n\tcount(deny) == 1 with input as fx.rayjob(\"h100-4gpu\", 3, 4)\n}\n")
    assert engine.store.check_for_changes() is False  # its own test_ rules pass; three allowed samples do not
    assert "gpu-total-fits-queue/samples/example_allowed_" in engine.store.last_error
    assert "expected: gpu-total-fits-queue reports nothing" in engine.store.last_error
    assert engine.digest == digest


def test_repairing_the_folder_activates_it_and_the_condition_is_true_again(library, tmp_path):
    root, engine = _served(tmp_path)
    shutil.copytree(library / "priority-class-prefix", root / "priority-class-prefix")
    assert engine.store.check_for_changes() is False
    rego = root / "priority-class-prefix" / "policy.rego"
    rego.write_text(rego.read_text().replace("\tnot startswith(t.priorityClassName, \"tau-\")",
                                             "\tis_string(t.priorityClassName)\n"
                                             "\tnot startswith(t.priorityClassName, \"tau-\")"))
    assert engine.store.check_for_changes() is True
    assert engine.store.condition()["status"] == "True"
    assert REGISTRY.get_sample_value("taugate_policy_set_broken") == 0.0
    assert "priority-class-prefix" in engine.store.current.policies.values()


async def test_a_rejected_reload_shows_on_readyz_and_changes_no_decision(library, tmp_path, start_server):
    root, engine = _served(tmp_path)
    gate = await start_server(engine_=engine)
    obj = breaking_object()
    before = check_response((await gate.post("/validate", admission_review(req := workload_request(obj)))).body,
                            req["uid"])
    ready = await gate.get("/readyz")
    assert ready.status == 200 and ready.body["conditions"][0]["status"] == "True"
    shutil.copytree(library / "priority-class-prefix", root / "priority-class-prefix")
    assert engine.store.check_for_changes() is False
    ready = await gate.get("/readyz")
    [condition] = ready.body["conditions"]
    assert ready.status == 200, "the old set still serves: the webhook stays ready"
    assert condition["status"] == "False" and "priority-class-prefix failed at run time" in condition["message"]
    after = check_response((await gate.post("/validate", admission_review(req := workload_request(obj)))).body,
                           req["uid"])
    assert after["allowed"] == before["allowed"] and after["status"] == before["status"]
    assert after.get("warnings") == before.get("warnings")
