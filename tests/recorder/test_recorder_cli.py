"""The recorder's CLI on broken or tampered records, without a cluster, and as ``kubectl tau``.

A record that exists but is broken (malformed, edited, a file removed) is tampering or
corruption: exit 1 with the reason, never a traceback. No record, no kubeconfig: bad input, exit 2.
"""

from __future__ import annotations

import json

import pytest

from taugate.cli import kubectl_plugin
from taugate.cli import runs as recorder_commands
from taugate.controllers.recorder.evidence.records import EVENTS_FILE, EVIDENCE_FILE, EvidenceStore, Signer
from tests.recorder import objects as o
from tests.recorder.test_evidence import _record

RID = o.RUN_ID
WARNING = "WARNING: this evidence record does not verify: "


@pytest.fixture
def store(tmp_path):
    s = EvidenceStore(tmp_path / "evidence", Signer.generate())
    _record(s)
    return s


def _run(argv, capsys):
    code = recorder_commands.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("content", ["[1,2]", "null", "5", '"text"', "not json"])
def test_an_evidence_json_that_is_not_an_object_is_reported_as_not_verifying_in_one_line(store, capsys, content):
    (store.run_dir(RID) / EVIDENCE_FILE).write_text(content)
    root = str(store.root)
    for argv in (["evidence", "show", RID, "--evidence-root", root], ["status", RID, "--evidence-root", root]):
        code, out, err = _run(argv, capsys)
        assert code == 1, (argv, out, err)
        assert out.splitlines() == [out.strip()] and out.startswith(WARNING) and EVIDENCE_FILE in out, (argv, out)
        assert "Traceback" not in err
    code, out, _ = _run(["evidence", "verify", RID, "--evidence-root", root], capsys)
    assert code == 1 and out.startswith("TAMPERED") and EVIDENCE_FILE in out


def test_wrong_typed_fields_in_evidence_json_are_shown_under_a_warning_without_a_crash(store, capsys):
    (store.run_dir(RID) / EVIDENCE_FILE).write_text(json.dumps(
        {"events": 5, "signature": [], "object": "x", "admission": [1],
         "timeline": [3, {"type": ["a"], "status": None}],
         "failures": ["oom", {"pod": "w-1", "reason": "OOMKilled"}], "artifacts": {"files": [7]},
         "conditions": {"a": 1}}))
    root = str(store.root)
    code, out, _ = _run(["evidence", "show", RID, "--evidence-root", root], capsys)
    assert code == 1 and out.startswith(WARNING) and "pod w-1: OOMKilled" in out and "Signed: None" in out
    code, out, _ = _run(["status", RID, "--evidence-root", root], capsys)
    assert code == 1 and out.startswith(WARNING) and "failure: pod w-1: OOMKilled" in out
    code, out, err = _run(["status", RID, "--evidence-root", root, "-o", "json"], capsys)
    assert code == 1 and err.startswith(WARNING) and json.loads(out)["evidence"]["verified"] is False


def test_a_signed_record_with_oddly_typed_event_data_verifies_and_shows_without_a_crash(tmp_path, capsys):
    s = EvidenceStore(tmp_path, Signer.generate())
    s.append(RID, [("run", {"runId": RID, "object": 5, "admission": {"changes": "x", "decisions": [1]}}, "t0"),
                   ("condition", {"type": ["Admitted"], "status": None, "reason": 3, "source": "node"}, "t1"),
                   ("failure", {"pod": None, "exitCode": "x"}, "t2"), ("artifacts", {"files": [None]}, "t3")])
    for argv in (["evidence", "verify", RID], ["evidence", "show", RID], ["status", RID]):
        code, out, err = _run(argv + ["--evidence-root", str(tmp_path)], capsys)
        assert code == 0 and "WARNING" not in out and not err, (argv, out, err)
    code, out, _ = _run(["evidence", "show", RID, "--evidence-root", str(tmp_path)], capsys)
    assert "['Admitted']" in out and "exit code x" in out


def test_verify_names_the_first_edited_line_even_when_the_final_newline_is_also_missing(store, capsys):
    p = store.run_dir(RID) / EVENTS_FILE
    raw = p.read_bytes()
    assert raw.count(b"\n") == 4 and raw.splitlines()[1].count(b'"Pending"') == 1
    p.write_bytes(raw.replace(b'"Pending"', b'"Pendinx"')[:-1])
    code, out, _ = _run(["evidence", "verify", RID, "--evidence-root", str(store.root)], capsys)
    assert code == 1 and "events.jsonl line 2: content does not match" in out
    p.write_bytes(raw[:-1])                      # only the newline dropped: the tail is the first bad line
    code, out, _ = _run(["evidence", "verify", RID, "--evidence-root", str(store.root)], capsys)
    assert code == 1 and "events.jsonl line 4: incomplete (no newline at end)" in out


