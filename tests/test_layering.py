"""The package's layering, as ARCHITECTURE.md draws it, checked by import-linter on the tree
(``[tool.importlinter]`` in pyproject.toml), and the installed distribution's one namespace."""

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
    """taugate installed (no dependencies) from a copy of its sources (links kept), so no build/
    lands here."""
    tmp = tmp_path_factory.mktemp("layering")
    src, target = tmp / "src", tmp / "site"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for folder in SOURCES[1:]:
        shutil.copytree(ROOT / folder, src / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
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


def test_the_import_contracts_hold():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([shutil.which("lint-imports") or "lint-imports", "--no-cache"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def _drawn_folders() -> set[str]:
    """The folders ARCHITECTURE.md's layout picture (section 5) draws, as paths: an entry's
    indentation (two spaces a level) says which folder it is in."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    picture = text.split("## 5. Layout", 1)[1].split("```", 2)[1]
    drawn, stack = set(), []
    for line in picture.splitlines():
        name = line.strip().split(" ", 1)[0]
        if not name.endswith("/"):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        stack = stack[:depth] + [name.rstrip("/")]
        drawn.add("/".join(stack))
    return drawn


def test_the_layout_picture_in_the_architecture_names_every_python_package_folder():
    packages = {str(p.parent.relative_to(ROOT)) for part in ("taugate", "webhook", "controllers", "certs")
                for p in (ROOT / part).rglob("__init__.py") if "__pycache__" not in p.parts}
    drawn = _drawn_folders()
    assert packages <= drawn, f"not drawn: {sorted(packages - drawn)}"
    assert {d for d in drawn if d.split("/")[0] in ("taugate", "webhook", "controllers", "certs")} <= packages
