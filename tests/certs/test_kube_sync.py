"""``taugate certs sync`` against an HTTP Kubernetes API double (kmock through tests/kubedouble.py,
the official client unpatched): the TLS Secret and the webhook configurations' caBundle, with a
CA rotation spread over runs so that the new CA is everywhere before it signs what is served."""

from __future__ import annotations

import base64
import datetime as dt
import json

import kubernetes.client as k
import pytest
import yaml

from taugate import labels
from taugate.certs import kube as certs_kube
from taugate.certs.pki import CertError, fingerprint, issued_by, load_certificates
from taugate.cli import main
from taugate.kube import Kube
from taugate.webhook.routes import ROUTES
from tests.kubedouble import RESOURCES, KubeDouble

NS, SECRET, SVC, CONFIG = "taugate-system", "taugate-webhook-tls", "taugate-webhook", "taugate"
EXTRA = (("v1/secrets", "Secret", True),
         ("admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
         ("admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False))
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture
def kube():
    with KubeDouble(RESOURCES + EXTRA) as double:
        yield double


@pytest.fixture
def api(kube):
    with kube.api_client() as client:
        yield client


def _configuration(kind: str) -> dict:
    """The webhook configuration of one type, from the route table the chart is rendered from."""
    hooks = [{"name": r.name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 3,
              "clientConfig": {"service": {"name": SVC, "namespace": NS, "path": r.path, "port": 443}},
              "rules": [{"apiGroups": list(x.api_groups), "apiVersions": list(x.api_versions),
                         "resources": list(x.resources), "operations": list(x.operations)} for x in r.rules]}
             for r in ROUTES if r.type == kind]
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration" if kind == "mutating" else "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIG}, "webhooks": hooks}


def _install_configurations(api) -> None:
    adm = k.AdmissionregistrationV1Api(api)
    adm.create_mutating_webhook_configuration(_configuration("mutating"))
    adm.create_validating_webhook_configuration(_configuration("validating"))


def _read(call, *args) -> dict:
    return json.loads(call(*args, _preload_content=False).data)


def _secret(api) -> dict:
    return _read(k.CoreV1Api(api).read_namespaced_secret, SECRET, NS)


def _item(secret: dict, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def _ca_bundles(api) -> list[bytes]:
    adm = k.AdmissionregistrationV1Api(api)
    out = []
    for read in (adm.read_mutating_webhook_configuration, adm.read_validating_webhook_configuration):
        out += [base64.b64decode(w["clientConfig"]["caBundle"]) for w in _read(read, CONFIG)["webhooks"]]
    return out


def _sync(api, **kw):
    kw.setdefault("mutating", CONFIG)
    kw.setdefault("validating", CONFIG)
    return certs_kube.sync(Kube(api), secret=SECRET, namespace=NS, service=SVC, **kw)


def test_a_first_sync_creates_the_tls_secret_and_sets_every_caBundle_and_a_second_one_writes_nothing(kube, api):
    _install_configurations(api)
    result = _sync(api)
    assert result.actions[0] == "created a CA and a serving certificate for taugate-webhook.taugate-system.svc"
    secret = _secret(api)
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert secret["metadata"]["labels"] == {labels.MANAGED_BY: "taugate"}
    leaf = load_certificates(_item(secret, "tls.crt"))[0]
    assert result.status.hosts == ["taugate-webhook", "taugate-webhook.taugate-system",
                                   "taugate-webhook.taugate-system.svc",
                                   "taugate-webhook.taugate-system.svc.cluster.local"]  # no localhost in a cluster
    assert issued_by(leaf, load_certificates(_item(secret, "ca.crt"))[0])
    assert _ca_bundles(api) == [_item(secret, "ca.crt")] * len(ROUTES)
    start = kube.request_count()
    again = _sync(api)
    assert kube.writes(start) == []
    assert "nothing to renew" in again.actions[0]


def test_before_the_configurations_exist_the_secret_is_created_and_the_caBundle_left_for_later(kube, api):
    result = _sync(api)
    assert result.actions[1:] == ["MutatingWebhookConfiguration taugate: not found (yet); caBundle not set",
                                  "ValidatingWebhookConfiguration taugate: not found (yet); caBundle not set"]
    _install_configurations(api)  # the post-install hook runs the same command
    result = _sync(api)
    mutating = sum(r.type == "mutating" for r in ROUTES)
    assert result.actions[1:] == [f"MutatingWebhookConfiguration taugate: caBundle set on {mutating} webhook(s)",
                                  f"ValidatingWebhookConfiguration taugate: caBundle set on {len(ROUTES) - mutating} "
                                  f"webhook(s)"]


def test_an_expiring_ca_is_published_first_and_switched_only_after_the_propagation_time(kube, api):
    _install_configurations(api)
    _sync(api, days=20)  # a CA expiring within renewBeforeDays (30)
    first = _secret(api)
    old_ca = load_certificates(_item(first, "ca.crt"))[0]
    # Run 1: publish. Both CAs are trusted everywhere; the served certificate is unchanged.
    r1 = _sync(api, days=365, now=NOW)
    s1 = _secret(api)
    bundle = load_certificates(_item(s1, "ca.crt"))
    assert [fingerprint(c) for c in bundle][0] == fingerprint(old_ca) and len(bundle) == 2
    assert _item(s1, "tls.crt") == _item(first, "tls.crt")
    assert "ca-next.key" in s1["data"] and s1["metadata"]["annotations"][labels.CA_PUBLISHED_AT]
    assert _ca_bundles(api) == [_item(s1, "ca.crt")] * len(ROUTES)
    assert r1.actions[0].startswith("published a new CA")
    # Run 2, five minutes later: too early to switch; nothing is written.
    start = kube.request_count()
    r2 = _sync(api, days=365, now=NOW + dt.timedelta(minutes=5))
    assert r2.actions[0].startswith("rotation pending") and kube.writes(start) == []
    # Run 3, after the propagation time: the serving certificate comes from the new CA.
    r3 = _sync(api, days=365, now=NOW + dt.timedelta(minutes=11))
    s3 = _secret(api)
    leaf = load_certificates(_item(s3, "tls.crt"))[0]
    assert r3.actions[0] == "switched the serving certificate to the new CA"
    assert issued_by(leaf, bundle[1]) and not issued_by(leaf, old_ca)
    assert "ca-next.key" not in s3["data"] and labels.CA_PUBLISHED_AT not in (s3["metadata"].get("annotations") or {})
    assert _item(s3, "ca.crt") == _item(s1, "ca.crt")  # trust did not change at the switch
    assert load_certificates(_item(s3, "ca.crt"))[1].not_valid_after_utc > NOW + dt.timedelta(days=300)


def test_a_renamed_service_gets_a_new_serving_certificate_from_the_same_ca(kube, api):
    _install_configurations(api)
    _sync(api)
    before = _secret(api)
    result = certs_kube.sync(Kube(api), secret=SECRET, namespace=NS, service="gate", mutating=CONFIG, validating=CONFIG)
    after = _secret(api)
    assert "did not name gate, gate.taugate-system" in result.actions[0]
    assert _item(after, "ca.crt") == _item(before, "ca.crt") and result.status.hosts[0] == "gate"
    assert result.actions[1:] == ["MutatingWebhookConfiguration taugate: caBundle up to date",
                                  "ValidatingWebhookConfiguration taugate: caBundle up to date"]


def test_a_damaged_secret_is_reported_by_key_and_never_replaced(kube, api):
    _sync(api)
    k.CoreV1Api(api).patch_namespaced_secret(SECRET, NS, {"data": {"tls.key": base64.b64encode(b"junk").decode()}},
                                             _content_type="application/merge-patch+json")
    start = kube.request_count()
    with pytest.raises(CertError, match=f"Secret {NS}/{SECRET} key tls.key: not an unencrypted PEM private key"):
        _sync(api)
    assert kube.writes(start) == []


def test_the_sync_command_talks_to_the_api_named_by_the_kubeconfig(kube, api, tmp_path, capsys):
    _install_configurations(api)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": kube.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "u"}}]}))
    args = ["certs", "sync", "--kubeconfig", str(kubeconfig), "--secret", SECRET, "--namespace", NS,
            "--service", SVC, "--mutating-webhook-configuration", CONFIG, "--validating-webhook-configuration", CONFIG]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    validating = sum(r.type == "validating" for r in ROUTES)
    assert out[0].startswith("created a CA") and out[2].endswith(f"caBundle set on {validating} webhook(s)")
    k.CoreV1Api(api).patch_namespaced_secret(SECRET, NS, {"data": {"ca.crt": "bm90IGEgY2VydA=="}},
                                             _content_type="application/merge-patch+json")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"Secret {NS}/{SECRET} key ca.crt" in err
