"""``taugate --version`` and ``kubectl tau --version`` print the installed version (the package
metadata pip wrote, ``importlib.metadata``) and exit 0, run as the console scripts a user runs;
the chart ships the same version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.paths import REPO

BIN = Path(sys.executable).parent


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / script), *args], capture_output=True, text=True, timeout=120, check=False)


def test_taugate_version_prints_the_installed_version_and_exits_0():
    installed = importlib.metadata.version("taugate")
    result = _run("taugate", "--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"taugate {installed}\n", "")


def test_kubectl_tau_version_prints_the_installed_version_and_exits_0():
    result = _run("kubectl-tau", "--version")
    assert (result.returncode, result.stdout) == (0, f"kubectl-tau (taugate {importlib.metadata.version('taugate')})\n")


def test_the_installed_version_is_the_projects_and_the_charts_app_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((REPO / "charts" / "taugate" / "Chart.yaml").read_text())
    assert importlib.metadata.version("taugate") == project == chart["appVersion"]


def test_the_help_names_the_version_flag():
    result = _run("taugate", "--help")
    assert result.returncode == 0 and "--version" in result.stdout
