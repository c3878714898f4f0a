"""The evidence store: hash chain, Ed25519 signature, atomic writes, crash repair, the CLI."""

from __future__ import annotations

import json

import pytest

from taugate.cli import runs as recorder_commands
from taugate.controllers.recorder.evidence.records import (
    EVENTS_FILE,
    EVIDENCE_FILE,
    EvidenceError,
    EvidenceStore,
    Signer,
    fold,
    verify_record,
)
from tests.recorder import objects as o

RID = o.RUN_ID


def _cond(t, s, r, when="2026-11-29T10:00:00Z"):
    return {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": when,
            "source": {"kind": "Workload", "name": "wl", "namespace": o.NS}}


def _record(store: EvidenceStore) -> None:
    store.append(RID, [("run", {"runId": RID, "namespace": o.NS, "object": {"kind": "RayJob", "name": "train"},
                                "admission": o.admission_record(), "profile": "a100-4x", "workspace": "team-a",
                                "queue": "team-a-queue", "profileSetHash": "sha256:7c1e0b"}, "2026-11-29T10:00:00.1Z"),
                       ("condition", _cond("Admitted", "False", "Pending"), "2026-11-29T10:00:00.2Z")])
    store.append(RID, [("condition", _cond("Admitted", "True", "Admitted"), "2026-11-29T10:02:00.0Z"),
                       ("failure", {"key": "k1", "pod": "w-1", "reason": "OOMKilled", "exitCode": 137},
                        "2026-11-29T10:20:00Z")])


@pytest.fixture
def signer():
    return Signer.generate()


@pytest.fixture
def store(tmp_path, signer):
    s = EvidenceStore(tmp_path / "evidence", signer)
    _record(s)
    return s


def test_an_evidence_record_verifies_and_is_the_fold_of_its_events(store, signer):
    d = store.run_dir(RID)
    v = verify_record(d)
    assert v.ok and v.events == 4 and v.key_id == signer.key_id
    doc = json.loads((d / EVIDENCE_FILE).read_text())
    assert doc["admission"]["policyDigest"] == "sha256:0d9f3e" and doc["profileSetHash"] == "sha256:7c1e0b"
    assert [c["reason"] for c in doc["timeline"]] == ["Pending", "Admitted"]
    assert doc["conditions"][0]["status"] == "True" and doc["failures"][0]["reason"] == "OOMKilled"
    lines = (d / EVENTS_FILE).read_bytes().splitlines()
    assert json.loads(lines[0])["prev"] == "0" * 64
    import hashlib
    assert json.loads(lines[1])["prev"] == hashlib.sha256(lines[0]).hexdigest()
    assert doc["events"]["head"] == hashlib.sha256(lines[-1]).hexdigest()


def test_editing_any_byte_of_events_jsonl_makes_verify_fail(store):
    d = store.run_dir(RID)
    original = (d / EVENTS_FILE).read_bytes()
    line_of = [original[:i].count(b"\n") + 1 for i in range(len(original))]
    for i in range(len(original)):
        edited = bytearray(original)
        edited[i] = ord("x") if edited[i] != ord("x") else ord("y")
        (d / EVENTS_FILE).write_bytes(bytes(edited))
        v = verify_record(d)
        assert not v.ok, f"byte {i} edited, still verifies"
        # the first bad line is the edited one (a newline edit merges or splits lines around it)
        if original[i:i + 1] != b"\n":
            assert v.first_bad_line == line_of[i], (i, v.problems)
    (d / EVENTS_FILE).write_bytes(original)
    assert verify_record(d).ok


def test_a_byte_that_is_not_utf_8_in_events_jsonl_names_its_line_as_not_json(store):
    d = store.run_dir(RID)
    lines = (d / EVENTS_FILE).read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"Admitted", b"Admitt\xffd", 1)
    (d / EVENTS_FILE).write_bytes(b"\n".join(lines))
    v = verify_record(d)
    assert not v.ok and v.first_bad_line == 3
    assert v.problems[0].startswith("events.jsonl line 3: not JSON (") and "utf-8" in v.problems[0], v.problems


