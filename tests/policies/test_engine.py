"""The embedded policy engine: one interface, enforcement by configuration, thread safety."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from taugate.webhook.decision import Violation
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy.engine import (
    PolicyError,
    RecordingEngine,
    load_enforcement,
    read_policy_set,
)
from taugate.webhook.review import admit
from tests.policies.conftest import IMAGE_CLASSIFIER, POLICIES


def image_classifier(workers: int = 4, gpus: int = 1) -> dict:
    """KubeRay's GPU RayJob sample with its worker group resized."""
    obj = yaml.safe_load(IMAGE_CLASSIFIER.read_text())
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = group["minReplicas"] = group["maxReplicas"] = workers
    for key in ("limits", "requests"):
        group["template"]["spec"]["containers"][0]["resources"][key]["nvidia.com/gpu"] = str(gpus)
    return obj


def image_classifier_input(state, settings, *, workers: int, gpus: int) -> dict:
    """The policy input validation builds for the resized sample in namespace vision."""
    rec = RecordingEngine(load_policy_engine(POLICIES))
    admit(image_classifier(workers, gpus), state=state, settings=settings, engine=rec, namespace="vision")
    return rec.inputs[-1]


def test_image_classifier_scaled_to_64_gpus_is_denied_by_gpu_total_fits_queue(example_state, settings):
    engine = load_policy_engine(POLICIES)
    decision = admit(image_classifier(16, 4), state=example_state, settings=settings, engine=engine, namespace="vision")
    assert not decision.allowed
    found = [v for v in decision.violations if v.policy == "gpu-total-fits-queue"]
    assert len(found) == 1
    assert found[0].field == "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
    assert "asks for 64 GPUs in total" in found[0].message
    assert "at most 32 nvidia.com/gpu" in found[0].message
    assert "ClusterQueue vision-cq" in found[0].message
    assert found[0].action == "deny"
    assert decision.code == 403 and "64" in decision.message


def test_the_unmodified_image_classifier_is_admitted(example_state, settings):
    engine = load_policy_engine(POLICIES)
    decision = admit(image_classifier(), state=example_state, settings=settings, engine=engine, namespace="vision")
    assert decision.allowed, decision.message
    assert decision.warnings == []


