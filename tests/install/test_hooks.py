"""The chart's hook Jobs do what the install and uninstall depend on, when run exactly as the chart
renders them (their command and args, unchanged) against the kmock Kubernetes API double over
HTTP, in the order Helm runs them:

- the certificate hook at pre-install (no configurations yet: it creates the Secret), then at
  post-install (the configurations exist: it puts the CA into every webhook's caBundle), so the
  API server trusts the certificate the webhook serves for its Service name;
- the pre-delete hook removes both webhook configurations and the Secret, and nothing else.
"""

from __future__ import annotations

import base64
import subprocess
import sys

import kubernetes.client
import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from kubernetes.client.exceptions import ApiException

from taugate import admission_policy
from taugate.models import TauCluster
from taugate.webhook.routes import ROUTES
from tests.install.chart import NAMESPACE, hook_events, one, pod_spec
from tests.kubedouble import KubeDouble
from tests.paths import EXAMPLE_CLUSTER

RESOURCES = (
    ("admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
    ("admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
    ("v1/secrets", "Secret", True),
    ("v1/namespaces", "Namespace", False),
    ("tau.azure.com/v1alpha1/profileplacements", "TauProfilePlacement", False),
    ("apps/v1/deployments", "Deployment", True),  # the cleanup hook stops the operator first (none here)
)
PLACEMENTS = ("tau.azure.com", "v1alpha1", "profileplacements")
SERVICE_DNS = f"taugate-webhook.{NAMESPACE}.svc"


def _kueue_configuration() -> dict:
    """Another product's webhook configuration, which the hooks must not touch."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kueue-webhook-configuration"},
            "webhooks": [{"name": "mjob.kb.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system",
                                                       "path": "/mutate-batch-v1-job"}}}]}


@pytest.fixture()
def cluster(tmp_path):
    """The API double, a kubeconfig for it, and API clients."""
    with KubeDouble(RESOURCES) as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: double\n"
            f"clusters: [{{name: double, cluster: {{server: '{kube.url}'}}}}]\n"
            "users: [{name: hook, user: {token: not-checked}}]\n"
            "contexts: [{name: double, context: {cluster: double, user: hook}}]\n")
        with kube.api_client() as api:
            yield (kubeconfig, kubernetes.client.AdmissionregistrationV1Api(api), kubernetes.client.CoreV1Api(api),
                   kubernetes.client.CustomObjectsApi(api))


def _run(job: dict, kubeconfig) -> subprocess.CompletedProcess:
    """The Job's container, as the pod would run it: ``command`` (else the image's entrypoint,
    ``taugate``) and ``args``, with ``python`` being this interpreter."""
    container = pod_spec(job)["containers"][0]
    command = container.get("command") or [sys.executable, "-m", "taugate.cli"]
    command = [sys.executable if c == "python" else c for c in command]
    return subprocess.run(command + container["args"], env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)


def _gone(read) -> bool:
    try:
        read()
    except ApiException as e:
        return e.status == 404
    return False


def test_the_certificate_hook_gives_the_api_server_a_ca_that_verifies_the_webhooks_certificate(default_objects,
                                                                                               cluster):
    kubeconfig, adm, core, custom = cluster
    job = one(default_objects, "Job", "taugate-certs-hook")
    assert {"pre-install", "post-install"} <= hook_events(job)

    first = _run(job, kubeconfig)  # pre-install: no configurations yet
    assert first.returncode == 0, first.stderr
    secret = core.read_namespaced_secret("taugate-webhook-tls", NAMESPACE)
    mounted = next(v for v in pod_spec(one(default_objects, "Deployment",
                                           "taugate-webhook"))["volumes"] if v["name"] == "tls")
    assert secret.metadata.name == mounted["secret"]["secretName"]
    assert {i["key"] for i in mounted["secret"]["items"]} <= set(secret.data)

    adm.create_mutating_webhook_configuration(one(default_objects, "MutatingWebhookConfiguration", "taugate"))
    adm.create_validating_webhook_configuration(one(default_objects, "ValidatingWebhookConfiguration", "taugate"))
    adm.create_mutating_webhook_configuration(_kueue_configuration())
    second = _run(job, kubeconfig)  # post-install
    assert second.returncode == 0, second.stderr

    secret = core.read_namespaced_secret("taugate-webhook-tls", NAMESPACE)
    served = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    webhooks = (adm.read_mutating_webhook_configuration("taugate").webhooks
                + adm.read_validating_webhook_configuration("taugate").webhooks)
    assert len(webhooks) == len(ROUTES)
    for webhook in webhooks:
        trusted = x509.load_pem_x509_certificates(base64.b64decode(webhook.client_config.ca_bundle))
        # What kube-apiserver does: verify the served chain against caBundle for the Service's name.
        verifier = PolicyBuilder().store(Store(trusted)).build_server_verifier(x509.DNSName(SERVICE_DNS))
        verifier.verify(served, [])
    kueue = adm.read_mutating_webhook_configuration("kueue-webhook-configuration")
    assert kueue.webhooks[0].client_config.ca_bundle is None


def test_the_pre_delete_hook_removes_taugates_configurations_secret_and_admission_policy_only(default_objects, cluster):
    kubeconfig, adm, core, custom = cluster
    job = one(default_objects, "Job", "taugate-cleanup")
    assert hook_events(job) == {"pre-delete"}
    adm.create_mutating_webhook_configuration(one(default_objects, "MutatingWebhookConfiguration", "taugate"))
    adm.create_validating_webhook_configuration(one(default_objects, "ValidatingWebhookConfiguration", "taugate"))
    adm.create_mutating_webhook_configuration(_kueue_configuration())
    core.create_namespaced_secret(NAMESPACE, {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                              "metadata": {"name": "taugate-webhook-tls", "namespace": NAMESPACE},
                                              "data": {"tls.crt": "", "tls.key": ""}})

    for doc in admission_policy.documents():  # the operator's
        (adm.create_validating_admission_policy if doc["kind"] == "ValidatingAdmissionPolicy"
         else adm.create_validating_admission_policy_binding)(doc)
    cluster_doc = next(d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d and d["kind"] == "TauCluster")
    placement = admission_policy.parameters(TauCluster.model_validate(cluster_doc))
    custom.create_cluster_custom_object(*PLACEMENTS, placement)

    done = _run(job, kubeconfig)
    assert done.returncode == 0, done.stderr
    assert _gone(lambda: adm.read_validating_admission_policy(admission_policy.NAME))
    assert _gone(lambda: adm.read_validating_admission_policy_binding(admission_policy.NAME))
    assert _gone(lambda: adm.read_mutating_webhook_configuration("taugate"))
    assert _gone(lambda: adm.read_validating_webhook_configuration("taugate"))
    assert _gone(lambda: core.read_namespaced_secret("taugate-webhook-tls", NAMESPACE))
    assert _gone(lambda: custom.get_cluster_custom_object(*PLACEMENTS, admission_policy.NAME))
    assert not _gone(lambda: adm.read_mutating_webhook_configuration("kueue-webhook-configuration"))

    again = _run(job, kubeconfig)  # a retried or repeated uninstall finds nothing left: still success
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already gone") == 7  # the operator's Deployment too
