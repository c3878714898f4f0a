"""Fixtures of the recorder tests: kmock's Kubernetes emulator, an evidence signing key and the
recorder's configuration under the test's temporary directory."""

from __future__ import annotations

import pytest

from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import Signer
from tests.kubedouble import KubeDouble


@pytest.fixture
def kube():
    with KubeDouble() as k:
        yield k


@pytest.fixture
def key(tmp_path) -> Signer:
    signer = Signer.generate()
    (tmp_path / "ed25519.pem").write_bytes(signer.private_pem())
    return signer


@pytest.fixture
def config(tmp_path, key) -> RecorderConfig:
    return RecorderConfig(evidence_root=tmp_path / "evidence", data_root=tmp_path / "data",
                          signing_key_file=tmp_path / "ed25519.pem", poll_seconds=0.1, stall_seconds=30,
                          artifact_grace_seconds=30, log_pattern=r"\bstep[=: ]+(\d+)")