def test_evaluate_returns_violations_with_the_enforcement_action(example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    found = load_policy_engine(POLICIES).evaluate(doc)
    assert all(isinstance(v, Violation) for v in found)
    assert {(v.policy, v.action) for v in found} == {("gpu-total-fits-queue", "deny"), ("gpu-healthy-capacity", "warn")}


def test_enforcement_is_configuration_not_rego(example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    dry = load_policy_engine(POLICIES, enforcement={"gpu-total-fits-queue": "dryrun", "gpu-healthy-capacity": "deny"})
    actions = {v.policy: v.action for v in dry.evaluate(doc)}
    assert actions == {"gpu-total-fits-queue": "dryrun", "gpu-healthy-capacity": "deny"}
    decision = admit(image_classifier(16, 4), state=example_state, settings=settings,
                     engine=load_policy_engine(POLICIES, enforcement={"gpu-total-fits-queue": "dryrun"}),
                     namespace="vision")
    assert decision.allowed
    assert [v.policy for v in decision.dryrun] == ["gpu-total-fits-queue"]
    assert any(w.startswith("[gpu-healthy-capacity] ") for w in decision.warnings)


def test_the_shipped_enforcement_file_makes_a_gpu_head_a_warning(example_state, settings):
    obj = image_classifier()
    head = obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    head["limits"]["nvidia.com/gpu"] = head["requests"]["nvidia.com/gpu"] = "1"
    warned = admit(obj, state=example_state, settings=settings, engine=load_policy_engine(POLICIES), namespace="vision")
    assert any(w.startswith("[head-without-gpu] ") for w in warned.warnings)
    denied = admit(obj, state=example_state, settings=settings, namespace="vision",
                   engine=load_policy_engine(POLICIES, enforcement={"head-without-gpu": "deny"}))
    assert [v.policy for v in denied.violations] == ["head-without-gpu"]


def test_an_enforcement_file_with_an_unknown_policy_or_action_is_rejected_with_its_line(tmp_path):
    known = set(read_policy_set(POLICIES).policies.values())
    bad = tmp_path / "enforcement.yaml"
    bad.write_text("# actions\nhead-without-gpu: warn\ngpu-total-fits-queu: deny\n")
    with pytest.raises(PolicyError) as e:
        load_enforcement(bad, known)
    assert str(e.value).startswith(f"{bad}:3: unknown policy 'gpu-total-fits-queu'")
    bad.write_text("head-without-gpu: block\n")
    with pytest.raises(PolicyError,
                       match=r":1: policy 'head-without-gpu': enforcement 'block' is not one of deny, warn, dryrun"):
        load_enforcement(bad, known)
    with pytest.raises(PolicyError, match="enforcement file not found"):
        load_policy_engine(POLICIES, enforcement=tmp_path / "missing.yaml")


def test_loading_a_broken_set_raises_one_line_with_file_line_and_reason(policy_copy):
    target = policy_copy / "requests-required" / "policy.rego"
    target.write_text(target.read_text().replace("some r in [\"cpu\", \"memory\"]", "some r in [\"cpu\", \"memory\""))
    with pytest.raises(PolicyError) as e:
        load_policy_engine(policy_copy)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{target}:")
    assert e.value.file == str(target) and isinstance(e.value.line, int) and e.value.reason


def test_loading_a_set_whose_tests_fail_raises(policy_copy):
    target = policy_copy / "head-without-gpu" / "policy_test.rego"
    target.write_text(target.read_text().replace('contains(v.msg, "asks for 1 GPU,")',
                                                 'contains(v.msg, "asks for 2 GPUs,")'))
    with pytest.raises(PolicyError, match=r"policy_test.rego:\d+: test_gpu_head_is_reported_at_its_gpu_limit failed"):
        load_policy_engine(policy_copy)


def test_the_digest_is_the_sha256_of_the_sources_and_follows_them(policy_copy):
    first = load_policy_engine(policy_copy).digest
    assert len(first) == 64 and int(first, 16) >= 0
    assert load_policy_engine(policy_copy).digest == first
    target = policy_copy / "head-without-gpu" / "policy.rego"
    target.write_text(target.read_text() + "\n# a comment changes the source\n")
    assert load_policy_engine(policy_copy).digest != first
    tests_only = policy_copy / "head-without-gpu" / "policy_test.rego"
    second = load_policy_engine(policy_copy).digest
    tests_only.write_text(tests_only.read_text() + "\n# tests are not served\n")
    assert load_policy_engine(policy_copy).digest == second
    assert load_policy_engine(policy_copy, enforcement={"head-without-gpu": "deny"}).digest != second


def test_the_engine_can_be_called_from_many_threads(example_state, settings):
    engine = load_policy_engine(POLICIES)
    denied = image_classifier_input(example_state, settings, workers=16, gpus=4)
    allowed = image_classifier_input(example_state, settings, workers=4, gpus=1)
    expected = (engine.evaluate(denied), engine.evaluate(allowed))
    seen_threads = set()

    def work(i: int):
        seen_threads.add(threading.get_ident())
        doc = denied if i % 2 == 0 else allowed
        return i, engine.evaluate(copy.deepcopy(doc))

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(work, range(120)))
    assert len(seen_threads) > 1
    for i, found in results:
        assert found == expected[i % 2]
    assert expected[1] == [] and len(expected[0]) == 2


def test_unknown_backend_and_missing_opa_url_are_clear_errors():
    with pytest.raises(PolicyError, match="unknown policy backend 'wasm'"):
        load_policy_engine(POLICIES, backend="wasm")  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="needs opa_url"):
        load_policy_engine(POLICIES, backend="opa")


def test_a_runtime_error_in_a_policy_raises_policy_evaluation_error(policy_copy, example_state, settings):
    from taugate.webhook.policy.engine import PolicyEvaluationError

    target = policy_copy / "head-without-gpu" / "policy.rego"
    # Two values for one rule only when the object has a generateName: the policy's own tests
    # (whose objects have names) pass, the image-classifier sample (generateName) hits it.
    target.write_text(target.read_text() + '\nconflict := 1 if input.object.metadata.generateName\n\n'
                      'conflict := 2 if input.object.metadata.generateName\n\n'
                      'deny contains {"msg": "x", "field": "f", "policy": "head-without-gpu"} if conflict == 3\n')
    engine = load_policy_engine(policy_copy)
    doc = image_classifier_input(example_state, settings, workers=4, gpus=1)
    with pytest.raises(PolicyEvaluationError) as e:
        engine.evaluate(doc)
    assert "\n" not in str(e.value)
