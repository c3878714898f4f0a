"""A ``TAUGATE_*`` value that does not load is one line naming the variable, its value and what is
allowed, and exit 2, for every command that reads the settings (as ``taugate serve`` always did),
never a pydantic traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.paths import EXAMPLE_CLUSTER, REPO

EXAMPLE = str(REPO / "examples" / "rayjob-image-classifier.yaml")


@pytest.mark.parametrize("command", [
    ["admit", "-f", EXAMPLE, "--cluster", str(EXAMPLE_CLUSTER)],
    ["policy", "test"],
    ["policy", "eval", "-f", EXAMPLE, "--cluster", str(EXAMPLE_CLUSTER)],
    ["policy", "audit", "--cluster", str(EXAMPLE_CLUSTER)],
], ids=" ".join)
def test_a_bad_device_access_setting_names_the_variable_and_the_allowed_values(command):
    out = subprocess.run([sys.executable, "-m", "taugate.cli", *command], capture_output=True, text=True,
                         cwd=REPO, timeout=120, env={**os.environ, "TAUGATE_DEVICE_ACCESS": "bogus"})
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["taugate: TAUGATE_DEVICE_ACCESS: Input should be 'deny' or 'govern' "
                                       "(got 'bogus')"]