def test_editing_any_byte_of_evidence_json_makes_verify_fail(store):
    d = store.run_dir(RID)
    original = (d / EVIDENCE_FILE).read_bytes()
    for i in range(len(original)):
        edited = bytearray(original)
        edited[i] = ord(" ") if edited[i] != ord(" ") else ord("\t")
        (d / EVIDENCE_FILE).write_bytes(bytes(edited))
        assert not verify_record(d).ok, f"byte {i} edited, still verifies"
    (d / EVIDENCE_FILE).write_bytes(original)
    assert verify_record(d).ok


def test_dropping_the_last_event_or_re_signing_with_another_key_is_detected(store, signer, tmp_path):
    d = store.run_dir(RID)
    raw = (d / EVENTS_FILE).read_bytes()
    (d / EVENTS_FILE).write_bytes(raw[: raw[:-1].rfind(b"\n") + 1])
    v = verify_record(d)
    assert not v.ok and v.first_bad_line == 3 and "head" in v.problems[0]
    (d / EVENTS_FILE).write_bytes(raw)
    # a forger rebuilds the record with their own key: it verifies on its own, not against the pinned key
    forged = EvidenceStore(tmp_path / "forged", Signer.generate())
    _record(forged)
    assert verify_record(forged.run_dir(RID)).ok
    v = verify_record(forged.run_dir(RID), signer._key.public_key())
    assert not v.ok and "not by the given public key" in v.problems[0]


def test_a_crash_between_the_log_and_the_summary_is_repaired_and_nothing_is_written_twice(tmp_path, signer):
    root = tmp_path / "evidence"
    s1 = EvidenceStore(root, signer)
    _record(s1)
    d = s1.run_dir(RID)
    stale_summary = (d / EVIDENCE_FILE).read_bytes()
    s1.append(RID, [("condition", _cond("Scheduled", "True", "AllPodsBound"), "2026-11-29T10:03:00Z")])
    (d / EVIDENCE_FILE).write_bytes(stale_summary)          # the crash: the log is newer than the summary
    with open(d / EVENTS_FILE, "ab") as f:                   # and an append torn half-way
        f.write(b'{"data":{"type":"Progress')
    assert not verify_record(d).ok
    s2 = EvidenceStore(root, signer)                         # the restarted recorder
    rec = s2.load(RID)
    assert len(rec.events) == 5 and verify_record(d).ok
    assert [c["type"] for c in rec.state()["timeline"]] == ["Admitted", "Admitted", "Scheduled"]
    assert sorted(p.name for p in d.iterdir()) == [EVENTS_FILE, EVIDENCE_FILE]  # no temporary file left


def test_a_tampered_log_is_never_written_on_top_of(store, signer):
    d = store.run_dir(RID)
    raw = (d / EVENTS_FILE).read_bytes()
    (d / EVENTS_FILE).write_bytes(raw.replace(b"OOMKilled", b"Completed"))
    with pytest.raises(EvidenceError, match="line 4"):
        EvidenceStore(store.root, signer).load(RID)


def test_the_fold_is_deterministic_and_keys_load_from_pem_or_raw_seed(tmp_path, signer):
    rec = EvidenceStore(tmp_path, signer)
    _record(rec)
    events = rec.load(RID).events
    assert fold(events) == fold(json.loads(json.dumps(events)))
    pem = tmp_path / "key.pem"
    pem.write_bytes(signer.private_pem())
    assert Signer.from_file(pem).key_id == signer.key_id
    with pytest.raises(EvidenceError, match="not a PEM private key"):
        Signer.from_pem(b"-----BEGIN NONSENSE-----\n", "x.pem")
    with pytest.raises(EvidenceError, match="not a run-id"):
        rec.run_dir("../../etc")


# ------------------------------------------------------------------------- the CLI


