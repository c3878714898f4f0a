"""`taugate operator` runs the recorder only with a signing key: evidence is never unsigned."""

from __future__ import annotations

import argparse

from taugate.cli import main
from taugate.cli.operator import recorder_config


def _args(**kw):
    base = dict(record=None, evidence_root=None, data_root=None, signing_key_file=None, signing_key_secret=None,
                evidence_retention=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_recorder_is_off_without_a_key_and_on_with_one(tmp_path, monkeypatch):
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_SECRET", raising=False)
    assert recorder_config(_args()) is None
    key = tmp_path / "k.pem"
    config = recorder_config(_args(signing_key_file=key, evidence_root=tmp_path / "ev"))
    assert config.signing_key_file == key and config.evidence_root == str(tmp_path / "ev")
    assert recorder_config(_args(signing_key_file=key, record=False)) is None


def test_asking_for_the_recorder_without_a_key_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("TAUGATE_RECORDER_SIGNING_KEY_SECRET", raising=False)
    assert main(["operator", "--record"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "signing key" in err


def test_an_s3_evidence_root_and_its_retention_reach_the_recorder(tmp_path, monkeypatch):
    key = tmp_path / "k.pem"
    config = recorder_config(_args(signing_key_file=key, evidence_root="s3://acme-evidence/prod",
                                   evidence_retention="compliance:2555"))
    assert (config.evidence_root, config.retention.mode, config.retention.days) == (
        "s3://acme-evidence/prod", "COMPLIANCE", 2555)
    assert config.storage().location("ab" * 12) == f"s3://acme-evidence/prod/{'ab' * 12}/"


def test_a_bad_evidence_root_or_retention_is_one_line_naming_it_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TAUGATE_RECORDER_SIGNING_KEY_FILE", str(tmp_path / "k.pem"))
    cases = {
        ("--evidence-root=s3://Not_A_Bucket/x",): "s3://Not_A_Bucket/x: not an S3 location; expected s3://BUCKET",
        ("--evidence-root=s3://acme-evidence", "--evidence-retention=FOREVER"):
            "--evidence-retention 'FOREVER': expected COMPLIANCE:DAYS or GOVERNANCE:DAYS",
        ("--evidence-root=s3://acme-evidence", "--evidence-retention=GOVERNANCE:0"):
            "--evidence-retention 'GOVERNANCE:0': expected",
        (f"--evidence-root={tmp_path}", "--evidence-retention=GOVERNANCE:30"):
            "evidence_retention_mode GOVERNANCE needs an s3:// evidence root",
    }
    for args, expected in cases.items():
        assert main(["operator", "--record", *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, (args, err)
