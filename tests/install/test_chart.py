"""The chart lints, renders for every variant, and every object it renders is one the Kubernetes
1.30 and 1.35 API servers accept (kubernetes-validate --strict, plus the enums and ranges that
tool does not check)."""

from __future__ import annotations

import copy

import helm_python
import jsonschema
import kubernetes_validate
import pytest

from tests.install import custom_resources
from tests.install.chart import (
    CHART,
    KUBERNETES_VERSIONS,
    VARIANTS,
    crds,
    find,
    install_values,
    objects,
    one,
    pod_spec,
    render,
    webhook_configuration_problems,
    workload_problems,
)

CUSTOM_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")


def _short(error: Exception) -> str:
    return str(error).split("\n", 1)[0][:300]


@pytest.mark.parametrize("kube_version", [f"v{v}" for v in KUBERNETES_VERSIONS])
def test_helm_lint_passes_without_errors_or_warnings(kube_version):
    report = helm_python.lint(CHART, install_values(), strict=True, kube_version=kube_version)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_object_is_valid_for_kubernetes_1_30_and_1_35(rendered, variant):
    invalid = []
    for obj in rendered[variant] + crds():
        if obj["apiVersion"].startswith(CUSTOM_GROUPS):
            try:
                custom_resources.validate(obj)
            except jsonschema.ValidationError as e:
                invalid.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message}")
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                invalid.append(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {_short(e)}")
    assert invalid == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_enum_and_range_fields_hold_values_the_api_server_accepts(rendered, variant):
    problems = []
    for obj in rendered[variant]:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            problems += webhook_configuration_problems(obj)
        problems += workload_problems(obj)
    assert problems == []


def test_the_enum_checks_catch_values_kubernetes_validate_lets_through(default_objects):
    config = copy.deepcopy(one(default_objects, "MutatingWebhookConfiguration"))
    webhook = config["webhooks"][0]
    webhook.update(failurePolicy="Sometimes", timeoutSeconds=31, sideEffects="Some", reinvocationPolicy="Always",
                   matchPolicy="Fuzzy")
    webhook["rules"][0]["resources"].append("rayjobs/status")
    kubernetes_validate.validate(config, "1.30.0", strict=True)  # the schema alone accepts all of it
    problems = " ".join(webhook_configuration_problems(config))
    for field in ("failurePolicy", "timeoutSeconds", "sideEffects", "reinvocationPolicy", "matchPolicy",
                  "rayjobs/status"):
        assert field in problems


def test_each_variant_renders_the_objects_it_promises(rendered):
    kinds = {name: {o["kind"] for o in objs} for name, objs in rendered.items()}
    assert {"Issuer", "Certificate"} <= kinds["cert-manager"]
    assert "CronJob" in kinds["default"] and "Certificate" not in kinds["default"]
    assert "Issuer" not in kinds["cert-manager-cluster-issuer"]  # an existing ClusterIssuer is used
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds["high-availability"]
    assert "PriorityClass" not in kinds["high-availability"]  # an existing class is named instead
    for objs in rendered.values():
        assert {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration"} <= {o["kind"] for o in objs}


def test_the_webhook_runs_two_replicas_with_a_disruption_budget_and_anti_affinity(default_objects):
    deploy = one(default_objects, "Deployment", "taugate-webhook")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(default_objects, "PodDisruptionBudget", "taugate-webhook")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    spec = pod_spec(deploy)
    soft = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert soft[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spec["priorityClassName"] == one(default_objects, "PriorityClass")["metadata"]["name"]
    container = spec["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_high_availability_requires_one_replica_per_node(rendered):
    deploy = one(rendered["high-availability"], "Deployment", "taugate-webhook")
    assert deploy["spec"]["replicas"] == 3
    hard = pod_spec(deploy)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert hard[0]["topologyKey"] == "kubernetes.io/hostname"
    assert pod_spec(deploy)["priorityClassName"] == "system-cluster-critical"


def test_two_operator_replicas_elect_one_leader_on_a_lease_and_roll_without_a_gap(default_objects):
    deploy = one(default_objects, "Deployment", "taugate-operator")
    assert deploy["spec"]["replicas"] == 2
    # Leader election makes an overlap safe: the new pod stands by until the old one releases the Lease.
    assert deploy["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1,
                                                                                     "maxUnavailable": 0}}
    container = pod_spec(deploy)["containers"][0]
    assert "--leader-elect" in container["args"]
    assert "--leader-elect-lease-name=taugate-operator" in container["args"]
    assert {"--leader-elect-lease-duration=15", "--leader-elect-renew-deadline=10",
            "--leader-elect-retry-period=2"} <= set(container["args"])
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"  # a standby answers it too
    pdb = one(default_objects, "PodDisruptionBudget", "taugate-operator")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    render({"operator": {"replicas": 3}})  # any number: one acts


def test_the_operator_replicas_share_a_node_only_while_the_evidence_volume_attaches_to_one(default_objects):
    labels = one(default_objects, "Deployment", "taugate-operator")["spec"]["template"]["metadata"]["labels"]
    # The default evidence claim is ReadWriteOnce: every replica goes where the others run.
    affinity = pod_spec(one(default_objects, "Deployment", "taugate-operator"))["affinity"]
    (term,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    assert one(default_objects, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOnce"]
    # A ReadWriteMany claim, or no volume at all: the replicas spread over nodes instead.
    for values in ({"persistence": {"accessMode": "ReadWriteMany"}}, {"persistence": {"enabled": False}}):
        objs = objects({"operator": {"evidence": values}})
        spec = pod_spec(one(objs, "Deployment", "taugate-operator"))
        assert "podAffinity" not in spec["affinity"], values
        assert spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"], values
    rwx = objects({"operator": {"evidence": {"persistence": {"accessMode": "ReadWriteMany"}}}})
    assert one(rwx, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("timing, message", [
    ({"leaseDurationSeconds": 10, "renewDeadlineSeconds": 10}, "must be greater than renewDeadlineSeconds"),
    ({"renewDeadlineSeconds": 2, "retryPeriodSeconds": 2}, "must be greater than 1.2 x retryPeriodSeconds"),
])
def test_a_lease_timing_a_leader_could_outlive_is_refused_at_render(timing, message):
    with pytest.raises(helm_python.HelmRenderError, match=message):
        render({"operator": {"leaderElection": timing}})


def test_the_services_select_their_pods_and_name_real_ports(default_objects):
    for service in find(default_objects, "Service"):
        pods = [d for d in find(default_objects, "Deployment")
                if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(pods) == 1, service["metadata"]["name"]
        port_names = {p["name"] for c in pod_spec(pods[0])["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names


def test_the_network_policies_select_the_pods_and_open_the_webhook_port(default_objects):
    deployments = {d["metadata"]["name"]: d for d in find(default_objects, "Deployment")}
    for policy in find(default_objects, "NetworkPolicy"):
        wanted = policy["spec"]["podSelector"]["matchLabels"].items()
        selected = [n for n, d in deployments.items() if wanted <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1 and set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        if selected == ["taugate-webhook"]:
            webhook_port = pod_spec(deployments["taugate-webhook"])["containers"][0]["ports"][0]["containerPort"]
            assert any(p["port"] == webhook_port for rule in policy["spec"]["ingress"] for p in rule["ports"])


@pytest.mark.parametrize("values, message", [
    ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    ({"webhook": {"timeoutSeconds": 0}}, "timeoutSeconds"),
    ({"webhook": {"reinvocationPolicy": "Always"}}, "reinvocationPolicy"),
    ({"webhook": {"matchPolicy": "Fuzzy"}}, "matchPolicy"),
    ({"certs": {"mode": "vault"}}, "certs/mode"),
    ({"webhook": {"replicas": 0}}, "webhook/replicas"),
    ({"webhook": {"failurePolicyOverrides": {"mutate": "Never"}}}, "failurePolicyOverrides"),
    ({"webhook": {"failurPolicy": "Ignore"}}, "failurPolicy"),
    ({"ray": {"shutdownAfterJobFinishes": "ignore"}}, "shutdownAfterJobFinishes"),
])
def test_the_values_schema_rejects_bad_values_with_the_field_named(values, message):
    with pytest.raises(helm_python.HelmValuesError, match=message):
        render(values)


@pytest.mark.parametrize("values, namespace, message", [
    ({"webhook": {"admissionDeadlineSeconds": 3, "timeoutSeconds": 3}}, "taugate-system",
     "must be below webhook.timeoutSeconds"),
    ({"systemNamespace": "taugate-system"}, "taugate-system", "must differ from the release namespace"),
    ({"webhook": {"failurePolicyOverrides": {"mutating": "Ignore"}}}, "taugate-system", 'names route "mutating"'),
    ({"webhook": {"opa": {"enabled": True, "timeoutSeconds": 2}}}, "taugate-system",
     r"webhook.opa.timeoutSeconds \(2\) must be below webhook.admissionDeadlineSeconds"),
    ({"webhook": {"opa": {"enabled": True, "port": 8443}}}, "taugate-system", "must differ from webhook.port"),
])
def test_settings_that_would_break_admission_fail_the_render_with_a_reason(values, namespace, message):
    with pytest.raises(helm_python.HelmRenderError, match=message):
        render(values, namespace=namespace)


def _webhook_sources(objects) -> list[dict]:
    policy = next(p for p in find(objects, "NetworkPolicy") if p["metadata"]["name"] == "taugate-webhook")
    (rule,) = policy["spec"]["ingress"]
    assert rule.get("from"), "an empty or missing `from` admits every source"
    return rule["from"]


def test_by_default_the_webhook_port_admits_only_the_api_servers_sources_never_any_source():
    # Rendered without a cluster (helm template): no EndpointSlice to look up and the API server
    # CIDRs are the catch-all default, so only the konnectivity agents' namespace is admitted.
    sources = _webhook_sources(objects({}))
    assert sources == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system"]}]}}]


def test_the_webhook_sources_add_the_api_server_cidrs_extra_sources_and_metrics_scrapers():
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    eks = {"ipBlock": {"cidr": "192.168.0.0/19"}}
    sources = _webhook_sources(objects({"networkPolicy": {
        "apiServer": {"cidrs": ["10.1.0.10/32", "0.0.0.0/0"]},
        "apiServerSources": [eks], "metricsFrom": [monitoring]}}))
    assert sources[1:] == [{"ipBlock": {"cidr": "10.1.0.10/32"}}, eks, monitoring]


def test_an_explicit_webhook_from_replaces_the_defaults_and_no_source_at_all_is_refused():
    anywhere = [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    assert _webhook_sources(objects({"networkPolicy": {"webhookFrom": anywhere}})) == anywhere
    with pytest.raises(helm_python.HelmRenderError, match="no source may reach the webhook port"):
        objects({"networkPolicy": {"apiServerNamespaces": []}})


def test_the_opa_sidecar_is_off_by_default_and_when_on_serves_the_webhook_on_loopback(rendered):
    from taugate.cli import build_parser

    default = pod_spec(one(rendered["default"], "Deployment", "taugate-webhook"))
    assert "initContainers" not in default
    assert not any("opa" in arg for arg in default["containers"][0]["args"])
    spec = pod_spec(one(rendered["opa-sidecar"], "Deployment", "taugate-webhook"))
    [opa] = spec["initContainers"]  # a native sidecar: started, and healthy, before the webhook
    assert opa["restartPolicy"] == "Always" and opa["args"][:2] == ["run", "--server"]
    assert "--addr=127.0.0.1:8181" in opa["args"], "OPA's REST API has no authentication: loopback only"
    assert opa["startupProbe"]["httpGet"] == {"path": "/health", "port": "opa-diagnostic"}
    webhook = spec["containers"][0]
    args = build_parser().parse_args(webhook["args"])  # what taugate serve will read
    assert (args.policy_backend, args.opa_url) == ("opa", "http://127.0.0.1:8181")
    env = {e["name"]: e.get("value") for e in webhook["env"]}
    assert float(env["TAUGATE_OPA_TIMEOUT_SECONDS"]) < float(env["TAUGATE_ADMISSION_DEADLINE_SECONDS"])


def test_the_unmanaged_gpu_workloads_value_reaches_the_webhooks_settings():
    from taugate.settings import Settings

    for value in ("deny", "warn"):
        webhook = pod_spec(one(objects({"webhook": {"unmanagedGpuWorkloads": value}}), "Deployment",
                               "taugate-webhook"))["containers"][0]
        env = {e["name"]: e.get("value") for e in webhook["env"] if e["name"] == "TAUGATE_UNMANAGED_GPU_WORKLOADS"}
        assert env == {"TAUGATE_UNMANAGED_GPU_WORKLOADS": value}
        assert Settings(unmanaged_gpu_workloads=env["TAUGATE_UNMANAGED_GPU_WORKLOADS"]).unmanaged_gpu_workloads == value
    default = pod_spec(one(objects(), "Deployment", "taugate-webhook"))["containers"][0]
    assert {"name": "TAUGATE_UNMANAGED_GPU_WORKLOADS", "value": "deny"} in default["env"]


def test_the_ray_shutdown_value_reaches_the_webhooks_settings():
    from taugate.settings import Settings

    for value in ("set", "refuse"):
        webhook = pod_spec(one(objects({"ray": {"shutdownAfterJobFinishes": value}}), "Deployment",
                               "taugate-webhook"))["containers"][0]
        env = {e["name"]: e.get("value") for e in webhook["env"]
               if e["name"] == "TAUGATE_RAY_SHUTDOWN_AFTER_JOB_FINISHES"}
        assert env == {"TAUGATE_RAY_SHUTDOWN_AFTER_JOB_FINISHES": value}
        assert Settings(ray_shutdown_after_job_finishes=value).ray_shutdown_after_job_finishes == value
    default = pod_spec(one(objects(), "Deployment", "taugate-webhook"))["containers"][0]
    assert {"name": "TAUGATE_RAY_SHUTDOWN_AFTER_JOB_FINISHES", "value": "set"} in default["env"]
