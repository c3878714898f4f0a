"""Fixtures for the policy engine and library tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.kubedouble import kube_double  # noqa: F401  (the API double fixture, for what-if on a live API)
from tests.paths import EXAMPLE_CLUSTER, IMAGE_CLASSIFIER, POLICIES, REPO  # noqa: F401  (used by the tests here)


@pytest.fixture
def policy_copy(tmp_path) -> Path:
    """A writable copy of the repository's policy library (with examples/ beside it, so the
    default sample cluster resolves as in the repository)."""
    shutil.copytree(POLICIES, tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    return tmp_path / "policies"


@pytest.fixture(scope="module")
def sample_inputs() -> list[dict]:
    """Every policy input the policy library's samples produce through admission (``taugate policy
    test``'s code path, embedded engine), in sample order."""
    from taugate.webhook.policy.engine import EmbeddedPolicyEngine, PolicyStore, RecordingEngine
    from taugate.webhook.policy_tests import run_policy_tests

    recorders: list[RecordingEngine] = []

    def factory(ps):
        rec = RecordingEngine(EmbeddedPolicyEngine(PolicyStore(POLICIES)))
        recorders.append(rec)
        return rec

    assert run_policy_tests(POLICIES, engine_factory=factory).ok
    return [doc for rec in recorders for doc in rec.inputs]

