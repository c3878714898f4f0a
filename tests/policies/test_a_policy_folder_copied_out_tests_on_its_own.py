"""A single policy folder copied out of the library tests on its own (issue 29 item 6): its
``policy.rego`` and tests are read with the shared library (``lib/``, with the test fixtures)
found beside the folder, else the bundled one; with none, the error names where it looked."""

from __future__ import annotations

import shutil

from taugate.cli import main
from tests.paths import EXAMPLE_CLUSTER, POLICIES


def test_a_copied_policy_folder_passes_with_the_bundled_library(tmp_path, capsys):
    folder = tmp_path / "requests-required"
    shutil.copytree(POLICIES / "requests-required", folder)
    code = main(["policy", "test", str(folder), "--cluster", str(EXAMPLE_CLUSTER)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "unexpected Rego module" not in out and "could not find function" not in out
    assert " 7/7 passed" in out and "\n14 passed, 0 failed" in out  # 7 test_ rules (fixtures found), 7 samples


def test_the_library_beside_the_folder_is_the_one_used(tmp_path, capsys):
    folder = tmp_path / "requests-required"
    shutil.copytree(POLICIES / "requests-required", folder)
    shutil.copytree(POLICIES / "lib", tmp_path / "lib")
    helpers = tmp_path / "lib" / "taugate.rego"
    helpers.write_text(helpers.read_text() + "\nbroken contains if {\n")
    code = main(["policy", "test", str(folder), "--cluster", str(EXAMPLE_CLUSTER)])
    out = capsys.readouterr().out
    assert code == 1 and f"FAIL load: {helpers}:" in out, out


def test_without_a_shared_library_the_error_names_where_it_looked(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "requests-required"
    shutil.copytree(POLICIES / "requests-required", folder)
    monkeypatch.setenv("TAUGATE_POLICY_DIR", str(tmp_path / "nowhere"))
    code = main(["policy", "test", str(folder), "--cluster", str(EXAMPLE_CLUSTER)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    assert "a single policy folder needs the shared library lib/" in out
    assert str(tmp_path / "lib") in out and str(tmp_path / "nowhere" / "lib") in out


def test_a_copied_folder_evaluates_one_object(tmp_path, capsys):
    folder = tmp_path / "requests-required"
    shutil.copytree(POLICIES / "requests-required", folder)
    sample = folder / "samples" / "example_disallowed_worker_without_memory.yaml"
    code = main(["policy", "eval", "-f", str(sample), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(folder)])
    out = capsys.readouterr().out
    assert code == 1 and "  requests-required: deny: " in out
    assert "gpu-total-fits-queue" not in out  # only the copied policy serves
