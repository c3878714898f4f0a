"""``taugate snapshot export`` writes the live state as the file ``taugate admit`` reads; the
controllers' commands fail in one line on bad input."""

from __future__ import annotations

import copy

import yaml

from taugate.cli import main
from taugate.settings import Settings
from taugate.snapshot import build_state, load_snapshot
from tests.controllers.conftest import IMAGE_CLASSIFIER, pick


def _kubeconfig(tmp_path, server: str, token: str = "export-token") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "double", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "exporter", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "double", "user": "exporter"}}]}))
    return str(path)


def test_snapshot_export_writes_the_live_state_that_admit_reads(kube_double, small_cluster, tmp_path, capsys):
    live = copy.deepcopy(small_cluster)
    node = pick(live, "Node", "aks-h100-0")
    node["metadata"].update(uid="1b2c", resourceVersion="4711", creationTimestamp="2026-01-01T00:00:00Z",
                            managedFields=[{"manager": "kubelet"}])
    kube_double.apply(live)
    out = tmp_path / "cluster.yaml"
    before = kube_double.request_count()
    assert main(["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, kube_double.url), "-o", str(out)]) == 0
    # the export read the API with the kubeconfig's credentials and wrote nothing
    assert kube_double.writes(before) == []
    sent = kube_double.call(lambda: [r.headers.get("Authorization") for i, r in enumerate(kube_double.emulator)
                                     if i >= before])
    assert sent and set(sent) == {"Bearer export-token"}

    text = out.read_text()
    assert text.startswith("# taugate cluster snapshot exported from")
    docs = [d for d in yaml.safe_load_all(text) if d]
    exported_node = pick(docs, "Node", "aks-h100-0")
    assert not {"uid", "resourceVersion", "creationTimestamp", "managedFields"} & set(exported_node["metadata"])
    assert exported_node["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    settings = Settings()
    exported, original = load_snapshot(out, settings), build_state(small_cluster, settings)
    assert exported.gpu_classes == original.gpu_classes
    assert exported.queue_quotas == original.queue_quotas
    assert sorted(exported.workspaces) == sorted(original.workspaces) == ["nlp", "vision"]
    assert {n: p.is_ready() for n, p in exported.profiles.items()} == {n: p.is_ready() for n, p in original.profiles.items()}

    capsys.readouterr()
    assert main(["admit", "-f", str(IMAGE_CLASSIFIER), "--cluster", str(out), "-n", "vision"]) == 0


def test_snapshot_export_to_standard_output(kube_double, small_cluster, tmp_path, capsys):
    kube_double.apply(small_cluster)
    assert main(["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, kube_double.url)]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert kinds[:3] == ["TauCluster", "TauWorkspace", "TauWorkspace"] and kinds.count("Node") == 3


def test_an_unreachable_api_server_fails_the_export_in_one_line(tmp_path, capsys):
    code = main(["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, "http://127.0.0.1:9"),
                 "-o", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "127.0.0.1:9" in err
    assert not (tmp_path / "out.yaml").exists()  # nothing half-written


def test_a_bad_kubeconfig_or_output_directory_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "broken-kubeconfig"
    bad.write_text("this: [is not a kubeconfig\n")
    for argv in (["snapshot", "export", "--kubeconfig", str(bad)],
                 ["operator", "--kubeconfig", str(tmp_path / "missing")],
                 ["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, "http://127.0.0.1:9"),
                  "-o", str(tmp_path / "no-such-dir" / "out.yaml")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("taugate: "), err
        assert str(tmp_path) in err
