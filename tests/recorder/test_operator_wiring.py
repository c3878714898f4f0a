"""`taugate operator` runs the recorder only with a signing key: evidence is never unsigned."""

from __future__ import annotations

import argparse

from taugate.cli import main
from taugate.cli.operator import recorder_config


def _args(**kw):
    base = dict(record=None, evidence_root=None, data_root=None, signing_key_file=None, signing_key_secret=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_recorder_is_off_without_a_key_and_on_with_one(tmp_path, monkeypatch):
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_SECRET", raising=False)
    assert recorder_config(_args()) is None
    key = tmp_path / "k.pem"
    config = recorder_config(_args(signing_key_file=key, evidence_root=tmp_path / "ev"))
    assert config.signing_key_file == key and config.evidence_root == tmp_path / "ev"
    assert recorder_config(_args(signing_key_file=key, record=False)) is None


def test_asking_for_the_recorder_without_a_key_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_SECRET", raising=False)
    assert main(["operator", "--record"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "signing key" in err
