"""A platform team's whole life with the chart, through the real ``helm`` v3.22.0 (built from its
Go module) against the real API server: install with the values a platform sets, upgrade with the
runbook's emergency switch, rollback, uninstall; every hook the chart has runs (``tests/e2e/helm``
plays the kubelet for the hook Jobs' pods, under their own ServiceAccounts), and each step is
checked on the cluster state read back through the API, not on what helm says.

The chart's hooks: the certificate Job ``taugate-certs-hook`` at pre-install, post-install,
pre-upgrade and post-upgrade, and the cleanup Job ``taugate-cleanup`` at pre-delete. It has none at
rollback (a rollback re-applies the old manifest and keeps the certificates) and no ``helm test``
hooks. No kubelet runs the webhook's and operator's pods, so ``--wait`` is not used (it would wait
for Deployments that never become available); the rendered webhook configurations' clientConfig
names the Service, which has no endpoints here, so admission through the release is proven by the
rest of the tier (``platform.py``), and here the certificate the hooks made is proven to be one the
API server would accept (a TLS handshake checked against the caBundle the hook wrote).
"""

from __future__ import annotations

import base64
import json
import shlex
import socket
import ssl
import threading

import pytest
import yaml

from tests.e2e.controlplane import LOOPBACK, ControlPlane, build
from tests.e2e.helm import Helm, HookKubelet
from tests.paths import REPO
from tests.upstream import pinned

RELEASE, NAMESPACE = "taugate", "taugate-system"
CHART = str(REPO / "charts" / "taugate")
CONFIGURATIONS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
REGISTRY = "registry.example.com/platform"
# Beside the image (the README's --set), what a platform team sets: its admin group, the service
# accounts of its KubeRay and Kueue.
PLATFORM_VALUES = {
    "platformAdmins": {"groups": ["ml-platform-admins"]},
    "webhook": {"trustedControllers": ["system:serviceaccount:ray-system:kuberay-operator",
                                       "system:serviceaccount:kueue-system:kueue-controller-manager",
                                       "system:serviceaccount:kube-system:job-controller",
                                       "system:serviceaccount:kube-system:replicaset-controller"]},
}
# What kube-apiserver's reconciler writes for an API server on the host network at 192.0.2.10
# (pkg/controlplane/reconcilers/endpointsadapter.go: named and labelled after the Service).
API_SERVER_ADDRESS = "192.0.2.10"
API_SERVER_SLICE = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "kubernetes", "namespace": "default",
                                 "labels": {"kubernetes.io/service-name": "kubernetes"}},
                    "addressType": "IPv4", "endpoints": [{"addresses": [API_SERVER_ADDRESS],
                                                          "conditions": {"ready": True}}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}
KEPT_SECRETS = ("taugate-admission-key", "taugate-evidence-key")
CRDS = ("clusters.tau.azure.com", "workspaces.tau.azure.com", "quotarequests.tau.azure.com",
        "tauruns.tau.azure.com", "policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A control plane of its own (the tier's shared one has the chart applied without helm), the
    hook kubelet's Node, and the built helm."""
    bins = build("etcd", "kubernetes", "helm")
    cp = ControlPlane(bins, tmp_path_factory.mktemp("helm-controlplane"))
    kubelet = None
    try:
        cp.start()
        kubelet = HookKubelet(cp, NAMESPACE, tmp_path_factory.mktemp("hooks"))
        kubelet.register_node()
        # The API server's address as its endpoint reconciler publishes it (this tier runs it with
        # --endpoint-reconciler-type=none, so it is written here): the chart looks it up.
        cp.apply_objects([API_SERVER_SLICE])
        kubelet.start()
        helm = Helm(bins["helm"] / "helm", cp, tmp_path_factory.mktemp("helm-home"))
        values = tmp_path_factory.mktemp("platform") / "values.yaml"
        values.write_text(yaml.safe_dump(PLATFORM_VALUES))
        yield cp, helm, kubelet, values
    finally:
        if kubelet is not None:
            kubelet.stop()
        cp.stop()


def _readme_install() -> list[str]:
    """The README's ``helm install`` line, its REGISTRY the platform's."""
    lines = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("helm install taugate ")]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0].replace("REGISTRY", REGISTRY))
    assert words[:4] == ["helm", "install", RELEASE, "charts/taugate"], words
    return [*words[1:3], CHART, *words[4:]]


def _printed(result) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def _webhooks(cp: ControlPlane) -> list[dict]:
    return [w for kind in CONFIGURATIONS for w in cp.get_json(kind, RELEASE)["webhooks"]]


def _failure_policies(webhooks: list[dict]) -> dict[str, str]:
    return {w["name"]: w["failurePolicy"] for w in webhooks}


