"""The embedded engine evaluates the input trimmed to what the policy set can read, and remembers
results by it (``webhook.input_use``, ``EmbeddedPolicyEngine.raw_results``)."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest

from taugate.memo import Memo
from taugate.webhook.input_use import InputUse, scan
from taugate.webhook.policy import EmbeddedPolicyEngine, PolicyStore
from tests.policies.conftest import POLICIES
from tests.policies.test_engine import image_classifier_input
from tests.policies.test_hot_reload import tighten_queue_limit

METADATA, USER, OPERATION = ("object", "metadata"), ("userInfo",), ("operation",)


# ---- what a policy set can read --------------------------------------------------------------

def test_the_policy_library_reads_no_metadata_user_or_operation_and_is_deterministic():
    use = PolicyStore(POLICIES).current.input_use
    assert use == InputUse(frozenset({METADATA, USER, OPERATION}), True)


@pytest.mark.parametrize(("rule", "kept"), [
    ('deny contains m if { input.object.metadata.name == "x"; m := {} }', {METADATA}),
    ('deny contains m if { input["userInfo"].username == "x"; m := {} }', {USER}),
    ('deny contains m if { input.operation == "UPDATE"; m := {} }', {OPERATION}),
    ('deny contains m if { o := input.object; o.kind == "Job"; m := {} }', {METADATA}),  # an alias reaches metadata
    ('deny contains m if { some k; input.object[k]; m := {} }', {METADATA}),
    ('deny contains m if { walk(input, [p, v]); m := {} }', {METADATA, USER, OPERATION}),
    ('deny contains m if { x := input; x.object; m := {} }', {METADATA, USER, OPERATION}),
    # keys the scan cannot read as plain names: a raw string, an escape, a name with a dash
    ('deny contains m if { input[`userInfo`].username == "x"; m := {} }', {METADATA, USER, OPERATION}),
    ('deny contains m if { input.object["meta\\u0064ata"].name == "x"; m := {} }', {METADATA}),
    ('deny contains m if { input["user-info"]; m := {} }', {METADATA, USER, OPERATION}),
])
def test_any_rule_that_can_reach_a_part_keeps_it(rule, kept):
    use = scan(["package p\n" + rule + "\n"])
    assert {METADATA, USER, OPERATION} - use.unread == kept


def test_input_in_a_comment_or_a_message_is_not_a_reference():
    use = scan(['package p\n# input.userInfo is never read here\n'
                'deny contains m if { input.object.totalGpus > 8; m := {"msg": "input.object.metadata: too many"} }\n'])
    assert use.unread == frozenset({METADATA, USER, OPERATION})


@pytest.mark.parametrize("call", ["time.now_ns()", 'http.send({"method": "get", "url": "u"})', "rand.intn(\"s\", 9)"])
def test_a_set_calling_a_non_deterministic_built_in_is_never_remembered(call):
    assert scan([f"package p\nt := {call}\n"]).deterministic is False


def test_trimming_drops_only_the_unread_parts_and_never_changes_the_input():
    doc = {"operation": "CREATE", "userInfo": {"username": "a"}, "namespace": "vision",
           "object": {"kind": "Job", "metadata": {"name": "j"}, "totalGpus": 8}, "cluster": {}}
    before = copy.deepcopy(doc)
    trimmed = InputUse(frozenset({METADATA, USER, OPERATION}), True).trim(doc)
    assert trimmed == {"namespace": "vision", "object": {"kind": "Job", "totalGpus": 8}, "cluster": {}}
    assert doc == before
    assert InputUse(frozenset(), True).trim(doc) is doc


# ---- remembering results ---------------------------------------------------------------------

def test_every_policy_sample_gets_the_same_results_trimmed_as_whole(sample_inputs):
    docs = sample_inputs
    assert len(docs) >= 48
    whole = EmbeddedPolicyEngine(PolicyStore(POLICIES), cache_size=0)
    whole.store.current.__dict__["input_use"] = InputUse(frozenset(), True)  # evaluate the whole input
    trimmed = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    for doc in docs:
        assert trimmed.evaluate(doc) == whole.evaluate(doc)


def test_an_object_of_the_same_shape_under_another_name_and_user_is_evaluated_once(example_state, settings):
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    first = engine.evaluate(doc)
    assert {v.policy for v in first} >= {"gpu-total-fits-queue"}
    other = {**doc, "operation": "UPDATE", "userInfo": {"username": "bob"},
             "object": {**doc["object"], "metadata": {"name": "sweep-2", "labels": {"tau.azure.com/run-id": "r2"}}}}
    assert engine.evaluate(other) == first
    assert (engine.cache_misses, engine.cache_hits) == (1, 1)
    bigger = {**doc, "object": {**doc["object"], "totalGpus": doc["object"]["totalGpus"] + 8}}
    engine.evaluate(bigger)
    assert engine.cache_misses == 2


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


def test_a_changed_policy_set_is_never_answered_from_the_old_sets_results(policy_copy, example_state, settings):
    doc = image_classifier_input(example_state, settings, workers=4, gpus=4)  # 16 GPUs of the queue's 32
    store = PolicyStore(policy_copy)
    engine = EmbeddedPolicyEngine(store)
    assert not [v for v in engine.evaluate(doc) if v.policy == "gpu-total-fits-queue"]
    tighten_queue_limit(policy_copy)
    assert store.reload()
    assert [v for v in engine.evaluate(doc) if v.policy == "gpu-total-fits-queue"]


# ---- remembering results by a key, without building the input ------------------------------------

class Builds:
    """A key function and an input builder that count their calls."""

    def __init__(self, doc, key="k", anchors=()):
        self.doc, self.key, self.anchors, self.built, self.reads = doc, key, anchors, 0, []

    def key_for(self, read):
        self.reads.append(read)
        return (self.key, self.anchors)

    def build(self):
        self.built += 1
        return self.doc


def test_a_key_seen_before_is_answered_without_building_the_input(example_state, settings):
    memo = Memo(16)
    doc = image_classifier_input(example_state, settings, workers=16, gpus=4)
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    calls = Builds(doc)
    first = engine.evaluate_keyed(calls.key_for, calls.build, memo)
    assert first == EmbeddedPolicyEngine(PolicyStore(POLICIES)).evaluate(doc)
    assert {v.policy for v in first} >= {"gpu-total-fits-queue"}
    assert engine.evaluate_keyed(calls.key_for, calls.build, memo) == first
    assert calls.built == 1 and engine.cache_hits == 1
    assert calls.reads == [frozenset(), frozenset()]  # the library reads no metadata, user or operation


def test_the_key_function_is_told_which_parts_the_set_reads(policy_copy, example_state, settings):
    memo = Memo(16)
    (policy_copy / "by-name").mkdir()
    (policy_copy / "by-name" / "policy.rego").write_text(
        'package taugate.policies.by_name\n\nimport rego.v1\n\n'
        'deny contains {"msg": "x", "field": ""} if input.object.metadata.name == "forbidden"\n')
    engine = EmbeddedPolicyEngine(PolicyStore(policy_copy))
    calls = Builds(image_classifier_input(example_state, settings, workers=4, gpus=1))
    engine.evaluate_keyed(calls.key_for, calls.build, memo)
    assert calls.reads == [frozenset({METADATA})]


def test_the_objects_a_remembered_key_names_by_identity_are_kept_alive(example_state, settings):
    memo = Memo(16)
    class Anchor:
        pass

    doc = image_classifier_input(example_state, settings, workers=4, gpus=1)
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    anchor = Anchor()
    calls = Builds(doc, key=("k", id(anchor)), anchors=(anchor,))
    engine.evaluate_keyed(calls.key_for, calls.build, memo)
    alive = weakref.ref(anchor)
    del anchor, calls
    gc.collect()
    assert alive() is not None  # its id cannot be reused by another object while the key is remembered


def test_no_key_and_a_non_deterministic_set_always_build_the_input(policy_copy, example_state, settings):
    memo = Memo(16)
    doc = image_classifier_input(example_state, settings, workers=4, gpus=1)
    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    for _ in range(2):
        assert engine.evaluate_keyed(lambda read: None, lambda: doc, memo) == engine.evaluate(doc)
    (policy_copy / "clock").mkdir()
    (policy_copy / "clock" / "policy.rego").write_text(
        'package taugate.policies.clock\n\nimport rego.v1\n\n'
        'deny contains {"msg": "x", "field": ""} if time.now_ns() < 0\n')
    clocked = EmbeddedPolicyEngine(PolicyStore(policy_copy))
    calls = Builds(doc)
    clocked.evaluate_keyed(calls.key_for, calls.build, memo)
    clocked.evaluate_keyed(calls.key_for, calls.build, memo)
    assert calls.built == 2 and calls.reads == []


def test_a_changed_policy_set_is_never_answered_from_the_old_sets_keyed_results(policy_copy, example_state,
                                                                                settings):
    memo = Memo(16)
    calls = Builds(image_classifier_input(example_state, settings, workers=4, gpus=4))
    store = PolicyStore(policy_copy)
    engine = EmbeddedPolicyEngine(store)
    first = engine.evaluate_keyed(calls.key_for, calls.build, memo)
    assert not [v for v in first if v.policy == "gpu-total-fits-queue"]
    tighten_queue_limit(policy_copy)
    assert store.reload()
    assert [v for v in engine.evaluate_keyed(calls.key_for, calls.build, memo) if v.policy == "gpu-total-fits-queue"]
    assert calls.built == 2


def test_results_remembered_by_key_live_in_the_cluster_state_and_go_with_it(example_state, settings):
    """Admission keeps the keyed results in the state's memo: a review under a new state finds
    nothing of the old one, and the engine holds no old state alive."""
    import dataclasses

    from taugate.webhook import review
    from tests.policies.test_engine import image_classifier

    engine = EmbeddedPolicyEngine(PolicyStore(POLICIES))
    request = review.request_for(image_classifier(), namespace="vision")
    state = dataclasses.replace(example_state)
    assert review.validate(request, state, settings, engine).allowed
    assert len(state.memo("policy-results", 1)) == 1
    newer = dataclasses.replace(example_state)
    assert review.validate(request, newer, settings, engine).allowed
    assert len(newer.memo("policy-results", 1)) == 1
    old = weakref.ref(state)
    del state
    gc.collect()
    assert old() is None


def test_a_policy_reading_the_user_through_a_raw_string_key_denies_from_the_first_review(policy_copy, example_state,
                                                                                        settings):
    """Found by trying: ``input[`userInfo`]`` was once read as an unknown key "", the user trimmed
    away, and the policy never fired."""
    from taugate.webhook import review
    from tests.policies.test_engine import image_classifier

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
