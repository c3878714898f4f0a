"""Fixtures for the policy engine and library tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from taugate.settings import Settings
from taugate.snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
SHARED = REPO / ".." / "shared"
IMAGE_CLASSIFIER = (SHARED / "samples" / "kuberay" / "ray-operator" / "config" / "samples"
                    / "pytorch-resnet-image-classifier" / "ray-job.pytorch-image-classifier.yaml")


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def example_state(settings):
    return load_snapshot(EXAMPLE_CLUSTER, settings)


@pytest.fixture
def policy_copy(tmp_path) -> Path:
    """A writable copy of the repository's policy library (with examples/ beside it, so the
    default sample cluster resolves as in the repository)."""
    shutil.copytree(POLICIES, tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    return tmp_path / "policies"
