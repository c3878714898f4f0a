"""The rendered Mutating/ValidatingWebhookConfigurations agree with webhook/routes.py ROUTES and can
neither deadlock the cluster nor block taugate itself: workspace namespaces only, never kube-system
or taugate's namespace, never a subresource, taugate's operator skipped."""

from __future__ import annotations

import importlib.util

import cel
import pytest

from taugate import labels
from taugate.kinds import KINDS
from taugate.settings import Settings
from taugate.unmanaged import UNMANAGED_KINDS
from taugate.webhook.routes import ROUTES
from tests.install.chart import (
    NAMESPACE,
    REPO,
    find,
    namespace_labels,
    objects,
    one,
    pod_spec,
    routes_file,
    selector_matches,
)

CONFIG_KINDS = {"mutating": "MutatingWebhookConfiguration", "validating": "ValidatingWebhookConfiguration"}
WORKLOAD_RESOURCES = ({k.resource for k in KINDS} | {u.resource for u in UNMANAGED_KINDS}
                      | {"resourceclaims", "resourceclaimtemplates"})  # DRA claims: webhook/claims.py
DEBUG_SUBRESOURCE = "pods/ephemeralcontainers"
"""The one subresource a rule names: ``kubectl debug``'s containers, judged for device access."""
WORKLOAD_GROUPS = {k.group for k in KINDS} | {u.group for u in UNMANAGED_KINDS} | {"resource.k8s.io"}
TAU_RESOURCES = {"clusters", "workspaces", "quotarequests"}


def _chart_routes_script():
    spec = importlib.util.spec_from_file_location("chart_routes", REPO / "scripts" / "chart_routes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _webhooks(objs: list[dict]) -> dict[str, tuple[str, dict]]:
    """webhook name -> (configuration kind, webhook)."""
    out = {}
    for kind in CONFIG_KINDS.values():
        for config in find(objs, kind):
            for w in config["webhooks"]:
                assert w["name"] not in out
                out[w["name"]] = (kind, w)
    return out


def test_the_charts_routes_file_is_generated_from_the_current_routes():
    script = _chart_routes_script()
    assert (REPO / "charts/taugate/files/routes.json").read_text() == script.render(), \
        "charts/taugate/files/routes.json is stale: run python scripts/chart_routes.py"
    assert script.main(["--check"]) == 0


def test_the_rendered_configurations_agree_with_routes(default_objects):
    webhooks = _webhooks(default_objects)
    assert set(webhooks) == {r.name for r in ROUTES}
    service = one(default_objects, "Service", "taugate-webhook")
    https_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "https")
    for route in ROUTES:
        kind, w = webhooks[route.name]
        assert kind == CONFIG_KINDS[route.type]
        assert w["clientConfig"]["service"] == {"name": "taugate-webhook", "namespace": NAMESPACE,
                                                "path": route.path, "port": https_port}
        assert [(r["apiGroups"], r["apiVersions"], r["resources"], r["operations"]) for r in w["rules"]] == [
            (list(r.api_groups), list(r.api_versions), list(r.resources), list(r.operations)) for r in route.rules]


def test_one_call_decides_every_managed_and_unmanaged_kind_and_the_other_only_scales_claims_and_debug(default_objects):
    webhooks = _webhooks(default_objects)
    scalable = {(k.group, k.version, f"{k.resource}/scale") for k in KINDS if k.scale_path}
    for route in ("/mutate", "/validate"):
        name = next(r["name"] for r in routes_file() if r["path"] == route)
        _, w = webhooks[name]
        rules = {(g, v, res) for r in w["rules"]
                 for g in r["apiGroups"] for v in r["apiVersions"] for res in r["resources"]}
        objects_ = {(k.group, k.version, k.resource) for k in KINDS} | \
            {(u.group, u.version, u.resource) for u in UNMANAGED_KINDS}
        claims = {("resource.k8s.io", "v1", "resourceclaims"), ("resource.k8s.io", "v1", "resourceclaimtemplates"),
                  ("", "v1", DEBUG_SUBRESOURCE)}
        # one call per create or update (/mutate decides both); the validating webhook judges only what has
        # no object to mutate: kubectl scale / an HPA on every kind with a scale subresource, DRA claims
        # when created and kubectl debug's containers (webhook/claims.py)
        assert rules == (scalable | claims if route == "/validate" else objects_), name
        for r in w["rules"]:
            scales = ["/scale" in res for res in r["resources"]]
            assert all(scales) or not any(scales), (name, r)
            if r["apiGroups"] == ["resource.k8s.io"]:
                assert r["operations"] == ["CREATE"], (name, r)
            else:
                assert r["operations"] == (["UPDATE"] if all(scales) or r["resources"] == [DEBUG_SUBRESOURCE]
                                           else ["CREATE", "UPDATE"]), (name, r)


def test_rules_name_only_workload_kinds_and_tau_kinds_and_no_subresource_but_scale(default_objects):
    for name, (_kind, w) in _webhooks(default_objects).items():
        resources = {res for r in w["rules"] for res in r["resources"]}
        groups = {g for r in w["rules"] for g in r["apiGroups"]}
        if groups == {labels.GROUP}:
            assert resources <= TAU_RESOURCES, name
        else:
            assert {res.removesuffix("/scale") for res in resources - {DEBUG_SUBRESOURCE}} <= WORKLOAD_RESOURCES, name
            assert groups <= WORKLOAD_GROUPS, name
        assert not any("*" in res or res.count("/") > 1 or ("/" in res and not res.endswith("/scale"))
                       for res in resources - {DEBUG_SUBRESOURCE}), name


