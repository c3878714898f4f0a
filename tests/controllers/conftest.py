"""Fixtures for the controller tests: the example cluster (examples/cluster.yaml) cut down to a
small fixture (kmock slows with object count), settings, and the kmock API double."""

from __future__ import annotations

import copy

import pytest

from taugate.snapshot import read_objects
from tests.kubedouble import kube_double  # noqa: F401  (the API double fixture)
from tests.paths import EXAMPLE_CLUSTER, IMAGE_CLASSIFIER, REPO  # noqa: F401  (imported by the tests here)

SMALL_NODES = ("aks-h100-0", "aks-h100-3", "aks-a100-0")  # one healthy and one GpuXid-failing H100, one A100


@pytest.fixture(scope="session")
def _example_objects() -> list[dict]:
    return read_objects(EXAMPLE_CLUSTER)


@pytest.fixture
def example_objects(_example_objects) -> list[dict]:
    """Every object of examples/cluster.yaml (a fresh copy per test)."""
    return copy.deepcopy(_example_objects)


@pytest.fixture
def small_cluster(example_objects) -> list[dict]:
    """The example TauCluster, both workspaces and their Kueue objects, three nodes (11 objects)."""
    return [o for o in example_objects if o["kind"] != "Node" or o["metadata"]["name"] in SMALL_NODES]


def pick(objects: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of ``kind`` (and ``name``) in ``objects``."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def without(objects: list[dict], kind: str, name: str) -> list[dict]:
    return [o for o in objects if not (o["kind"] == kind and o["metadata"]["name"] == name)]


