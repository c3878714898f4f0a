"""Fixtures for the controller tests: the example cluster (examples/cluster.yaml) cut down to a
small fixture (kmock slows with object count), settings, and the kmock API double."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from taugate.settings import Settings
from taugate.snapshot import read_objects
from tests.crdschema import SAMPLES
from tests.kubedouble import kube_double  # noqa: F401  (the API double fixture)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
IMAGE_CLASSIFIER = SAMPLES / "kuberay/ray-operator/config/samples/pytorch-resnet-image-classifier/ray-job.pytorch-image-classifier.yaml"
SMALL_NODES = ("aks-h100-0", "aks-h100-3", "aks-a100-0")  # one healthy and one GpuXid-failing H100, one A100


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


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


@pytest.fixture
def classifier() -> dict:
    """KubeRay's GPU image-classifier RayJob sample (4 workers x 1 GPU)."""
    return yaml.safe_load(IMAGE_CLASSIFIER.read_text())
