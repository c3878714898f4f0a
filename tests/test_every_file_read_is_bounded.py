"""Every file a command reads has a size limit (``taugate.files.read_limited``): a huge file, or
an endless one (``/dev/zero``), is one line on stderr naming the file and the limit, exit 2, and
the process stays small (issue 27 item 7). Real CLI processes, each measured by its own peak
memory (``tests.child_process``). Huge files are sparse: they take no disk."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from taugate.certs import store
from taugate.controllers.recorder.evidence.records import EVENTS_FILE, EVIDENCE_FILE, EvidenceStore, Signer
from tests.child_process import run_measured
from tests.paths import EXAMPLE_CLUSTER, EXAMPLE_RAYJOB, POLICIES, REPO
from tests.recorder import objects as o
from tests.recorder.test_evidence import _record

GIB = 2**30


def huge(path: Path, size: int = 3 * GIB) -> Path:
    """``path`` as a sparse file of ``size`` bytes (nothing on disk but its length)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def endless(path: Path) -> Path:
    """``path`` as a symbolic link to ``/dev/zero``: reading never ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to("/dev/zero")
    return path


def _evidence(tmp: Path) -> Path:
    root = tmp / "evidence"
    _record(EvidenceStore(root, Signer.generate()))
    return root


def _policies(tmp: Path) -> Path:
    copy = tmp / "policies"
    shutil.copytree(POLICIES, copy)
    return copy


def _kubeconfig(tmp: Path) -> Path:
    return tmp / "kubeconfig"


# Each case: (arguments given the temporary directory, the file made huge or endless, the limit named).
Case = tuple[Callable[[Path], list[str]], Callable[[Path], Path], str]
RID = o.RUN_ID
CASES: dict[str, Case] = {
    "admit -f": (lambda t: ["admit", "-f", str(t / "job.yaml"), "--cluster", str(EXAMPLE_CLUSTER)],
                 lambda t: t / "job.yaml", "128 MiB"),
    "admit --cluster": (lambda t: ["admit", "-f", str(EXAMPLE_RAYJOB), "--cluster", str(t / "cluster.yaml")],
                        lambda t: t / "cluster.yaml", "128 MiB"),
    "admit --old": (lambda t: ["admit", "-f", str(EXAMPLE_RAYJOB), "--cluster", str(EXAMPLE_CLUSTER),
                               "--old", str(t / "old.yaml")], lambda t: t / "old.yaml", "128 MiB"),
    "policy eval -f": (lambda t: ["policy", "eval", "-f", str(t / "job.yaml"), "--cluster", str(EXAMPLE_CLUSTER)],
                       lambda t: t / "job.yaml", "128 MiB"),
    "policy test (a module)": (lambda t: ["policy", "test", str(_policies(t))],
                               lambda t: t / "policies" / "lib" / "huge.rego", "8 MiB"),
    "policy eval --enforcement": (lambda t: ["policy", "eval", "-f", str(EXAMPLE_RAYJOB), "--cluster",
                                             str(EXAMPLE_CLUSTER), "--enforcement", str(t / "enforcement.yaml")],
                                  lambda t: t / "enforcement.yaml", "8 MiB"),
    "policy audit --cluster": (lambda t: ["policy", "audit", "--cluster", str(t / "cluster.yaml")],
                               lambda t: t / "cluster.yaml", "128 MiB"),
    "serve --cluster": (lambda t: ["serve", "--cluster", str(t / "cluster.yaml"), "--port", "0"],
                        lambda t: t / "cluster.yaml", "128 MiB"),
    "serve --policies": (lambda t: ["serve", "--cluster", str(EXAMPLE_CLUSTER), "--port", "0",
                                    "--policies", str(_policies(t))],
                         lambda t: t / "policies" / "lib" / "huge.rego", "8 MiB"),
    "serve --cert-dir": (lambda t: (store.generate(t / "tls", service="taugate-webhook", namespace="taugate-system"),
                                    ["serve", "--cluster", str(EXAMPLE_CLUSTER), "--port", "0", "--cert-dir",
                                     str(t / "tls")])[1],
                         lambda t: t / "tls" / "tls.crt", "1 MiB"),
    "certs show": (lambda t: (store.generate(t / "tls", service="taugate-webhook", namespace="taugate-system"),
                              ["certs", "show", "--dir", str(t / "tls")])[1],
                   lambda t: t / "tls" / "ca.crt", "1 MiB"),
    "evidence verify (events.jsonl)": (lambda t: ["evidence", "verify", RID, "--evidence-root", str(_evidence(t))],
                                       lambda t: t / "evidence" / RID / EVENTS_FILE, "64 MiB"),
    "evidence verify (evidence.json)": (lambda t: ["evidence", "verify", RID, "--evidence-root", str(_evidence(t))],
                                        lambda t: t / "evidence" / RID / EVIDENCE_FILE, "64 MiB"),
    "evidence verify --public-key": (lambda t: ["evidence", "verify", RID, "--evidence-root", str(_evidence(t)),
                                                "--public-key", str(t / "key.pem")],
                                     lambda t: t / "key.pem", "1 MiB"),
    "evidence show": (lambda t: ["evidence", "show", RID, "--evidence-root", str(_evidence(t))],
                      lambda t: t / "evidence" / RID / EVENTS_FILE, "64 MiB"),
    "evidence show --json": (lambda t: ["evidence", "show", RID, "--json", "--evidence-root", str(_evidence(t))],
                             lambda t: t / "evidence" / RID / EVIDENCE_FILE, "64 MiB"),
    "status --evidence-root": (lambda t: ["status", RID, "--evidence-root", str(_evidence(t))],
                               lambda t: t / "evidence" / RID / EVENTS_FILE, "64 MiB"),
    "operator --kubeconfig": (lambda t: ["operator", "--no-record", "--kubeconfig", str(_kubeconfig(t))],
                              _kubeconfig, "16 MiB"),
    "snapshot export --kubeconfig": (lambda t: ["snapshot", "export", "--kubeconfig", str(_kubeconfig(t))],
                                     _kubeconfig, "16 MiB"),
    "certs sync --kubeconfig": (lambda t: ["certs", "sync", "--secret", "taugate-webhook-tls", "--namespace",
                                           "taugate-system", "--service", "taugate-webhook", "--kubeconfig",
                                           str(_kubeconfig(t))],
                                _kubeconfig, "16 MiB"),
}


@pytest.mark.parametrize("make", [huge, endless], ids=["huge", "endless"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_huge_or_endless_file_is_one_line_naming_it_and_exit_2(tmp_path, case, make):
    """(``policy test`` is the exception: a module it cannot load is a failed test of the library,
    exit 1, reported as ``FAIL load: FILE: ...`` like one that does not parse.)"""
    argv, target, limit = CASES[case]
    args = argv(tmp_path)  # the real files first (a policy folder, a record, certificates)
    path = make(target(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAUGATE_", "KUBECONFIG"))}
    env["HOME"] = str(tmp_path)
    done = run_measured([sys.executable, "-m", "taugate.cli", *args], cwd=REPO, env=env, timeout=120)
    err = done.stderr.decode()
    assert "Traceback" not in err and "MemoryError" not in err, err[-2000:]
    if case.startswith("policy test"):
        assert done.returncode == 1 and err == "", (done.returncode, err)
        lines = [line for line in done.stdout.decode().splitlines() if line.startswith("FAIL")]
    else:
        assert done.returncode == 2, (done.returncode, err[-2000:], done.stdout[-500:])
        lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and f"larger than {limit}" in lines[0], lines[0]
    assert done.peak_mib < 400, f"{case}: peak {done.peak_mib:.0f} MiB"


def test_a_run_metrics_file_is_read_in_bounded_pieces_and_a_device_not_at_all(tmp_path):
    from taugate.controllers.recorder.config import FilesystemProbe, RecorderConfig
    from taugate.files import MAX_WORKLOAD_FILE_BYTES

    data = FilesystemProbe(RecorderConfig(data_root=tmp_path, evidence_root=tmp_path / "ev"))
    run_dir = data.run_dir("team-a", RID)
    assert run_dir is not None
    metrics = run_dir / data.config.metrics_file
    metrics.parent.mkdir(parents=True)
    line = b'{"step": 7, "loss": 0.5}\n'
    with open(metrics, "wb") as f:
        f.write(b"x" * (MAX_WORKLOAD_FILE_BYTES + 10) + b"\n")  # one line longer than a read: no record
        f.write(line * 3)
    assert data.metrics("team-a", RID) is None  # the first read: a piece of the long line
    sample = data.metrics("team-a", RID)  # the next: the rest of it and the three records
    assert sample is not None and sample.records == 3 and sample.step == 7
    endless(metrics)
    assert data.metrics("team-a", RID) is None


def test_an_artifact_index_over_its_limit_is_skipped(tmp_path):
    from taugate.controllers.recorder.config import FilesystemProbe, RecorderConfig

    data = FilesystemProbe(RecorderConfig(data_root=tmp_path, evidence_root=tmp_path / "ev"))
    run_dir = data.run_dir("team-a", RID)
    assert run_dir is not None
    out = run_dir / data.config.output_dir
    huge(out / data.config.index_files[0])
    listing = data.artifacts("team-a", RID)
    assert listing is not None and listing.index is None

