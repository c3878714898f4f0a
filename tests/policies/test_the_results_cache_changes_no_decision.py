"""The embedded engine remembers results only by the whole input's exact bytes (issue 29 item 2):
no trimming, no key guessed from the Rego source. Proved by a differential test: the policy library
plus generated policies that read every part of the input (the object's name, the user, the
operation, the old object, a container image), over the fuzzer's corpus of real KubeRay and Kueue
samples and their one-field variants, decide the same with and without the cache."""

from __future__ import annotations

import copy
import shutil

import orjson
import pytest

from taugate.webhook import review
from taugate.webhook.policy.determinism import deterministic
from taugate.webhook.policy.engine import EmbeddedPolicyEngine, PolicyStore
from taugate.webhook.policy_tests import generated_inputs
from tests.fuzz.test_fuzz_admission import CORPUS
from tests.paths import POLICIES
from tests.policies.test_engine import image_classifier, image_classifier_input
from tests.policies.test_hot_reload import tighten_queue_limit
from tests.server.https import workload_request

GENERATED = {
    "name-ends-in-seven": 'endswith(input.review.object.metadata.name, "7")',
    "user-mallory": 'input.review.userInfo.username == "mallory"',
    "raw-string-user": 'input[`review`][`userInfo`].username == "mallory"',
    "operation-update": 'input.review.operation == "UPDATE"',
    "old-object-differs": "input.review.oldObject != null\n\tinput.review.oldObject.spec != input.review.object.spec",
    "latest-image": 'some path, value\n\twalk(input.review.object, [path, value])\n\tpath[count(path) - 1] == "image"\n'
                    '\tendswith(value, ":latest")',
    "run-id-label": 'input.object.metadata.labels["tau.azure.com/run-id"] != ""',
    "whole-input-alias": 'doc := input\n\tdoc.review.dryRun == true',
}


def _generated_library(tmp_path):
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    for name, body in GENERATED.items():
        key = name.replace("-", "_")
        (root / name).mkdir()
        (root / name / "policy.rego").write_text(
            f'package taugate.policies.{key}\n\nimport data.taugate.lib\n\n'
            f'deny contains lib.violation("{name}", "", "generated rule {name}") if {{\n\t{body}\n}}\n')
        (root / name / "policy_test.rego").write_text(f"package taugate.policies.{key}\n\ntest_loads if true\n")
    return root


def _requests(obj: dict) -> list[dict]:
    """CREATE as alice, CREATE as mallory, a dry-run CREATE, and an UPDATE from a changed object."""
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {})["namespace"] = "vision"
    create = workload_request(obj)
    old = copy.deepcopy(obj)
    old.setdefault("spec", {})["x-old"] = 1
    return [create, workload_request(obj, username="mallory"), workload_request(obj, dry_run=True),
            workload_request(obj, operation="UPDATE", old=old)]


