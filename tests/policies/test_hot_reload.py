"""Hot reload: an edited set changes decisions once it passes everything ``taugate policy test``
checks (the time that takes: seconds, more on a busy machine); one that fails any check never
replaces the working set."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

from taugate.webhook.engines import load_policy_engine
from tests.policies.test_engine import image_classifier_input

LIMIT_RULE = "\tallowed := input.cluster.queue.gpu.max\n"


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def policies_of(found) -> set[str]:
    return {v.policy for v in found}


def tighten_queue_limit(policy_dir, factor: int = 4) -> None:
    """Edit gpu-total-fits-queue so that only a quarter of the quota is admissible. Its tests and
    allowed samples are adjusted too, since a set must pass everything ``taugate policy test``
    checks to be activated (``policy_tests.reload_gate``)."""
    folder = policy_dir / "gpu-total-fits-queue"
    policy = folder / "policy.rego"
    policy.write_text(policy.read_text().replace(
        LIMIT_RULE, f"\tis_number(input.cluster.queue.gpu.max)\n\tallowed := input.cluster.queue.gpu.max / {factor}\n"))
    tests = folder / "policy_test.rego"
    tests.write_text("package taugate.policies.gpu_total_fits_queue\n\nimport data.taugate.lib.fixtures as fx\n\n"
                     "test_a_quarter_of_the_quota if {\n"
                     "\tcount(deny) == 1 with input as fx.rayjob(\"h100-4gpu\", 3, 4)\n}\n")
    job = (folder / "samples" / "example_allowed_job_sixteen.yaml").read_text()
    for sample in (folder / "samples").glob("example_allowed*.yaml"):
        sample.unlink()
    (folder / "samples" / "example_allowed_job_eight.yaml").write_text(
        job.replace("parallelism: 2", "parallelism: 1").replace("completions: 2", "completions: 1"))


def test_editing_a_policy_changes_decisions_once_the_changed_set_passes_the_gate(policy_copy, example_state,
                                                                                settings):
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)  # 16 GPUs of 32
    engine = load_policy_engine(policy_copy)
    assert "gpu-total-fits-queue" not in policies_of(engine.evaluate(doc))
    before = engine.digest
    tighten_queue_limit(policy_copy)
    assert engine.store.check_for_changes() is True
    # Evaluate from this thread, which already holds an engine of the old set, and from a new one.
    assert "gpu-total-fits-queue" in policies_of(engine.evaluate(doc))
    other: list = []
    t = threading.Thread(target=lambda: other.append(engine.evaluate(doc)))
    t.start()
    t.join()
    assert "gpu-total-fits-queue" in policies_of(other[0])
    assert engine.digest != before
    assert engine.store.last_error is None


def test_a_broken_policy_never_replaces_the_working_set(policy_copy, example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    engine = load_policy_engine(policy_copy)
    expected = engine.evaluate(doc)
    digest = engine.digest
    failures = metric("taugate_policy_reload_failures_total")
    target = policy_copy / "gpu-total-fits-queue" / "policy.rego"
    good = target.read_text()
    target.write_text(good.replace("deny contains lib.violation(name, field, msg) if {", "deny contains if {"))
    assert engine.store.check_for_changes() is False
    assert str(target) in engine.store.last_error
    assert engine.digest == digest
    assert engine.evaluate(doc) == expected
    assert metric("taugate_policy_reload_failures_total") == failures + 1
    assert metric("taugate_policy_set_broken") == 1.0
    # Another thread building its engine now still gets the working set.
    seen: list = []
    t = threading.Thread(target=lambda: seen.append(engine.evaluate(doc)))
    t.start()
    t.join()
    assert seen == [expected]
    # Repairing the file clears the error; the same sources give the same digest.
    target.write_text(good)
    assert engine.store.check_for_changes() is False  # the set on disk is the active one again: nothing to activate
    assert engine.store.last_error is None
    assert metric("taugate_policy_set_broken") == 0.0
    assert engine.digest == digest


def test_a_policy_change_that_breaks_its_own_tests_is_not_activated(policy_copy, example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)
    engine = load_policy_engine(policy_copy)
    digest = engine.digest
    policy = policy_copy / "gpu-total-fits-queue" / "policy.rego"
    policy.write_text(policy.read_text().replace(LIMIT_RULE, "\tallowed := input.cluster.queue.gpu.max / 4\n"))
    assert engine.store.check_for_changes() is False
    assert "test_" in engine.store.last_error and "failed" in engine.store.last_error
    assert engine.digest == digest
    assert "gpu-total-fits-queue" not in policies_of(engine.evaluate(doc))


def test_editing_the_enforcement_file_changes_actions_without_restart(policy_copy, example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    engine = load_policy_engine(policy_copy)
    assert {v.policy: v.action for v in engine.evaluate(doc)}["gpu-total-fits-queue"] == "deny"
    (policy_copy / "enforcement.yaml").write_text("head-without-gpu: warn\ngpu-total-fits-queue: dryrun\n")
    assert engine.store.check_for_changes() is True
    assert {v.policy: v.action for v in engine.evaluate(doc)}["gpu-total-fits-queue"] == "dryrun"
    (policy_copy / "enforcement.yaml").write_text("gpu-total-fits-queue: sometimes\n")
    assert engine.store.check_for_changes() is False
    assert "enforcement.yaml:1:" in engine.store.last_error
    assert {v.policy: v.action for v in engine.evaluate(doc)}["gpu-total-fits-queue"] == "dryrun"


def test_an_activation_is_logged_once_naming_the_policies_added_removed_changed_and_reenforced(policy_copy, caplog):
    import logging
    import shutil

    engine = load_policy_engine(policy_copy)
    before = engine.digest
    tighten_queue_limit(policy_copy)  # changed
    shutil.rmtree(policy_copy / "head-without-gpu")  # deactivated
    (policy_copy / "enforcement.yaml").write_text("gpu-per-pod-fits-node: dryrun\n")  # re-enforced
    with caplog.at_level(logging.INFO, logger="taugate.policy"):
        assert engine.store.check_for_changes()
        assert not engine.store.check_for_changes()  # unchanged since: nothing activated, nothing logged
    [line] = [r for r in caplog.records if r.name == "taugate.policy"]
    assert (line.decision, line.previous, line.digest) == ("policy-set", before, engine.digest)
    assert (line.activated, line.deactivated, line.changed) == ([], ["head-without-gpu"], ["gpu-total-fits-queue"])
    assert line.enforcement == ["gpu-per-pod-fits-node: default -> dryrun"]
    assert "deactivated head-without-gpu" in line.getMessage() and "changed gpu-total-fits-queue" in line.getMessage()
