"""Objects with one value nested far deeper than any Kubernetes object (issue 27 item 8, the
round-two reproducers): each shape puts the deep value where a field admission reads, formats,
hashes or hands to the policy engine lies, and the answer must be a denial naming that field
(``taugate.structure.object_depth_problem``), never a 500.

The JSON text is written by hand (``deep_json``): ``json.dumps`` itself recurses past Python's
limit at these depths, and orjson writes at most 255 levels."""

from __future__ import annotations

import json
from typing import Any

import pytest

from taugate.fieldpath import field_path as field  # noqa: F401  (imported by the tests)

DEEP = "__deep_value__"
"""Stands for the deep value in an object until ``deep_json`` writes it."""

WORKER = ("spec", "rayClusterSpec", "workerGroupSpecs", 0)
C0 = WORKER + ("template", "spec", "containers", 0)
HEAD_C0 = ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0)

SHAPES = [
    pytest.param(C0 + ("resources", "limits", "cpu"), id="limits-cpu"),
    pytest.param(C0 + ("resources", "limits", "nvidia.com/gpu"), id="limits-gpu"),
    pytest.param(C0 + ("resources", "requests", "memory"), id="requests-memory"),
    pytest.param(("metadata", "labels", "team"), id="label-value"),
    pytest.param(("metadata", "annotations", "example.com/notes"), id="annotation-value"),
    pytest.param(WORKER + ("rayStartParams", "num-gpus"), id="ray-start-params"),
    pytest.param(C0 + ("env",), id="env"),
    pytest.param(HEAD_C0 + ("env",), id="head-env"),
    pytest.param(WORKER + ("template", "metadata", "labels", "app"), id="template-label"),
    pytest.param(WORKER + ("template", "spec", "nodeSelector", "zone"), id="node-selector"),
    pytest.param(WORKER + ("template", "spec", "affinity"), id="affinity"),
    pytest.param(("spec", "entrypoint"), id="entrypoint"),
    pytest.param(("status",), id="status"),
]
"""Where the deep value goes in a RayJob (``tests/paths.py`` ``EXAMPLE_RAYJOB``)."""


def with_deep(obj: dict, path: tuple[Any, ...]) -> dict:
    """``obj`` (changed in place) with the placeholder ``DEEP`` at ``path``; missing maps are made."""
    here: Any = obj
    for p in path[:-1]:
        here = here.setdefault(p, {}) if isinstance(p, str) else here[p]
    here[path[-1]] = DEEP
    return obj


def deep_json(document: Any, levels: int = 1000) -> bytes:
    """``document`` as JSON with ``DEEP`` replaced by a value nested ``levels`` levels deep."""
    text = json.dumps(document)
    assert text.count(json.dumps(DEEP)) == 1, "the placeholder appears once"
    return text.replace(json.dumps(DEEP), '{"a":' * levels + '"1"' + "}" * levels).encode()
