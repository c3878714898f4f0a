"""Fixtures every test folder shares: settings, the example cluster state, the policy engine
over the shipped library, and KubeRay's GPU image-classifier sample."""

from __future__ import annotations

import pytest
import yaml

from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from tests.paths import EXAMPLE_CLUSTER, IMAGE_CLASSIFIER


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def example_state(settings):
    """``examples/cluster.yaml`` as a ClusterState."""
    return load_snapshot(EXAMPLE_CLUSTER, settings)


@pytest.fixture(scope="session")
def engine(settings):
    """The embedded policy engine over ``policies/``."""
    from taugate.webhook.engines import load_policy_engine

    return load_policy_engine(settings.policy_dir)


@pytest.fixture
def classifier() -> dict:
    """KubeRay's GPU image-classifier RayJob sample (4 workers x 1 GPU, generateName)."""
    return yaml.safe_load(IMAGE_CLASSIFIER.read_text())


@pytest.fixture(scope="session")
def opa_binary():
    """The real ``opa`` binary, built from tests/e2e/gomod/opa by tests/e2e/build.sh (cached)."""
    from tests.opa_server import opa_binary

    return opa_binary()


@pytest.fixture
def opa_server(opa_binary, tmp_path):
    """A real ``opa run --server`` on a free loopback port (``tests.opa_server.OpaServer``)."""
    from tests.opa_server import OpaServer

    server = OpaServer(opa_binary, tmp_path).start()
    yield server
    server.stop()
