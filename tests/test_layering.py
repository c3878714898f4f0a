"""The package's layering, as ARCHITECTURE.md draws it, checked by import-linter on the installed
distribution (``[tool.importlinter]`` in pyproject.toml): the folders webhook/, controllers/ and
certs/ only become ``taugate.webhook`` and friends once installed, so the check installs a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "taugate", "webhook", "controllers", "certs")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """taugate installed (no dependencies) from a copy of its sources, so no build/ lands here."""
    tmp = tmp_path_factory.mktemp("layering")
    src, target = tmp / "src", tmp / "site"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for folder in SOURCES[1:]:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)],
                   check=True, capture_output=True)
    return target


def test_every_module_imports_under_one_name_taugate(installed):
    names = sorted(p.name for p in (installed / "taugate").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert names == ["certs", "cli", "controllers", "kinds", "webhook"]
    assert not any((installed / top).exists() for top in ("webhook", "controllers", "certs"))


@pytest.mark.parametrize("part", ["webhook", "controllers", "certs"])
def test_a_part_imported_by_its_folder_name_is_refused(part):
    result = subprocess.run([sys.executable, "-c", f"import {part}"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert f"import taugate.{part}, not {part}" in result.stderr


def test_the_import_contracts_hold(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    result = subprocess.run([shutil.which("lint-imports") or "lint-imports", str(ROOT / "pyproject.toml")],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in result.stdout
