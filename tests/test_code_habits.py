"""The code's habits, checked where the suite runs (`.ci/run` runs them first, then again with the suite): ruff
(pycodestyle, pyflakes, import order, bugbear, pyupgrade, complexity at most 15, simplify) on
every Python file, and mypy (strict on the core ``taugate/*.py``, normal on the parts, the CLI
and ``bench/``), both configured in pyproject.toml.

mypy reads the installed layout: webhook/, controllers/ and certs/ only become ``taugate.webhook``
and friends through the package-dir mapping, which mypy cannot follow through the editable
install's import hook, so the check lays that layout out with symbolic links (nothing copied) and
reports findings under their repository paths. Every file must be clean: there is no list of
exceptions.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

def _findings_by_file(lines: list[str]) -> dict[str, list[str]]:
    """``path:line:...`` lines grouped by path."""
    out: dict[str, list[str]] = {}
    for line in lines:
        match = re.match(r"([^:\s]+\.py):\d+", line)
        if match:
            out.setdefault(match.group(1), []).append(line)
    return out


def _check(tool: str, findings: dict[str, list[str]]) -> None:
    shown = "\n".join(line for lines in findings.values() for line in lines)
    assert not findings, f"{tool} finds {sum(map(len, findings.values()))} problem(s):\n{shown[-6000:]}"


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900)
    if result.returncode not in (0, 1):  # 1: findings; anything else: the tool itself failed
        pytest.fail(f"{' '.join(argv[:4])} failed (exit {result.returncode}):\n{result.stdout[-3000:]}"
                    f"{result.stderr[-3000:]}")
    return result


def test_ruff_finds_nothing():
    result = _run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-cache", "."], ROOT)
    findings = _findings_by_file(result.stdout.splitlines())
    assert result.returncode == 0 or findings, result.stdout[-3000:]
    _check("ruff", findings)


def _installed_layout(tree: Path) -> dict[str, str]:
    """Lay out ``tree`` as the installed distribution (``taugate/`` with its parts linked in per
    ``[tool.setuptools.package-dir]``) plus ``bench/`` and ``tests/`` (bench imports tests.paths);
    returns how a path in the tree maps back to the repository."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    core = tree / "taugate"
    core.mkdir(parents=True, exist_ok=True)
    back = {}
    for entry in (ROOT / "taugate").iterdir():
        if entry.name != "__pycache__":
            _link(core / entry.name, entry)
    for package, folder in mapping.items():
        inside = package.split(".", 1)[1]
        _link(core / inside, ROOT / folder)
        back[f"taugate/{inside}/"] = f"{folder}/"
    for top in ("bench", "tests"):
        _link(tree / top, ROOT / top)
    return back


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def test_mypy_finds_nothing():
    # A tree (and mypy's cache) per checkout, kept between runs: a warm run takes seconds.
    tree = Path(tempfile.gettempdir()) / f"taugate-typecheck-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"
    for stale in (tree / "taugate").glob("*") if (tree / "taugate").is_dir() else ():
        if stale.is_symlink() and not stale.exists():
            stale.unlink()  # a module deleted from the repository
    back = _installed_layout(tree)
    result = _run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                   "--cache-dir", str(tree / ".mypy_cache"), "--no-error-summary", "--show-error-codes",
                   "-p", "taugate", "-p", "bench"], tree)
    lines = []
    for line in result.stdout.splitlines():
        for inside, folder in back.items():
            if line.startswith(inside):
                line = folder + line[len(inside):]
        lines.append(line)
    findings = _findings_by_file([line for line in lines if ": error:" in line])
    assert result.returncode == 0 or findings, result.stdout[-3000:]
    _check("mypy", findings)


def test_the_layout_mypy_reads_is_the_installed_one(tmp_path):
    back = _installed_layout(tmp_path)
    assert back == {"taugate/webhook/": "webhook/", "taugate/controllers/": "controllers/", "taugate/certs/": "certs/"}
    assert (tmp_path / "taugate" / "webhook" / "server.py").resolve() == ROOT / "webhook" / "server.py"
    assert (tmp_path / "taugate" / "snapshot.py").resolve() == ROOT / "taugate" / "snapshot.py"
    assert os.path.islink(tmp_path / "bench")