# As the chart installs them: the workload route Ignore (the API server's admission policy keeps
# the core rule while it is down, docs/runbook.md), every other route Fail.
INSTALLED_FAILURE_POLICIES = {"mutate.workloads.tau.azure.com": "Ignore"}


def _installed(webhooks: list[dict]) -> dict[str, str]:
    return {w["name"]: INSTALLED_FAILURE_POLICIES.get(w["name"], "Fail") for w in webhooks}


def _secret(cp: ControlPlane, name: str) -> dict[str, str]:
    return cp.get_json("secret", name, "-n", NAMESPACE)["data"]


def _hooks_run(kubelet: HookKubelet, since: int = 0) -> list[tuple[str, int]]:
    for p in kubelet.played[since:]:
        print(f"hook Job {p.job} exited {p.exit_code}:\n{p.output}")
    return [(p.job, p.exit_code) for p in kubelet.played[since:]]


def _serving_certificate_is_trusted_by_the_ca_bundle(tls: dict[str, str], ca_bundle: str, workdir) -> None:
    """A real TLS handshake: a server presenting the Secret's certificate, a client that trusts only
    ``ca_bundle`` and checks the Service's name, as the API server calls the webhook."""
    for key in ("tls.crt", "tls.key"):
        (workdir / key).write_bytes(base64.b64decode(tls[key]))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(workdir / "tls.crt"), str(workdir / "tls.key"))
    client_ctx = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
    with socket.create_server((LOOPBACK, 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls_conn:
                tls_conn.recv(1)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        with socket.create_connection((LOOPBACK, port), timeout=10) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=f"{RELEASE}-webhook.{NAMESPACE}.svc") as conn:
            conn.sendall(b"x")
        t.join(10)


def test_the_built_helm_reports_the_version_pinned_in_its_go_module(cluster):
    _, helm, _, _ = cluster
    result = helm("version", "--template", "{{.Version}}")
    assert (result.returncode, result.stdout) == (0, pinned("helm", "helm.sh/helm/v3")[1]), _printed(result)


def test_helm_install_without_an_image_fails_at_render_with_no_release_and_says_how_to_build_one(cluster):
    """Helm installs ``crds/`` before it renders the templates (``pkg/action/install.go``
    ``installCRDs``), so the CRDs are there after the failed install, as for any chart; no release,
    no release object and no hook is."""
    cp, helm, kubelet, _ = cluster
    result = helm("install", RELEASE, CHART, "-n", NAMESPACE, "--create-namespace")
    print(_printed(result))
    assert result.returncode == 1
    assert "image.repository is not set: taugate publishes no image" in result.stderr
    assert "docker build -t REGISTRY/taugate:0.1.0 ." in result.stderr
    assert "--set image.repository=REGISTRY/taugate" in result.stderr
    assert helm("list", "-A", "-a", "-q").stdout.strip() == ""
    assert cp.get_json("deployments,jobs,secrets", "-n", NAMESPACE)["items"] == []
    for kind in CONFIGURATIONS:
        assert cp.kubectl("get", kind, RELEASE, check=False).returncode != 0
    assert kubelet.played == []


def test_the_readmes_helm_install_creates_the_crds_runs_the_certificate_hooks_and_every_release_object(cluster,
                                                                                                       tmp_path):
    cp, helm, kubelet, values = cluster
    result = helm(*_readme_install(), "-f", str(values), "--timeout", "4m")
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert "STATUS: deployed" in result.stdout and "REVISION: 1" in result.stdout
    assert f"Image: {REGISTRY}/taugate:0.1.0" in result.stdout  # NOTES.txt
    # Hooks: the certificate Job at pre-install and post-install, each under its own RBAC.
    assert _hooks_run(kubelet) == [("taugate-certs-hook", 0), ("taugate-certs-hook", 0)], kubelet.played
    # CRDs from crds/ (the policy report ones from crds/policyreports/ too), established.
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in CRDS])
    # The release objects with the platform's values.
    for name in ("taugate-webhook", "taugate-operator"):
        dep = cp.get_json("deployment", name, "-n", NAMESPACE)
        assert dep["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
        assert {c["image"] for c in dep["spec"]["template"]["spec"]["containers"]} == {
            f"{REGISTRY}/taugate:0.1.0"}
    assert cp.get_json("deployment", "taugate-webhook", "-n", NAMESPACE)["spec"]["replicas"] == 2
    operator = cp.get_json("deployment", "taugate-operator", "-n", NAMESPACE)["spec"]
    assert (operator["replicas"], operator["strategy"]["type"]) == (2, "RollingUpdate")  # one leads, one stands by
    assert cp.get_json("poddisruptionbudget", "taugate-operator", "-n", NAMESPACE)["spec"]["maxUnavailable"] == 1
    assert cp.get_json("role", "taugate-operator-leader-election", "-n", NAMESPACE)["rules"][1]["resourceNames"] == [
        "taugate-operator"]
    # Helm's lookup read the API server's address: only it and the tunnel agents reach the webhook.
    policy = cp.get_json("networkpolicy", "taugate-webhook", "-n", NAMESPACE)
    sources = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert {"ipBlock": {"cidr": f"{API_SERVER_ADDRESS}/32"}} in sources, sources
    assert "deprecated" not in result.stderr, result.stderr
    binding = cp.get_json("clusterrolebinding", "taugate-platform-admin")
    assert [s["name"] for s in binding["subjects"]] == ["ml-platform-admins"]
    # docs/quotas.md's review: a platform admin patches the request and reads the ClusterQueue it would
    # change (this cluster serves no Kueue, so kubectl auth can-i cannot be asked about its kinds)
    admin = cp.user_kubeconfig("pat", ("ml-platform-admins",))
    can = cp.kubectl("auth", "can-i", "patch", "quotarequests.tau.azure.com", "-A", kubeconfig=admin, check=False)
    assert can.stdout.strip() == "yes", (can.stdout, can.stderr)
    kueue_reads = [r for r in cp.get_json("clusterrole", "taugate-platform-admin")["rules"]
                   if r["apiGroups"] == ["kueue.x-k8s.io"]]
    assert kueue_reads and {"clusterqueues", "workloads"} <= set(kueue_reads[0]["resources"]), kueue_reads
    assert set(kueue_reads[0]["verbs"]) == {"get", "list", "watch"}
    # The post-install hook wrote the CA into both configurations; the pre-install hook made the
    # serving certificate for the Service, which that CA verifies.
    webhooks = _webhooks(cp)
    assert webhooks and _failure_policies(webhooks) == _installed(webhooks)
    assert set(INSTALLED_FAILURE_POLICIES) <= set(_failure_policies(webhooks))
    tls = _secret(cp, "taugate-webhook-tls")
    assert {w["clientConfig"]["caBundle"] for w in webhooks} == {tls["ca.crt"]}
    _serving_certificate_is_trusted_by_the_ca_bundle(tls, tls["ca.crt"], tmp_path)
    # hook-succeeded: the hook Jobs and their RBAC are gone once they succeeded.
    assert cp.kubectl("get", "job,serviceaccount,role", "taugate-certs-hook", "-n", NAMESPACE,
                      check=False).returncode != 0
    for name in KEPT_SECRETS:
        assert _secret(cp, name)


def test_helm_upgrade_with_the_emergency_switch_relaxes_every_webhook_and_keeps_keys_and_certificates(cluster):
    cp, helm, kubelet, _ = cluster
    before = {name: _secret(cp, name) for name in (*KEPT_SECRETS, "taugate-webhook-tls")}
    played = len(kubelet.played)
    result = helm("upgrade", RELEASE, CHART, "-n", NAMESPACE, "--reuse-values",
                  "--set", "admissionPolicy.enabled=false,webhook.failurePolicy=Ignore", "--timeout", "4m")
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert "REVISION: 2" in result.stdout and "deprecated" not in result.stderr, result.stderr
    assert _hooks_run(kubelet, played) == [("taugate-certs-hook", 0), ("taugate-certs-hook", 0)]
    webhooks = _webhooks(cp)
    assert {w["failurePolicy"] for w in webhooks} == {"Ignore"}
    # The generated keys are looked up and kept (a new admission key would orphan every record),
    # the certificate is still valid so the hooks left it, and caBundle (never rendered) stays.
    for name, data in before.items():
        assert _secret(cp, name) == data, name
    assert {w["clientConfig"]["caBundle"] for w in webhooks} == {before["taugate-webhook-tls"]["ca.crt"]}
    # --reuse-values kept the platform's values.
    assert cp.get_json("clusterrolebinding", "taugate-platform-admin")["subjects"][0]["name"] == "ml-platform-admins"


def _install_md_upgrade() -> list[list[str]]:
    """The commands of docs/install.md's "Upgrade" block, NEW being tag 0.1.1."""
    text = (REPO / "docs" / "install.md").read_text().split("## Upgrade", 1)[1]
    block = text.split("```", 2)[1]
    return [shlex.split(line.replace("NEW", "0.1.1"), comments=True) for line in block.splitlines() if line.strip()]


def test_the_install_guides_upgrade_applies_the_crds_and_rolls_the_image_keeping_the_platforms_values(cluster):
    cp, helm, kubelet, _ = cluster
    apply_crds, upgrade = _install_md_upgrade()
    assert apply_crds[:2] == ["kubectl", "apply"] and upgrade[:3] == ["helm", "upgrade", RELEASE], (apply_crds, upgrade)
    cp.kubectl(*[str(REPO / w) if w.startswith("charts/") else w for w in apply_crds[1:]])
    played = len(kubelet.played)
    result = helm(*[CHART if w == "charts/taugate" else w for w in upgrade[1:]], "--timeout", "4m")
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert "REVISION: 3" in result.stdout
    assert _hooks_run(kubelet, played) == [("taugate-certs-hook", 0), ("taugate-certs-hook", 0)]
    for name in ("taugate-webhook", "taugate-operator"):
        containers = cp.get_json("deployment", name, "-n", NAMESPACE)["spec"]["template"]["spec"]["containers"]
        assert {c["image"] for c in containers} == {f"{REGISTRY}/taugate:0.1.1"}
    assert cp.get_json("cronjob", "taugate-certs", "-n", NAMESPACE)["spec"]["jobTemplate"]["spec"]["template"][
        "spec"]["containers"][0]["image"] == f"{REGISTRY}/taugate:0.1.1"
    # --reuse-values kept the emergency switch of the revision before, as it keeps every value.
    assert {w["failurePolicy"] for w in _webhooks(cp)} == {"Ignore"}


def test_helm_rollback_restores_the_failure_policy_and_keeps_the_ca_bundle_the_hooks_wrote(cluster):
    cp, helm, kubelet, _ = cluster
    tls = _secret(cp, "taugate-webhook-tls")
    keys = {name: _secret(cp, name) for name in KEPT_SECRETS}
    played = len(kubelet.played)
    result = helm("rollback", RELEASE, "1", "-n", NAMESPACE, "--timeout", "4m")
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert "Rollback was a success" in result.stdout
    assert _hooks_run(kubelet, played) == []  # the chart has no rollback hooks
    webhooks = _webhooks(cp)
    assert _failure_policies(webhooks) == _installed(webhooks)
    image = cp.get_json("deployment", "taugate-webhook", "-n", NAMESPACE)["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == f"{REGISTRY}/taugate:0.1.0"
    # Helm's three-way merge leaves the caBundle the hook patched in (in neither manifest).
    assert {w["clientConfig"]["caBundle"] for w in webhooks} == {tls["ca.crt"]}
    assert {name: _secret(cp, name) for name in KEPT_SECRETS} == keys
    history = json.loads(helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "superseded"),
                                                                 (3, "superseded"), (4, "deployed")]
    assert history[-1]["description"] == "Rollback to 1"


def test_helm_test_finds_no_tests_in_the_chart(cluster):
    _, helm, _, _ = cluster
    result = helm("test", RELEASE, "-n", NAMESPACE)
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert "TEST SUITE: None" in result.stdout


def test_helm_uninstall_runs_the_cleanup_hook_removes_the_release_and_keeps_keys_evidence_and_crds(cluster):
    cp, helm, kubelet, _ = cluster
    played = len(kubelet.played)
    result = helm("uninstall", RELEASE, "-n", NAMESPACE, "--timeout", "4m")
    print(_printed(result))
    assert result.returncode == 0, _printed(result)
    assert f'release "{RELEASE}" uninstalled' in result.stdout
    assert _hooks_run(kubelet, played) == [("taugate-cleanup", 0)]
    cleanup = kubelet.played[played:]
    # The operator stops first (its pods deleted by the ReplicaSet controller, then by this tier's
    # kubelet), so that it cannot put the policy, its binding and its parameter back.
    lines = cleanup[0].output.splitlines()
    scaled = lines.index(f"scaled Deployment/{NAMESPACE}/taugate-operator to 0")
    gone = lines.index("the operator's pods are gone")
    assert scaled < gone < lines.index("deleted MutatingWebhookConfiguration/taugate"), lines
    assert cp.get_json("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"] == []
    assert "deleted MutatingWebhookConfiguration/taugate" in cleanup[0].output
    assert "deleted ValidatingWebhookConfiguration/taugate" in cleanup[0].output
    assert "deleted Secret/taugate-system/taugate-webhook-tls" in cleanup[0].output
    for kind in CONFIGURATIONS:
        assert cp.kubectl("get", kind, RELEASE, check=False).returncode != 0
    assert cp.kubectl("get", "secret", "taugate-webhook-tls", "-n", NAMESPACE, check=False).returncode != 0
    assert cp.get_json("deployments", "-n", NAMESPACE)["items"] == []
    assert cp.kubectl("get", "clusterrole", "taugate-webhook", check=False).returncode != 0
    # helm.sh/resource-policy: keep, so records signed before stay verifiable after a reinstall.
    for name in KEPT_SECRETS:
        assert _secret(cp, name)
    assert cp.get_json("pvc", "taugate-evidence", "-n", NAMESPACE)
    for crd in CRDS:  # Helm never deletes what it installed from crds/
        cp.kubectl("get", "crd", crd)
    assert helm("list", "-A", "-a", "-q").stdout.strip() == ""
