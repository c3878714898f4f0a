"""Every ``taugate policy`` command answers a bad policy folder with a message naming the file and
the problem, never a traceback (issue 29 item 5): a parse error, a file that is not text, an
enforcement typo, a stray module, a folder that is missing or empty, and a policy that fails at run
time on every workload."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from taugate.cli import main
from tests.paths import EXAMPLE_CLUSTER, POLICIES
from tests.policies.test_a_broken_policy_breaks_nothing_else import ALWAYS_BROKEN

OBJECT = POLICIES / "requests-required" / "samples" / "example_disallowed_worker_without_memory.yaml"


def _copy(root: Path) -> Path:
    shutil.copytree(POLICIES, root)
    return root


def _parse_error(root: Path) -> tuple[Path, str]:
    f = _copy(root) / "head-without-gpu" / "policy.rego"
    f.write_text(f.read_text() + "\ndeny contains x if {\n")
    return root, "head-without-gpu/policy.rego:"


def _not_text(root: Path) -> tuple[Path, str]:
    (_copy(root) / "head-without-gpu" / "policy.rego").write_bytes(b"\xff\xfe\x00bad")
    return root, "head-without-gpu/policy.rego: cannot read: not UTF-8 text"


def _enforcement_typo(root: Path) -> tuple[Path, str]:
    with (_copy(root) / "enforcement.yaml").open("a") as f:
        f.write("gpu-total-fits-queu: deny\n")
    return root, "enforcement.yaml:6: unknown policy 'gpu-total-fits-queu'"


def _stray_module(root: Path) -> tuple[Path, str]:
    (_copy(root) / "notes").mkdir()
    (root / "notes" / "draft.rego").write_text("package drafts\n")
    return root, "notes/draft.rego: unexpected Rego module"


def _missing(root: Path) -> tuple[Path, str]:
    return root, f"{root}: "


def _empty(root: Path) -> tuple[Path, str]:
    root.mkdir()
    return root, "no policies found"


def _runtime_broken(root: Path) -> tuple[Path, str]:
    (_copy(root) / "starts-broken").mkdir()
    (root / "starts-broken" / "policy.rego").write_text(ALWAYS_BROKEN)
    (root / "starts-broken" / "policy_test.rego").write_text("package taugate.policies.starts_broken\n\n"
                                                             "test_loads if true\n")
    return root, "`startswith` expects string argument"


FOLDERS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "a parse error": _parse_error, "a file that is not text": _not_text, "an enforcement typo": _enforcement_typo,
    "a stray module": _stray_module, "a missing folder": _missing, "an empty folder": _empty,
    "a policy failing at run time": _runtime_broken,
}

COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "test": lambda d: ["policy", "test", str(d), "--cluster", str(EXAMPLE_CLUSTER)],
    "eval": lambda d: ["policy", "eval", "-f", str(OBJECT), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(d)],
    "audit": lambda d: ["policy", "audit", "--cluster", str(EXAMPLE_CLUSTER), "-f", str(OBJECT), "--policies", str(d)],
    "what-if": lambda d: ["policy", "what-if", str(d), "--cluster", str(EXAMPLE_CLUSTER), "-f", str(OBJECT)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_a_bad_policy_folder_gets_a_message_not_a_traceback(folder, command, tmp_path, capsys):
    root, expected = FOLDERS[folder](tmp_path / "policies")
    if command == "test" and folder == "a policy failing at run time":
        shutil.rmtree(root / "requests-required")  # keep the generated-input sweep short: one policy's samples
        (root / "enforcement.yaml").write_text("head-without-gpu: warn\n")
    code = main(COMMANDS[command](root))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if folder == "a policy failing at run time":
        # The object is judged: the failure is the broken policy's own result, the others still report.
        assert code == 1 and expected in out + err, out + err
    else:
        assert code in (1, 2) and expected in out + err, out + err
        if code == 2:
            assert len(err.strip().splitlines()) == 1, err
