"""``taugate operator --audit-*``: bad audit settings and a policy folder that does not load are
refused with one line and exit 2, before the API server is even tried."""

from __future__ import annotations

import pytest

from taugate.cli import main
from tests.paths import POLICIES

POSITIVE = "--audit-interval and --audit-page-size must be > 0"


@pytest.mark.parametrize(("extra", "problem"), [
    (["--audit-policies", "{tmp}/no-such-folder"], "--audit-policies: "),
    (["--audit-policies", str(POLICIES), "--audit-interval", "0"], POSITIVE),
    (["--audit-policies", str(POLICIES), "--audit-page-size", "0"], POSITIVE),
])
def test_bad_audit_settings_stop_the_operator_with_one_line_and_exit_2(tmp_path, capsys, extra, problem):
    kubeconfig = tmp_path / "missing-kubeconfig"  # never read: the audit settings are checked first
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert main(["operator", "--kubeconfig", str(kubeconfig), "--no-record", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"taugate: {problem}") and err.count("\n") == 1


def test_a_policy_folder_that_fails_its_own_tests_is_refused_for_the_audit(tmp_path, capsys):
    import shutil

    folder = tmp_path / "policies"
    shutil.copytree(POLICIES, folder)
    rego = folder / "head-without-gpu" / "policy_test.rego"
    rego.write_text(rego.read_text() + "\ntest_always_fails if { false }\n")
    assert main(["operator", "--kubeconfig", str(tmp_path / "k"), "--no-record", "--audit-policies", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("taugate: --audit-policies: ") and err.count("\n") == 1
