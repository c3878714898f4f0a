"""The Rego policy library: its own tests and samples, run like `opa test` + `gator verify`."""

from __future__ import annotations

import argparse
import re
import shutil

import pytest

from taugate.cli.policy import add_commands
from taugate.webhook.policy.engine import read_policy_set
from taugate.webhook.policy_tests import run_policy_tests, sample_files
from tests.policies.conftest import EXAMPLE_CLUSTER, POLICIES

EXPECTED_POLICIES = {
    "gpu-per-pod-fits-node", "gpu-per-pod-within-profile", "gpu-class-matches-profile", "gpu-total-fits-queue",
    "gpu-healthy-capacity", "workers-match-profile", "head-without-gpu", "requests-required", "mig-slices-fit",
}


def taugate(argv: list[str]) -> int:
    """Run `taugate <argv>` through the command registration the CLI uses."""
    parser = argparse.ArgumentParser(prog="taugate")
    add_commands(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def report():
    return run_policy_tests(POLICIES)


def test_the_library_holds_every_policy_of_the_contract():
    assert set(read_policy_set(POLICIES).policies.values()) == EXPECTED_POLICIES


def test_taugate_policy_test_passes_on_the_repository_library(capsys):
    assert taugate(["policy", "test", str(POLICIES)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\d+ passed, 0 failed$", out, re.M), out


def test_every_rego_test_and_sample_passes(report):
    assert report.load_error is None
    assert report.problems == []
    failed = [f"{t.test.file.display}:{t.test.line} {t.test.name} {t.error}" for t in report.tests if not t.passed]
    assert failed == []
    bad = [f"{s.path}: {s.error or s.own}" for s in report.samples if not s.passed]
    assert bad == []
    assert len(report.tests) >= 3 * len(EXPECTED_POLICIES)


def test_every_policy_has_at_least_three_allowed_and_three_disallowed_samples():
    for name, items in sample_files(read_policy_set(POLICIES)).items():
        kinds = [k for k, _ in items]
        assert kinds.count("allowed") >= 3, name
        assert kinds.count("disallowed") >= 3, name


def test_allowed_samples_are_admitted_without_any_denial(report):
    for s in report.samples:
        if s.expect == "allowed":
            assert s.decision is not None and s.decision.allowed, (s.path, [v.render() for v in s.decision.violations])


def test_every_reported_result_names_a_field_and_says_what_is_allowed_and_how_to_fix(report):
    checked = 0
    for s in report.samples:
        for line in s.own:
            action, _, rest = line.partition("] ")
            field, _, message = rest.partition(": ")
            assert re.match(r"^(spec|metadata)\.", field), line
            assert "; allowed" in message and "; fix: " in message, line
            checked += 1
    assert checked >= 3 * len(EXPECTED_POLICIES)


def test_samples_are_realistic_workloads_in_a_workspace(report):
    kinds = {s.decision.object["kind"] for s in report.samples if s.decision}
    assert kinds == {"RayJob", "RayCluster", "Job"}
    assert {s.decision.object["metadata"]["namespace"] for s in report.samples} == {"vision", "nlp"}


def test_a_broken_policy_file_fails_with_file_line_and_reason(policy_copy, capsys):
    target = policy_copy / "gpu-total-fits-queue" / "policy.rego"
    lines = target.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("deny contains"))
    lines.insert(at + 1, "\ttotal := input.object.totalGpus +")
    target.write_text("\n".join(lines) + "\n")
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    out = capsys.readouterr().out
    m = re.search(rf"FAIL load: {re.escape(str(target))}:(\d+): (.+)", out)
    assert m, out
    assert int(m.group(1)) in (at + 2, at + 3)
    assert m.group(2).strip()


def test_an_undefined_function_is_reported_at_its_line(policy_copy, capsys):
    target = policy_copy / "head-without-gpu" / "policy.rego"
    text = target.read_text().replace("t.gpusPerPod > 0\n", "t.gpusPerPod > 0\n\tno_such_helper(t)\n", 1)
    target.write_text(text)
    line = text.splitlines().index("\tno_such_helper(t)") + 1
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    out = capsys.readouterr().out
    assert f"{target}:{line}: could not find function no_such_helper" in out, out


def test_a_failing_rego_test_fails_the_run_and_names_the_test(policy_copy, capsys):
    target = policy_copy / "workers-match-profile" / "policy_test.rego"
    passing = 'contains(v.msg, "allowed: exactly 2 under workload profile h100-8gpu")'
    target.write_text(target.read_text().replace(passing, 'contains(v.msg, "allowed: exactly 3 under")'))
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"FAIL {re.escape(str(target))}:\d+ test_fixed_profile_with_other_count_is_denied", out), out
    assert re.search(r"^\d+ passed, 1 failed$", out, re.M)


def test_a_disallowed_sample_its_policy_does_not_flag_fails(policy_copy, capsys):
    samples = policy_copy / "requests-required" / "samples"
    (samples / "example_disallowed_looks_fine.yaml").write_text(
        (samples / "example_allowed_all_requests.yaml").read_text())
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    out = capsys.readouterr().out
    assert "FAIL " + str(samples / "example_disallowed_looks_fine.yaml") in out
    assert "expected: requests-required reports it" in out


def test_a_policy_without_samples_or_tests_fails(policy_copy, capsys):
    folder = policy_copy / "no-samples-yet"
    folder.mkdir()
    (folder / "policy.rego").write_text(
        "package taugate.policies.no_samples_yet\n\ndeny contains {\"msg\": \"x\", \"field\": \"spec\", "
        "\"policy\": \"no-samples-yet\"} if input.operation == \"DELETE\"\n")
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    out = capsys.readouterr().out
    assert "policy 'no-samples-yet' has no test_ rules" in out
    assert "policy 'no-samples-yet' has no example_allowed*.yaml sample" in out


def test_a_policy_in_the_wrong_package_is_rejected(policy_copy, capsys):
    target = policy_copy / "head-without-gpu" / "policy.rego"
    target.write_text(target.read_text().replace("package taugate.policies.head_without_gpu",
                                                 "package taugate.policies.head"))
    assert taugate(["policy", "test", str(policy_copy)]) == 1
    assert "must use package 'taugate.policies.head_without_gpu'" in capsys.readouterr().out


def test_a_missing_policy_folder_is_bad_input(tmp_path, capsys):
    assert taugate(["policy", "test", str(tmp_path / "nope")]) == 2
    assert "no such policy folder" in capsys.readouterr().err


def test_a_copy_of_the_library_placed_elsewhere_tests_against_the_repositorys_example_cluster(tmp_path, capsys):
    copy = tmp_path / "elsewhere" / "policies"
    shutil.copytree(POLICIES, copy)  # no examples/ beside it
    assert taugate(["policy", "test", str(copy)]) == 0
    out = capsys.readouterr().out
    assert f"against cluster snapshot {EXAMPLE_CLUSTER.resolve()}" in out
    assert "cluster snapshot for samples" not in out and re.search(r"^\d+ passed, 0 failed$", out, re.M), out


def test_a_broken_cluster_snapshot_is_reported_once_not_once_per_policy(policy_copy, tmp_path, capsys):
    broken = tmp_path / "broken-cluster.yaml"
    broken.write_text("kind: TauCluster\nmetadata: {name: cluster\n")
    assert taugate(["policy", "test", str(policy_copy), "--cluster", str(broken)]) == 1
    out = capsys.readouterr().out
    assert out.count("cluster snapshot for samples:") == 1 and f"{broken}: invalid YAML" in out, out


def test_without_any_cluster_snapshot_policy_test_says_what_it_looked_for_and_exits_2(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "elsewhere" / "policies"
    shutil.copytree(POLICIES, copy)
    monkeypatch.setenv("TAUGATE_POLICY_DIR", str(copy))  # the "bundled" library has no examples/ either
    assert taugate(["policy", "test", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "elsewhere" / "examples" / "cluster.yaml") in err
    assert "pass --cluster SNAPSHOT" in err
