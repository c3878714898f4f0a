"""Certificates: one value chooses self-signed (`taugate certs` in hook Jobs and a renewal CronJob)
or cert-manager (Issuer + Certificate + CA injection); either way the Secret the webhook pods mount
is the one that is written, for the Service name the API server calls."""

from __future__ import annotations

import argparse

import pytest

from taugate.cli import build_parser
from tests.install.chart import NAMESPACE, find, hook_events, one, pod_spec

SERVICE_DNS = f"taugate-webhook.{NAMESPACE}.svc"  # the name the API server verifies (Kubernetes rule)


def _tls_secret_of_webhook(objs: list[dict]) -> str:
    volumes = pod_spec(one(objs, "Deployment", "taugate-webhook"))["volumes"]
    tls = next(v for v in volumes if v["name"] == "tls")
    assert [i["key"] for i in tls["secret"]["items"]] == ["tls.crt", "tls.key"]  # never a CA key
    return tls["secret"]["secretName"]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def parse_container_args(args: list[str]) -> argparse.Namespace:
    """Parse a container's args with the real ``taugate`` parser; fail when the command is not
    registered or rejects the flags."""
    parser = build_parser()
    path = [a for a in args if not a.startswith("-")][:2]
    level = parser
    for word in path:
        choices = _subcommands(level)
        if not choices:
            break
        if word not in choices:
            pytest.fail(f"the chart runs `taugate {' '.join(path)}`, which the taugate command does not have "
                        f"(args: {args})")
        level = choices[word]
    try:
        return parser.parse_args(args)
    except SystemExit as e:
        pytest.fail(f"`taugate {' '.join(args)}` does not parse (exit {e.code})")


def test_self_signed_certificates_exist_before_the_webhook_pods_and_reach_the_configurations(default_objects):
    job = one(default_objects, "Job", "taugate-certs-hook")
    # pre-*: the Secret exists before the Deployment's pods mount it (so `helm install --wait`
    # cannot deadlock); post-*: the configurations exist and get the CA bundle.
    assert hook_events(job) == {"pre-install", "pre-upgrade", "post-install", "post-upgrade"}
    args = pod_spec(job)["containers"][0]["args"]
    secret = _tls_secret_of_webhook(default_objects)
    for flag in (f"--secret={secret}", f"--namespace={NAMESPACE}", "--service=taugate-webhook",
                 "--mutating-webhook-configuration=taugate", "--validating-webhook-configuration=taugate"):
        assert flag in args
    assert one(default_objects, "MutatingWebhookConfiguration", "taugate")
    assert one(default_objects, "ValidatingWebhookConfiguration", "taugate")


def test_the_renewal_cronjob_runs_the_same_command_as_the_hooks(default_objects):
    cron = one(default_objects, "CronJob", "taugate-certs")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    hook = one(default_objects, "Job", "taugate-certs-hook")
    assert pod_spec(cron)["containers"][0]["args"] == pod_spec(hook)["containers"][0]["args"]
    assert pod_spec(cron)["serviceAccountName"] == "taugate-certs"  # a permanent account: hook RBAC is gone by then


def test_the_chart_calls_taugate_commands_that_exist(default_objects):
    webhook = pod_spec(one(default_objects, "Deployment", "taugate-webhook"))["containers"][0]
    parsed = parse_container_args(webhook["args"])
    assert parsed.in_cluster and str(parsed.cert_dir) == "/etc/taugate/tls" and parsed.host == "0.0.0.0"
    assert parsed.port == webhook["ports"][0]["containerPort"]


@pytest.mark.parametrize("workload", ["Deployment/taugate-operator", "Job/taugate-certs-hook"])
def test_the_operator_and_certificate_commands_parse(default_objects, workload):
    kind, name = workload.split("/")
    parse_container_args(pod_spec(one(default_objects, kind, name))["containers"][0]["args"])


def test_cert_manager_issues_the_secret_the_webhook_mounts_for_the_service_name(rendered):
    objs = rendered["cert-manager"]
    certificate = one(objs, "Certificate", "taugate-webhook")
    assert certificate["spec"]["secretName"] == _tls_secret_of_webhook(objs)
    assert SERVICE_DNS in certificate["spec"]["dnsNames"]
    # The chain the chart creates: self-signed root -> CA Certificate -> CA Issuer -> serving certificate.
    ca_issuer = one(objs, "Issuer", certificate["spec"]["issuerRef"]["name"])
    ca_secret = ca_issuer["spec"]["ca"]["secretName"]
    ca_certificate = next(c for c in find(objs, "Certificate") if c["spec"]["secretName"] == ca_secret)
    assert ca_certificate["spec"]["isCA"] is True
    assert "selfSigned" in one(objs, "Issuer", ca_certificate["spec"]["issuerRef"]["name"])["spec"]
    # No certificate Jobs in this mode: only the uninstall cleanup hook remains.
    assert [j["metadata"]["name"] for j in find(objs, "Job")] == ["taugate-cleanup"]
    assert find(objs, "CronJob") == []


def test_cert_manager_can_use_an_existing_cluster_issuer(rendered):
    certificate = one(rendered["cert-manager-cluster-issuer"], "Certificate")
    assert certificate["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "ClusterIssuer",
                                                "name": "platform-ca"}
