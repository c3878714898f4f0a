from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from tests.crdschema import SAMPLES

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
IMAGE_CLASSIFIER = SAMPLES / "kuberay/ray-operator/config/samples/pytorch-resnet-image-classifier/ray-job.pytorch-image-classifier.yaml"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def state(settings):
    return load_snapshot(EXAMPLE_CLUSTER, settings)


@pytest.fixture(scope="session")
def engine(settings):
    from webhook.policy import load_policy_engine

    return load_policy_engine(settings.policy_dir)


@pytest.fixture
def classifier() -> dict:
    return yaml.safe_load(IMAGE_CLASSIFIER.read_text())
