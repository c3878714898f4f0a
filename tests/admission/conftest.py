from __future__ import annotations

import pytest

from tests.paths import EXAMPLE_CLUSTER, IMAGE_CLASSIFIER, REPO  # noqa: F401  (imported by the tests here)


@pytest.fixture(scope="session")
def state(example_state):
    """The example cluster state (``examples/cluster.yaml``)."""
    return example_state
