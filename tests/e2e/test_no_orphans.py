"""The harness leaves no process behind: a control plane started by a process that is
interrupted (SIGINT, as Ctrl-C) or killed outright (SIGKILL, no cleanup code runs) takes etcd,
kube-apiserver, the controller-manager and the scheduler with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.controlplane import build
from tests.paths import REPO

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _processes_under(workdir: str) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose command line names ``workdir``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if workdir in cmd and "Z" not in state.split()[1]:
            out.append((int(entry.name), cmd))
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["interrupted", "killed"])
def test_a_stopped_test_process_takes_the_whole_control_plane_with_it(sig, tmp_path):
    build("etcd", "kubernetes")  # cached: seconds
    proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.up", "--bare", "--minutes", "10"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        lines = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("logs in ") or proc.poll() is not None:
                break
        assert any(line.startswith("control plane up") for line in lines), "".join(lines)
        running = {c for _, cmd in _processes_under(str(tmp_path)) for c in COMPONENTS if f"/{c} " in cmd}
        assert running == set(COMPONENTS)
        proc.send_signal(sig)
        proc.wait(60)
        deadline = time.monotonic() + 30
        while _processes_under(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_under(str(tmp_path)) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