def test_the_admission_settings_are_the_documented_defaults(default_objects):
    with pytest.raises(Exception, match="admissionPolicy.enabled is false"):
        objects({"admissionPolicy": {"enabled": False}})
    assert objects({"admissionPolicy": {"enabled": False}, "webhook": {"failurePolicyOverrides": {"mutate": "Fail"}}})
    assert objects({"admissionPolicy": {"enabled": False}, "webhook": {"failurePolicy": "Ignore"}})  # the last resort
    for _name, (kind, w) in _webhooks(default_objects).items():
        assert w["sideEffects"] == "None" and w["timeoutSeconds"] == 3
        # the workload route is Ignore: the API server's own policy keeps the core rule while it is down
        assert w["failurePolicy"] == ("Ignore" if w["name"] == "mutate.workloads.tau.azure.com" else "Fail")
        assert w["admissionReviewVersions"] == ["v1"] and w["matchPolicy"] == "Equivalent"
        assert "caBundle" not in w["clientConfig"]  # filled by `taugate certs` or cert-manager, never by Helm
        if kind == "MutatingWebhookConfiguration":
            assert w["reinvocationPolicy"] == "IfNeeded"


@pytest.mark.parametrize("namespace", ["taugate-system", "gpu-admission"])
def test_a_fresh_install_never_sends_kube_system_or_its_own_namespace_to_a_webhook(namespace):
    webhooks = _webhooks(objects(namespace=namespace))
    # Even a namespace labelled as a workspace (or named like the system namespace) is excluded.
    for excluded in ("kube-system", namespace):
        ns_labels = namespace_labels(excluded, **{labels.WORKSPACE: "team-a"})
        for name, (_, w) in webhooks.items():
            assert not selector_matches(w["namespaceSelector"], ns_labels), (name, excluded)


def test_workload_webhooks_see_workspace_namespaces_and_the_tau_webhook_the_system_namespace(default_objects):
    workspace = namespace_labels("team-a", **{labels.WORKSPACE: "team-a"})
    plain = namespace_labels("default")
    system = namespace_labels(Settings().system_namespace)
    for name, (_, w) in _webhooks(default_objects).items():
        selects = {ns: selector_matches(w["namespaceSelector"], lbl)
                   for ns, lbl in (("workspace", workspace), ("plain", plain), ("system", system))}
        route = next(r for r in routes_file() if r["name"] == name)
        if route["namespaces"] == "platform":
            assert selects == {"workspace": False, "plain": False, "system": True}, name
        else:
            assert selects == {"workspace": True, "plain": False, "system": False}, name


def test_match_conditions_skip_exactly_taugates_operator(default_objects):
    operator = one(default_objects, "Deployment", "taugate-operator")
    operator_user = f"system:serviceaccount:{NAMESPACE}:{pod_spec(operator)['serviceAccountName']}"
    deployment = one(default_objects, "Deployment", "taugate-webhook")
    webhook_env = {e["name"]: e.get("value") for e in pod_spec(deployment)["containers"][0]["env"]}
    assert webhook_env["TAUGATE_SERVICE_ACCOUNT"] == operator_user  # the server's own guard clause agrees
    for name, (_, w) in _webhooks(default_objects).items():
        for condition in w["matchConditions"]:
            program = cel.compile(condition["expression"])  # the API server compiles it on create

            def called_for(username: str, program: cel.Program = program) -> bool:
                return program.execute({"request": {"userInfo": {"username": username, "groups": []}}})

            assert called_for(operator_user) is False, name
            assert called_for("alice@example.com") is True
            assert called_for(f"system:serviceaccount:{NAMESPACE}:taugate-webhook") is True
            assert called_for("system:serviceaccount:team-a:taugate-operator") is True  # same name elsewhere


def test_failure_policy_has_one_emergency_switch_and_per_route_exceptions():
    relaxed = _webhooks(objects({"webhook": {"failurePolicy": "Ignore"}}))
    assert {w["failurePolicy"] for _, w in relaxed.values()} == {"Ignore"}
    pinned = _webhooks(objects({"webhook": {"failurePolicy": "Ignore",
                                            "failurePolicyOverrides": {"validate-tau": "Fail"}}}))
    tau = next(r.name for r in ROUTES if r.path == "/validate-tau")
    assert {n: w["failurePolicy"] for n, (_, w) in pinned.items()} == {
        r.name: ("Fail" if r.name == tau else "Ignore") for r in ROUTES}


def test_the_server_answers_before_the_api_server_times_out(default_objects, monkeypatch):
    entries = [e for e in pod_spec(one(default_objects, "Deployment", "taugate-webhook"))["containers"][0]["env"]
               if e["name"].startswith("TAUGATE_")]
    fields = {f"TAUGATE_{name.upper()}" for name in Settings.model_fields}
    assert {e["name"] for e in entries} <= fields, "an environment variable the settings would silently ignore"
    env = {e["name"]: e["value"] for e in entries if "value" in e}  # TAUGATE_ADMISSION_KEY comes from a Secret
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    timeouts = {w["timeoutSeconds"] for _, w in _webhooks(default_objects).values()}
    assert settings.admission_deadline_seconds < min(timeouts)
    assert settings.system_namespace == "tau-platform"


def test_cert_manager_mode_injects_the_ca_of_the_webhooks_certificate(rendered):
    objs = rendered["cert-manager"]
    certificate = one(objs, "Certificate", "taugate-webhook")
    for kind in CONFIG_KINDS.values():
        annotation = one(objs, kind)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{NAMESPACE}/{certificate['metadata']['name']}"
    for kind in CONFIG_KINDS.values():
        assert "annotations" not in one(rendered["default"], kind)["metadata"]
