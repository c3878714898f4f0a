"""The code's habits, checked where the suite runs (`.ci/run` runs them first, then again with the suite): ruff
(pycodestyle, pyflakes, import order, bugbear, pyupgrade, complexity at most 15, simplify) on
every Python file, and mypy (strict on the core ``taugate/*.py``, normal on the parts, the CLI
and ``bench/``), both configured in pyproject.toml.

mypy reads the tree as it is (taugate/webhook, taugate/controllers and taugate/certs are links to
the top-level folders). Every file must be clean: there is no list of exceptions.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
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


def test_mypy_finds_nothing():
    # mypy's cache per checkout, kept between runs: a warm run takes seconds.
    cache = Path(tempfile.gettempdir()) / f"taugate-mypy-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"
    result = _run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                   "--cache-dir", str(cache), "--no-error-summary", "--show-error-codes",
                   "-p", "taugate", "-p", "bench"], ROOT)
    findings = _findings_by_file([line for line in result.stdout.splitlines() if ": error:" in line])
    assert result.returncode == 0 or findings, result.stdout[-3000:]
    _check("mypy", findings)


@pytest.mark.parametrize("part", ["webhook", "controllers", "certs"])
def test_each_part_folder_is_linked_into_the_package(part):
    link = ROOT / "taugate" / part
    assert link.is_symlink() and os.readlink(link) == f"../{part}"
    assert (link / "__init__.py").resolve() == ROOT / part / "__init__.py"
