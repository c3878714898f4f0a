"""``python -m tests.e2e.up`` as the README tells a newcomer to run it: it prints a ``KUBECONFIG``
for a control plane with taugate installed, kubectl works with it (the example's workspaces are
there and the example RayJob is admitted), and Ctrl-C stops every process it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import yaml

from tests.e2e.controlplane import build
from tests.e2e.workloads import WORKSPACE, admitted_problems
from tests.paths import REPO


def _line(proc: subprocess.Popen, pattern: str, seen: list[str]) -> re.Match:
    """The first line of ``proc``'s output matching ``pattern`` (the lines read are kept in ``seen``)."""
    assert proc.stdout is not None
    for line in proc.stdout:  # blocks until the next line or the end of the output
        seen.append(line)
        if m := re.search(pattern, line):
            return m
    raise AssertionError(f"python -m tests.e2e.up ended without {pattern!r}:\n{''.join(seen)}")


def test_up_prints_a_kubeconfig_kubectl_works_with_and_ctrl_c_stops_it():
    kubectl = str(build("kubernetes")["kubernetes"] / "kubectl")
    proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.up", "--minutes", "20"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: list[str] = []
    try:
        kubeconfig = _line(proc, r"export KUBECONFIG=(\S+)", seen).group(1)
        _line(proc, r"taugate installed; webhook on https://127\.0\.0\.1:\d+", seen)
        _line(proc, r"Ctrl-C stops", seen)
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        workspaces = subprocess.run([kubectl, "get", "tauworkspaces", "-A", "-o", "name"], capture_output=True,
                                    text=True, env=env, timeout=60, check=True).stdout.split()
        assert f"tauworkspace.tau.azure.com/{WORKSPACE}" in workspaces
        example = (REPO / "examples" / "rayjob-image-classifier.yaml").read_text()
        shown = subprocess.run([kubectl, "create", "--dry-run=server", "-o", "yaml", "-f", "-"], input=example,
                               capture_output=True, text=True, env=env, timeout=60, check=True).stdout
        assert admitted_problems(yaml.safe_load(shown)) == []
    finally:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(seen) + rest
    # Every process it started is gone: nothing answers on its API server any more.
    after = subprocess.run([kubectl, "get", "--raw", "/readyz", "--request-timeout=5s"], capture_output=True,
                           text=True, env={**os.environ, "KUBECONFIG": kubeconfig}, timeout=60)
    assert after.returncode != 0