def _latest(value):
    """``value`` with every container ``image`` retagged ``:latest`` (in place)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "image" and isinstance(v, str):
                value[k] = v.split("@")[0].rsplit(":", 1)[0] + ":latest"
            else:
                _latest(v)
    elif isinstance(value, list):
        for v in value:
            _latest(v)


def _decide(request: dict, state, settings, engine):
    d = review.validate(request, state, settings, engine)
    return (d.allowed, d.code, d.message, d.warnings, [v.as_dict() for v in d.violations],
            [v.as_dict() for v in d.dryrun], d.policy_failures)


def test_every_policy_decides_the_same_with_and_without_the_cache_over_the_fuzzers_corpus(tmp_path, example_state,
                                                                                          settings):
    root = _generated_library(tmp_path)
    cached = EmbeddedPolicyEngine(PolicyStore(root))
    uncached = EmbeddedPolicyEngine(PolicyStore(root), cache_size=0)
    objects = []
    for obj in CORPUS:
        objects.append(obj)
        objects += [variant for _, _, variant in generated_inputs(obj)[::25]]  # one-field variants
    fired: set[str] = set()
    compared = 0
    for obj in objects:
        for i, request in enumerate(_requests(obj)):
            renamed = copy.deepcopy(request)  # the same shape under another name: must not share results
            renamed["object"].setdefault("metadata", {})["name"] = f"run-{i}7"
            _latest(renamed["object"])
            for req in (request, renamed, request):  # the third is answered from the cache
                want = _decide(req, example_state, settings, uncached)
                assert _decide(req, example_state, settings, cached) == want, (obj.get("kind"), req["operation"])
                fired |= {v["policy"] for v in want[4]}
                compared += 1
    assert compared > 2000 and cached.cache_hits > 1000
    assert uncached.cache_hits == 0
    assert {"name-ends-in-seven", "user-mallory", "raw-string-user", "operation-update", "old-object-differs",
            "latest-image", "whole-input-alias"} <= fired, fired  # every generated rule was exercised


@pytest.mark.parametrize("call", ["time.now_ns()", 'http.send({"method": "get", "url": "u"})', "rand.intn(\"s\", 9)"])
def test_a_set_calling_a_non_deterministic_built_in_is_never_remembered(call):
    assert deterministic([f"package p\nt := {call}\n"]) is False
    assert deterministic([f"package p\n# {call}\nt := \"{call}\"\n"]) is True  # a comment or a message is no call


def test_the_cache_holds_at_most_its_size_and_zero_turns_it_off(example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES), cache_size=2)
    for n in range(5):
        engine.evaluate({**doc, "object": {**doc["object"], "totalGpus": n}})
    assert len(engine._cache) == 2
    off = EmbeddedPolicyEngine(PolicyStore(POLICIES), cache_size=0)
    off.evaluate(doc)
    off.evaluate(doc)
    assert (off.cache_hits, off.cache_misses, len(off._cache)) == (0, 0, 0)


def test_the_cache_holds_at_most_its_bytes_and_never_a_large_input(example_state, settings):
    """Each create has its own run-id, so a run of large objects is a run of distinct inputs: the
    cache's memory is bounded by bytes, not only by entries."""
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)
    size = len(orjson.dumps(doc))
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES), cache_size=100, cache_bytes=8 * size + 64)
    for n in range(20):
        engine.evaluate({**doc, "object": {**doc["object"], "totalGpus": n}})
    assert 1 <= len(engine._cache) <= 8
    assert sum(len(text) for _, text in engine._cache) <= engine.cache_bytes
    large = {**doc, "object": {**doc["object"], "annotations": {"notes": "x" * engine.cache_bytes}}}
    before = len(engine._cache)
    engine.evaluate(large)
    assert len(engine._cache) == before and all(len(text) < engine.cache_bytes for _, text in engine._cache)


def test_a_changed_policy_set_is_never_answered_from_the_old_sets_results(policy_copy, example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)  # 16 GPUs of the queue's 32
    store = PolicyStore(policy_copy)
    engine = EmbeddedPolicyEngine(store)
    assert not [v for v in engine.evaluate(doc) if v.policy == "gpu-total-fits-queue"]
    tighten_queue_limit(policy_copy)
    assert store.reload()
    assert [v for v in engine.evaluate(doc) if v.policy == "gpu-total-fits-queue"]


def test_a_policy_reading_the_user_through_a_raw_string_key_denies_from_the_first_review(policy_copy, example_state,
                                                                                        settings):
    """Found by trying: ``input[`userInfo`]`` was once read as an unknown key "", the user trimmed
    away, and the policy never fired. Nothing is trimmed any more."""
    (policy_copy / "no-mallory").mkdir()
    (policy_copy / "no-mallory" / "policy.rego").write_text(
        'package taugate.policies.no_mallory\n\nimport rego.v1\n\n'
        'deny contains {"msg": "not mallory", "field": ""} if input[`userInfo`].username == "mallory"\n')
    engine = EmbeddedPolicyEngine(PolicyStore(policy_copy))
    request = review.request_for(image_classifier(), namespace="vision", user_info={"username": "alice"})
    assert review.validate(request, example_state, settings, engine).allowed
    mallory = {**request, "userInfo": {"username": "mallory"}}
    decision = review.validate(mallory, example_state, settings, engine)
    assert not decision.allowed and "not mallory" in decision.message
