"""The JSONPatch taugate answers turns the original into the edited object, exactly, for any
edit: applied with the jsonpatch library the result equals the edited document."""

from __future__ import annotations

import copy
import random

import jsonpatch
import pytest
import yaml

from tests.paths import SAMPLES
from webhook.patching import make_patch


def _edits(doc: dict, rnd: random.Random) -> dict:
    out = copy.deepcopy(doc)
    nodes = []

    def walk(x):
        if isinstance(x, dict):
            nodes.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            nodes.append(x)
            for v in x:
                walk(v)

    walk(out)
    for _ in range(6):
        n = rnd.choice(nodes)
        if isinstance(n, dict):
            choice = rnd.randrange(4)
            if choice == 0 or not n:
                n[f"k/~{rnd.randrange(9)}"] = {"added": [1, 2]}
            elif choice == 1:
                n.pop(rnd.choice(list(n)))
            elif choice == 2:
                n[rnd.choice(list(n))] = True
            else:
                n[rnd.choice(list(n))] = 1
        else:
            choice = rnd.randrange(3)
            if choice == 0 or not n:
                n.insert(rnd.randrange(len(n) + 1), {"inserted": rnd.randrange(100)})
            elif choice == 1:
                n.pop(rnd.randrange(len(n)))
            else:
                n.append(0)
    return out


DOCS = [d for p in sorted((SAMPLES / "kuberay/ray-operator/config/samples").glob("ray-job*.yaml"))
        for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)]


@pytest.mark.parametrize("seed", range(40))
def test_the_patch_of_any_edit_reproduces_the_edited_document(seed):
    rnd = random.Random(seed)
    doc = DOCS[seed % len(DOCS)]
    edited = _edits(doc, rnd)
    patch = make_patch(doc, edited)
    assert jsonpatch.apply_patch(doc, patch) == edited
    result = jsonpatch.apply_patch(doc, patch)
    assert [type(x) for x in _leaves(result)] == [type(x) for x in _leaves(edited)]


def _leaves(x):
    if isinstance(x, dict):
        for k in sorted(x):
            yield from _leaves(x[k])
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


def test_equal_documents_give_an_empty_patch_and_true_is_not_one():
    doc = {"a": {"x": [1, {"b": 1}], "y": 1}, "c": True}
    assert make_patch(doc, copy.deepcopy(doc)) == []
    patch = make_patch(doc, {"a": {"x": [1, {"b": 1}], "y": True}, "c": 1})
    assert {op["path"] for op in patch} == {"/a/y", "/c"}
    assert jsonpatch.apply_patch(doc, patch)["a"]["y"] is True
