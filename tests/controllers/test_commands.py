"""``taugate snapshot export`` writes the live state as the file ``taugate admit`` reads; the
controllers' commands fail in one line on bad input."""

from __future__ import annotations

import copy
import os
import socket
import stat
import time
from pathlib import Path

import pytest
import yaml

from taugate.cli import main
from taugate.settings import Settings
from taugate.snapshot import build_state, load_snapshot
from tests.controllers.conftest import IMAGE_CLASSIFIER, pick
from tests.paths import REPO


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
    def readiness(state):
        return {n: p.is_ready() for n, p in state.profiles.items()}

    assert readiness(exported) == readiness(original)

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


# -- preflight, flags and files checked before anything starts ---------------------------------

def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released): connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_recorder_env(monkeypatch):
    for name in ("TAUGATE_RECORDER_SIGNING_KEY_FILE", "TAUGATE_RECORDER_SIGNING_KEY_SECRET",
                 "TAUGATE_RECORDER_EVIDENCE_ROOT"):
        monkeypatch.delenv(name, raising=False)


def test_an_unreachable_api_server_stops_the_operator_in_one_line_before_kopf_starts(tmp_path, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    assert main(["operator", "--kubeconfig", _kubeconfig(tmp_path, url)]) == 1
    assert time.monotonic() - started < 10  # kopf's retries took about a minute
    assert capsys.readouterr().err == f"taugate: cannot reach the Kubernetes API at {url}: Connection refused\n"


def test_the_operator_and_the_export_say_the_same_about_an_unreachable_server(tmp_path, capsys):
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    assert main(["operator", "--kubeconfig", kubeconfig]) == 1
    operator_err = capsys.readouterr().err
    assert main(["snapshot", "export", "--kubeconfig", kubeconfig]) == 1
    assert capsys.readouterr().err == operator_err


def test_the_preflight_is_a_single_version_request_to_a_reachable_server(kube_double):
    from taugate.kube import check_reachable

    before = kube_double.request_count()
    assert check_reachable(kube_double.configuration)["gitVersion"].startswith("v1.")
    assert [(m, p) for m, p, _ in kube_double.request_log(before)] == [("GET", "/version")]


@pytest.mark.parametrize("url, why", [
    ("notaurl", "not an http:// URL"),
    ("https://0.0.0.0:8080/healthz", "https is not supported"),
    ("http://0.0.0.0/healthz", "no port"),
    ("http://0.0.0.0:99999/healthz", "no port"),
    ("http://:8080/healthz", "no host"),
    ("http://0.0.0.0:8080", "no path"),
])
def test_the_operator_refuses_a_liveness_url_kopf_cannot_serve_with_exit_2(tmp_path, capsys, url, why):
    # Exit 2 (not the unreachable server's 1): the flag is checked before anything else.
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    assert main(["operator", "--kubeconfig", kubeconfig, "--liveness", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"taugate: --liveness {url!r}: {why}")


def test_the_charts_liveness_url_is_accepted():
    from taugate.cli.operator import liveness_problem

    assert liveness_problem("http://0.0.0.0:8080/healthz") is None


def test_the_operator_refuses_an_evidence_root_it_cannot_create_with_exit_2(tmp_path, capsys, no_recorder_env):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    root = blocker / "evidence"
    code = main(["operator", "--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}"),
                 "--signing-key-file", str(tmp_path / "key.pem"), "--evidence-root", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"taugate: {root}: the evidence directory cannot be created or written")


def test_the_operator_creates_a_missing_evidence_root_and_leaves_no_probe_file(tmp_path, capsys, no_recorder_env):
    root = tmp_path / "volume" / "evidence"
    # The unreachable server (exit 1) shows the evidence check passed and came first.
    code = main(["operator", "--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}"),
                 "--signing-key-file", str(tmp_path / "key.pem"), "--evidence-root", str(root)])
    assert code == 1 and "cannot reach the Kubernetes API" in capsys.readouterr().err
    assert root.is_dir() and list(root.iterdir()) == []


def test_without_the_recorder_the_evidence_root_is_not_touched(tmp_path, capsys, no_recorder_env):
    root = tmp_path / "evidence"
    main(["operator", "--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}"),
          "--evidence-root", str(root)])
    assert not root.exists()


