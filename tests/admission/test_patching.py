"""The JSONPatch that ``Edits`` records turns the original into the edited copy, exactly: applied
with the jsonpatch library, the result equals the edited document, for any sequence of edits."""

from __future__ import annotations

import copy
import random

import jsonpatch
import yaml

from taugate.webhook.mutation import deep_copy
from taugate.webhook.patching import Edits, pointer
from tests.paths import KUBERAY_SAMPLES

DOCS = [d for p in sorted(KUBERAY_SAMPLES.glob("ray-*.yaml"))
        for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)]

KEYS = ["labels", "tau.azure.com/run-id", "a~b", "x/~1y", "volumes", "spec", "nodeSelector", "0"]
VALUES = [True, 1, 0, 1.5, None, "s", "", {"nested": [1, {"b": True}]}, [], {}]


def _containers(x, path=()):
    """Every (container, path) in ``x``, depth first."""
    yield x, path
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)):
            yield from _containers(v, path + (k,))


def _random_edits(doc: dict, rnd: random.Random) -> Edits:
    edits = Edits(deep_copy(doc))
    for _ in range(rnd.randrange(1, 12)):
        holder, path = rnd.choice(list(_containers(edits.doc)))
        value = copy.deepcopy(rnd.choice(VALUES))
        if isinstance(holder, list):
            edits.append(holder, path, value)
            continue
        key = rnd.choice(KEYS + list(holder)[:3])
        choice = rnd.randrange(4)
        if choice == 0:
            inner = edits.container(holder, path, key, rnd.choice((dict, list)))
            if isinstance(inner, dict):
                edits.set(inner, path + (key,), rnd.choice(KEYS), value)
            else:
                edits.append(inner, path + (key,), value)
        elif choice == 1:
            edits.set(holder, path, key, value)
        elif choice == 2:
            edits.set_default(holder, path, key, value)
        else:
            edits.set(holder, path, key, copy.deepcopy(holder.get(key)))  # the same value again
    return edits


def _typed(x):
    """``x`` with every scalar tagged by its type, so ``True`` never equals ``1``."""
    if isinstance(x, dict):
        return {k: _typed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_typed(v) for v in x]
    return (type(x).__name__, x)


def test_the_patch_of_any_sequence_of_edits_reproduces_the_edited_document():
    failed = []
    for seed in range(2000):
        rnd = random.Random(seed)
        doc = DOCS[seed % len(DOCS)]
        edits = _random_edits(doc, rnd)
        result = jsonpatch.apply_patch(doc, edits.patch() or [])
        # typed: True is not 1; and the library's own diff agrees that nothing else differs
        if _typed(result) != _typed(edits.doc) or jsonpatch.make_patch(result, edits.doc).patch:
            failed.append(seed)
    assert not failed, f"seeds whose patch does not reproduce the edits: {failed[:20]}"


def test_an_edit_inside_a_value_already_set_is_carried_by_that_value_not_repeated():
    doc = {"metadata": {}}
    edits = Edits(copy.deepcopy(doc))
    value = {"nested": [1]}
    edits.set(edits.doc["metadata"], ("metadata",), "x", value)
    edits.append(value["nested"], ("metadata", "x", "nested"), 2)
    assert edits.patch() == [{"op": "add", "path": "/metadata/x", "value": {"nested": [1, 2]}}]
    assert jsonpatch.apply_patch(doc, edits.patch()) == edits.doc


def test_no_edit_and_an_equal_value_give_no_patch_but_true_over_one_is_a_replace():
    doc = {"a": {"y": 1}, "c": True}
    edits = Edits(deep_copy(doc))
    edits.set(edits.doc["a"], ("a",), "y", 1)
    edits.set_default(edits.doc, (), "c", False)
    assert not edits.changed and edits.patch() is None
    edits.set(edits.doc["a"], ("a",), "y", True)
    assert edits.patch() == [{"op": "replace", "path": "/a/y", "value": True}]
    assert jsonpatch.apply_patch(doc, edits.patch())["a"]["y"] is True


def test_a_created_container_is_one_add_of_its_final_content():
    edits = Edits({"metadata": {}})
    labels = edits.container(edits.doc["metadata"], ("metadata",), "labels", dict)
    edits.set(labels, ("metadata", "labels"), "tau.azure.com/run-id", "r")
    edits.set_default(labels, ("metadata", "labels"), "kueue.x-k8s.io/queue-name", "q")
    assert edits.patch() == [{"op": "add", "path": "/metadata/labels",
                              "value": {"tau.azure.com/run-id": "r", "kueue.x-k8s.io/queue-name": "q"}}]


def test_label_keys_with_slash_and_tilde_are_escaped_by_the_pointer_library():
    assert pointer(("metadata", "labels", "tau.azure.com/run-id")) == "/metadata/labels/tau.azure.com~1run-id"
    assert pointer(("a~b", 0, "x/~y")) == "/a~0b/0/x~1~0y"
    doc = {"metadata": {"labels": {"a~b": "1"}}}
    edits = Edits(deep_copy(doc))
    edits.set(edits.doc["metadata"]["labels"], ("metadata", "labels"), "a~b/c", "2")
    assert jsonpatch.apply_patch(doc, edits.patch()) == edits.doc


def test_appends_to_an_existing_list_are_adds_at_their_indexes_in_order():
    doc = {"spec": {"volumes": [{"name": "a"}]}}
    edits = Edits(deep_copy(doc))
    volumes = edits.doc["spec"]["volumes"]
    edits.append(volumes, ("spec", "volumes"), {"name": "b"})
    edits.append(volumes, ("spec", "volumes"), {"name": "c"})
    assert [op["path"] for op in edits.patch()] == ["/spec/volumes/1", "/spec/volumes/2"]
    assert jsonpatch.apply_patch(doc, edits.patch()) == edits.doc
