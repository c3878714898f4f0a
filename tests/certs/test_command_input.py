"""Bad input to ``taugate certs``: one line on stderr naming the option, exit 2, and nothing
written (not even the directory's ``.lock``)."""

from __future__ import annotations

import socket
import time

import pytest
import yaml

from taugate.certs import store
from taugate.certs.pki import MAX_DAYS, CertError, service_dns_names
from taugate.cli import main


def _run(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["certs", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("options, named", [
    (("--days", "99999999"), "--days 99999999"),
    (("--ca-days", "99999999"), "--ca-days 99999999"),
    (("--days", str(MAX_DAYS + 1), "--ca-days", str(MAX_DAYS + 1)), "--ca-days 36501"),
    (("--days", "0"), "--days 0"),
    (("--ca-days", "-5"), "--ca-days -5"),
])
def test_a_validity_outside_one_to_36500_days_is_refused_by_option_before_anything_is_written(
        tmp_path, capsys, options, named):
    d = tmp_path / "certs"
    code, err = _run(capsys, "generate", "--dir", str(d), *options)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"taugate certs generate: {named}: ")
    assert "1 to 36500" in err
    assert not d.exists()


def test_a_serving_certificate_longer_than_its_ca_is_refused_instead_of_silently_shortened(tmp_path, capsys):
    d = tmp_path / "certs"
    code, err = _run(capsys, "generate", "--dir", str(d), "--days", "400", "--ca-days", "10")
    assert code == 2 and err.count("\n") == 1
    assert "--days 400 exceeds --ca-days 10" in err and "at most 10 days" in err
    assert not d.exists()
    code, err = _run(capsys, "rotate", "--dir", str(d), "--days", "400", "--ca-days", "10")
    assert code == 2 and "--days 400 exceeds --ca-days 10" in err


def test_the_longest_allowed_validity_is_issued_in_full(tmp_path, capsys):
    d = tmp_path / "certs"
    code, err = _run(capsys, "generate", "--dir", str(d), "--days", str(MAX_DAYS), "--ca-days", str(MAX_DAYS))
    assert code == 0, err
    st = store.inspect(d)
    lifetime = st.serving.not_valid_after_utc - st.serving.not_valid_before_utc
    assert lifetime.days == MAX_DAYS  # plus the 5 minutes of clock skew before now


def test_an_existing_directory_keeps_no_lock_file_from_a_refused_generate(tmp_path, capsys):
    d = tmp_path / "certs"
    d.mkdir()
    code, _ = _run(capsys, "generate", "--dir", str(d), "--days", "99999999")
    assert code == 2 and list(d.iterdir()) == []


def test_the_library_refuses_an_overflowing_validity_before_creating_the_directory(tmp_path):
    d = tmp_path / "certs"
    with pytest.raises(CertError, match="1 to 36500"):
        store.generate(d, service="gate", namespace="ops", days=99999999)
    with pytest.raises(CertError, match="exceeds"):
        store.generate(d, service="gate", namespace="ops", days=400, ca_days=10)
    assert not d.exists()


@pytest.mark.parametrize("option, value, kind", [
    ("--service", "Bad_Name!", "Service"),
    ("--service", "9gate", "Service"),  # a Service name is a DNS-1035 label: it starts with a letter
    ("--service", "a" * 64, "Service"),
    ("--namespace", "Ops", "Namespace"),
    ("--namespace", "ops.team", "Namespace"),
    ("--namespace", "ops-", "Namespace"),
])
def test_service_and_namespace_must_be_kubernetes_names(tmp_path, capsys, option, value, kind):
    d = tmp_path / "certs"
    code, err = _run(capsys, "generate", "--dir", str(d), option, value)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"taugate certs generate: {option}: {value!r} is not a valid {kind} name")
    assert not d.exists()


def test_a_namespace_may_start_with_a_digit_and_names_of_63_characters_are_accepted(tmp_path, capsys):
    code, err = _run(capsys, "generate", "--dir", str(tmp_path / "c"), "--service", "g" * 63, "--namespace", "9-ops")
    assert code == 0, err
    assert store.inspect(tmp_path / "c").hosts[1] == f"{'g' * 63}.9-ops"
    with pytest.raises(CertError, match="not a valid Service name"):
        service_dns_names("Bad_Name!", "ops")


def test_show_and_rotate_on_a_regular_file_say_it_is_not_a_directory(tmp_path, capsys):
    f = tmp_path / "certs.txt"
    f.write_text("not a directory")
    for action in ("show", "rotate", "generate"):
        code, err = _run(capsys, action, "--dir", str(f))
        assert code == 2 and err == f"taugate certs {action}: {f}: is not a directory\n"
    assert f.read_text() == "not a directory"


def test_sync_checks_its_options_before_reaching_for_the_api(tmp_path, capsys):
    missing = tmp_path / "no-kubeconfig"
    code, err = _run(capsys, "sync", "--secret", "tls", "--namespace", "ops", "--service", "Gate",
                     "--kubeconfig", str(missing))
    assert code == 2 and err.startswith("taugate certs sync: --service: 'Gate' is not a valid Service name")
    code, err = _run(capsys, "sync", "--secret", "tls", "--namespace", "ops", "--service", "gate",
                     "--renew-before-days", "99999999", "--kubeconfig", str(missing))
    assert code == 2 and err.startswith("taugate certs sync: --renew-before-days 99999999: ")


SYNC = ("sync", "--secret", "tls", "--namespace", "ops", "--service", "gate")


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released): connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sync_names_a_missing_kubeconfig_file(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "kubeconfig"
    code, err = _run(capsys, *SYNC, "--kubeconfig", str(missing))
    assert code == 2 and err == f"taugate certs sync: {missing}: the kubeconfig file does not exist\n"


def test_sync_names_a_missing_kubeconfig_from_the_environment_outside_a_pod(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no service account
    missing = tmp_path / "env-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    code, err = _run(capsys, *SYNC)
    assert code == 2
    assert err == f"taugate certs sync: {missing} (from $KUBECONFIG): the kubeconfig file does not exist\n"


def test_sync_against_an_unreachable_api_server_is_one_line_and_exit_1(tmp_path, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    started = time.monotonic()
    code, err = _run(capsys, *SYNC, "--kubeconfig", str(kubeconfig))
    assert time.monotonic() - started < 10
    assert code == 1 and err == f"taugate certs sync: cannot reach the Kubernetes API at {url}: Connection refused\n"