@pytest.mark.parametrize("name", [EVENTS_FILE, EVIDENCE_FILE])
def test_deleting_a_file_of_an_existing_record_is_tampering_and_exits_1(store, capsys, name):
    (store.run_dir(RID) / name).unlink()
    root = str(store.root)
    code, out, err = _run(["evidence", "verify", RID, "--evidence-root", root], capsys)
    assert (code, err) == (1, "") and f"{name}: missing from the record" in out
    for argv in (["evidence", "show", RID, "--evidence-root", root], ["status", RID, "--evidence-root", root]):
        code, out, err = _run(argv, capsys)
        assert code == 1 and out.startswith(f"{WARNING}{name}: missing from the record"), (argv, out, err)
    # no record directory at all is still bad input
    code, _, err = _run(["evidence", "verify", "0" * 24, "--evidence-root", root], capsys)
    assert code == 2 and err.count("\n") == 1 and "no evidence record" in err


def test_an_empty_event_log_is_reported_as_empty(store, capsys):
    (store.run_dir(RID) / EVENTS_FILE).write_bytes(b"")
    code, out, _ = _run(["evidence", "verify", RID, "--evidence-root", str(store.root)], capsys)
    assert code == 1 and "events.jsonl: the log is empty" in out and "line 0" not in out


def test_show_and_status_verify_first_and_warn_about_an_edited_record_with_exit_1(store, capsys):
    p = store.run_dir(RID) / EVIDENCE_FILE
    root = str(store.root)
    for argv in (["evidence", "show", RID, "--evidence-root", root], ["status", RID, "--evidence-root", root]):
        code, out, _ = _run(argv, capsys)
        assert code == 0 and "WARNING" not in out
    p.write_text(p.read_text().replace('"queue": "team-a-queue"', '"queue": "other-queue"'))
    code, out, _ = _run(["evidence", "show", RID, "--evidence-root", root], capsys)
    lines = out.splitlines()
    assert code == 1 and lines[0] == f"{WARNING}evidence.json: content does not match its signed digest (edited)"
    assert "  queue: other-queue" in lines and lines[-1].startswith("Signed: Ed25519")
    code, out, _ = _run(["status", RID, "--evidence-root", root], capsys)
    assert code == 1 and out.startswith(WARNING) and "Stage: Scheduled" in out
    code, out, err = _run(["evidence", "show", RID, "--evidence-root", root, "--json"], capsys)
    assert code == 1 and err.startswith(WARNING) and json.loads(out)["queue"] == "other-queue"


def test_status_without_a_kubeconfig_or_a_cluster_says_so_and_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out, err = _run(["status", "train"], capsys)
    assert code == 2 and not out and err.count("\n") == 1
    assert (f"{tmp_path / '.kube' / 'config'} (from the default kubeconfig): the kubeconfig file does not exist, and "
            "not running in a cluster; pass --kubeconfig FILE, or --evidence-root DIR") in err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kc.yaml"))
    code, _, err = _run(["status", "train"], capsys)
    assert code == 2 and f"{tmp_path / 'kc.yaml'} (from $KUBECONFIG): the kubeconfig file does not exist" in err
    (tmp_path / "kc.yaml").write_text("clusters: [")
    code, _, err = _run(["status", "train", "--kubeconfig", str(tmp_path / "kc.yaml")], capsys)
    assert code == 2 and err.count("\n") == 1 and "kc.yaml: invalid YAML at line 1" in err


def test_kubectl_tau_is_named_kubectl_tau_and_offers_only_the_run_commands(capsys):
    with pytest.raises(SystemExit) as e:
        kubectl_plugin(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: kubectl tau ")
    commands = {line.split()[0] for line in out.split("  COMMAND\n", 1)[1].split("\n\n")[0].splitlines()}
    assert commands == {"status", "evidence"}
    with pytest.raises(SystemExit):
        kubectl_plugin(["status", "--help"])
    assert capsys.readouterr().out.startswith("usage: kubectl tau status ")
    assert kubectl_plugin([]) == 2