def test_snapshot_export_through_a_symbolic_link_writes_the_file_it_points_to(kube_double, small_cluster,
                                                                              tmp_path, capsys):
    kube_double.apply(small_cluster)
    target = tmp_path / "real" / "cluster.yaml"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "cluster.yaml"
    link.symlink_to(target)
    assert main(["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, kube_double.url), "-o", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text().startswith("# taugate cluster snapshot exported from")


@pytest.mark.parametrize("make", ["fifo", "directory", "link to a fifo"])
def test_snapshot_export_refuses_an_output_that_is_not_a_regular_file(tmp_path, capsys, make):
    special = tmp_path / "special"
    if make == "directory":
        special.mkdir()
    else:
        os.mkfifo(special)
    out = special
    if make == "link to a fifo":
        out = tmp_path / "link"
        out.symlink_to(special)
    # Checked before the API is reached: exit 2, not the unreachable server's 1.
    code = main(["snapshot", "export", "--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}"),
                 "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"taugate: {out}: exists and is not a regular file")
    assert special.is_dir() if make == "directory" else stat.S_ISFIFO(special.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"kubeconfig", "special", out.name})


def test_the_atomic_export_write_never_renames_over_a_fifo(tmp_path):
    from taugate.controllers.export import write_atomically

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomically(fifo, "x: 1\n")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["fifo"]


def test_a_missing_kubeconfig_is_named_and_said_to_not_exist(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "kc"
    for command in (["operator"], ["snapshot", "export"]):
        assert main([*command, "--kubeconfig", str(missing)]) == 2
        assert capsys.readouterr().err == f"taugate: {missing}: the kubeconfig file does not exist\n"


def test_a_missing_kubeconfig_from_the_environment_is_named_with_its_source(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "env-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert main(["snapshot", "export"]) == 2
    assert capsys.readouterr().err == f"taugate: {missing} (from $KUBECONFIG): the kubeconfig file does not exist\n"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["operator"]) == 2
    default = tmp_path / ".kube" / "config"
    assert capsys.readouterr().err == (f"taugate: {default} (from the default kubeconfig): "
                                       "the kubeconfig file does not exist\n")


def test_a_kubeconfig_from_the_environment_is_read_when_it_is_set_after_start(kube_double, small_cluster,
                                                                               tmp_path, capsys, monkeypatch):
    # The kubernetes client reads $KUBECONFIG once, at import; taugate reads it per command.
    kube_double.apply(small_cluster)
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path, kube_double.url))
    assert main(["snapshot", "export"]) == 0
    assert "kind: TauCluster" in capsys.readouterr().out


def test_a_directory_given_as_kubeconfig_is_called_a_directory(tmp_path, capsys):
    assert main(["operator", "--kubeconfig", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"taugate: {tmp_path}: is a directory, not a kubeconfig file\n"


def test_snapshot_alone_prints_the_snapshot_help_and_exits_2(capsys):
    assert main(["snapshot"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: taugate snapshot") and "export" in err


def test_a_kubeconfig_that_impersonates_is_refused_in_one_line_by_the_commands_that_read_a_cluster(tmp_path, capsys):
    """kubectl sends ``as:``/``as-groups:`` as Impersonate-* headers; taugate's client does not, so
    it would answer as the kubeconfig's own (often admin) credentials: refused instead."""
    path = _kubeconfig(tmp_path, "http://127.0.0.1:9")
    doc = yaml.safe_load(Path(path).read_text())
    doc["users"][0]["user"].update({"as": "mallory", "as-groups": ["vision-researchers"]})
    Path(path).write_text(yaml.safe_dump(doc))
    example = str(REPO / "examples" / "rayjob-image-classifier.yaml")
    for argv in (["admit", "-f", example, "--cluster", "live", "--kubeconfig", path],
                 ["snapshot", "export", "--kubeconfig", path],
                 ["status", "0123456789abcdef01234567", "--kubeconfig", path]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "impersonates (as: mallory, as-groups: ['vision-researchers'])" in err[0], err


def test_a_worker_count_outside_one_to_sixty_four_is_one_line_and_exit_2(tmp_path, capsys):
    for n in ("0", "65"):
        assert main(["operator", "--kubeconfig", str(tmp_path / "missing"), "--no-record", "--workers", n]) == 2
        assert capsys.readouterr().err == f"taugate: --workers must be between 1 and 64, not {n}\n"
