"""policies/README's worked example (issue 29 item 7), step by step: a rule that pins image tags,
reading the whole object at ``input.review.object``, written, tested, previewed as dry-run with
what-if, then enforced. The README's Rego is the example folder's file, so neither drifts."""

from __future__ import annotations

import json
import re
import shutil

from taugate.cli import main
from tests.paths import EXAMPLE_CLUSTER, POLICIES, REPO

EXAMPLE = REPO / "examples" / "policies" / "pin-image-tags"
LATEST = EXAMPLE / "samples" / "example_disallowed_rayjob_latest_workers.yaml"
PINNED = EXAMPLE / "samples" / "example_allowed_rayjob_released_tags.yaml"
FIELD = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].image"


def _readme_rego() -> str:
    text = (POLICIES / "README.md").read_text()
    m = re.search(r"<!-- worked-example: policy.rego -->\n   ```rego\n(.*?)\n   ```", text, re.S)
    assert m, "policies/README.md lost its worked example"
    return "\n".join(line.removeprefix("   ") for line in m.group(1).split("\n")) + "\n"


def _library(tmp_path):
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    shutil.copytree(EXAMPLE, root / "pin-image-tags")
    return root


def test_the_readme_shows_the_example_policy_as_it_is():
    assert _readme_rego() == (EXAMPLE / "policy.rego").read_text()


def test_step_2_policy_test_passes_for_the_library_and_for_the_folder_alone(tmp_path, capsys):
    root = _library(tmp_path)
    assert main(["policy", "test", str(root), "--cluster", str(EXAMPLE_CLUSTER)]) == 0, capsys.readouterr().out
    assert main(["policy", "test", str(root / "pin-image-tags"), "--cluster", str(EXAMPLE_CLUSTER)]) == 0
    out = capsys.readouterr().out
    assert " 6/6 passed" in out and "\n11 passed, 0 failed" in out  # 5 test_ rules, 6 samples


def test_step_2_a_typo_in_an_input_path_fails_naming_the_file_and_line(tmp_path, capsys):
    root = _library(tmp_path)
    rego = root / "pin-image-tags" / "policy.rego"
    rego.write_text(rego.read_text().replace("walk(input.review.object,", "walk(input.reveiw.object,"))
    assert main(["policy", "test", str(root), "--cluster", str(EXAMPLE_CLUSTER)]) == 1
    out = capsys.readouterr().out
    line = next(i + 1 for i, text in enumerate(rego.read_text().splitlines()) if "input.reveiw" in text)
    assert f"FAIL {rego}:{line}: input.reveiw.object is not in the policy input" in out
    assert "input has cluster, namespace, object, operation, profile, review, userInfo, workspace" in out


def test_step_3_what_if_as_dryrun_previews_the_latest_workload_and_exits_0(tmp_path, capsys):
    root = _library(tmp_path)
    with (root / "enforcement.yaml").open("a") as f:
        f.write("pin-image-tags: dryrun\n")
    code = main(["policy", "what-if", str(root), "--cluster", str(EXAMPLE_CLUSTER), "-f", str(LATEST), "-f",
                 str(PINNED), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(c["policy"], c["action"], c["workload"], c["field"]) for c in doc["enforced"]] == [
        ("pin-image-tags", "dryrun", "RayJob/latest-workers", FIELD)]


def test_step_4_enforced_it_denies_latest_with_the_field_and_the_fix(tmp_path, capsys):
    root = _library(tmp_path)
    with (root / "enforcement.yaml").open("a") as f:
        f.write("pin-image-tags: deny\n")
    assert main(["policy", "eval", "-f", str(LATEST), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"  - [pin-image-tags] {FIELD}: container image \"rayproject/ray:latest\" is not pinned" in out
    assert "allowed: an image with a tag other than latest, or a digest" in out and "fix: set the image" in out
    assert main(["policy", "eval", "-f", str(PINNED), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(root)]) == 0