def test_evidence_verify_exits_0_when_intact_and_1_with_the_first_bad_line_when_tampered(store, signer, tmp_path,
                                                                                         capsys):
    root = str(store.root)
    pub = tmp_path / "pub.pem"
    pub.write_bytes(signer.public_pem())
    assert recorder_commands.main(["evidence", "verify", RID, "--evidence-root", root, "--public-key", str(pub)]) == 0
    assert "OK" in capsys.readouterr().out
    d = store.run_dir(RID)
    raw = (d / EVENTS_FILE).read_bytes()
    (d / EVENTS_FILE).write_bytes(raw.replace(b'"Pending"', b'"Pendinx"'))
    assert recorder_commands.main(["evidence", "verify", RID, "--evidence-root", root]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED") and "events.jsonl line 2" in out


def test_evidence_commands_reject_bad_input_with_one_line_and_exit_2(tmp_path, capsys):
    assert recorder_commands.main(["evidence", "verify", "not-a-run", "--evidence-root", str(tmp_path)]) == 2
    assert recorder_commands.main(["evidence", "verify", RID, "--evidence-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a run-id" in err[0] and "missing" in err[1]
    bad = tmp_path / "bad.pem"
    bad.write_text("garbage")
    assert recorder_commands.main(["evidence", "verify", RID, "--evidence-root", str(tmp_path), "--public-key",
                                   str(bad)]) == 2


def test_evidence_show_prints_the_admission_changes_timeline_and_failures(store, capsys):
    assert recorder_commands.main(["evidence", "show", RID, "--evidence-root", str(store.root)]) == 0
    out = capsys.readouterr().out
    for text in ("RayJob team-a/train", "policyDigest: sha256:0d9f3e", "workspace queue", "gpu-per-pod-fits-node",
                 "Admitted", "OOMKilled (exit code 137)", "Signed: Ed25519"):
        assert text in out
    assert recorder_commands.main(["evidence", "show", RID, "--evidence-root", str(store.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runId"] == RID


def test_status_from_an_evidence_record_shows_the_six_states_and_the_stage(store, capsys):
    assert recorder_commands.main(["status", RID, "--evidence-root", str(store.root)]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[1] for line in out.splitlines() if line[:3].strip().isdigit()]
    assert rows == ["Admitted", "Scheduled", "GPUHealthy", "Progressing", "Completed", "ArtifactSaved"]
    assert "Stage: Scheduled" in out
    assert recorder_commands.main(["status", "train", "--evidence-root", str(store.root)]) == 0


def test_keygen_writes_a_usable_key_and_never_overwrites(tmp_path, capsys):
    key = tmp_path / "k.pem"
    assert recorder_commands.main(["evidence", "keygen", "--out", str(key), "--public-out",
                                   str(tmp_path / "p.pem")]) == 0
    assert Signer.from_file(key).key_id in capsys.readouterr().out
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert recorder_commands.main(["evidence", "keygen", "--out", str(key)]) == 2


def test_the_filesystem_probe_reads_metrics_incrementally_and_lists_artifacts_with_hashes(tmp_path):
    from taugate.controllers.recorder.config import FilesystemProbe, RecorderConfig

    probe = FilesystemProbe(RecorderConfig(data_root=tmp_path, run_path="{namespace}/runs/{run_id}"))
    d = tmp_path / o.NS / "runs" / RID
    assert probe.metrics(o.NS, RID) is None and probe.artifacts(o.NS, RID).files == ()
    d.mkdir(parents=True)
    m = d / "metrics.jsonl"
    m.write_text('{"step": 1}\n{"step": 2}\n{"step": 3')          # the last line is still being written
    assert (probe.metrics(o.NS, RID).records, probe.metrics(o.NS, RID).step) == (2, 2.0)
    with m.open("a") as f:
        f.write('}\n{"step": 4}\n')
    s = probe.metrics(o.NS, RID)
    assert (s.records, s.step, s.source) == (4, 4.0, {"kind": "File", "path": str(m)})
    m.write_text('{"step": 1}\n')                                   # replaced: read again
    assert probe.metrics(o.NS, RID).records == 1
    (d / "outputs" / "ckpt").mkdir(parents=True)
    (d / "outputs" / "ckpt" / "model.pt").write_bytes(b"abc")
    (d / "outputs" / ".model.pt.tmp").write_bytes(b"partial")
    listing = probe.artifacts(o.NS, RID, with_hashes=True)
    assert listing.files == ({"path": "ckpt/model.pt", "size": 3,
                              "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},)
    escaping = FilesystemProbe(RecorderConfig(data_root=tmp_path, run_path="../{run_id}"))
    assert escaping.metrics(o.NS, RID) is None
