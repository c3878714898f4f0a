"""The chart runs the operator's background audit: the operator gets the webhook's policy folder,
its interval and a metrics port, may write PolicyReports and nothing more of them, and turning the
audit off takes all of that away."""

from __future__ import annotations

from taugate.cli import build_parser
from tests.install.chart import allowed, objects, one, rules_of

WG = "wgpolicyk8s.io"


def _operator(objs: list[dict]) -> dict:
    return one(objs, "Deployment", "taugate-operator")["spec"]["template"]["spec"]["containers"][0]


def test_the_operator_audits_the_webhooks_policy_folder_on_the_configured_interval(default_objects):
    container = _operator(default_objects)
    args = container["args"]
    assert "--audit-policies=/etc/taugate/policies" in args
    assert "--audit-interval=300" in args and "--audit-page-size=500" in args
    assert {"name": "audit-metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    parsed = build_parser().parse_args(args)  # the arguments the chart passes are ones taugate accepts
    assert (parsed.audit_policies, parsed.audit_interval, parsed.audit_metrics_port) == (
        "/etc/taugate/policies", 300.0, 9090)


def test_the_operator_may_write_policy_reports_and_delete_only_them(default_objects):
    granted = rules_of(default_objects, "taugate-operator")
    for verb in ("get", "list", "create", "patch", "delete"):
        assert allowed(granted, verb, WG, "policyreports", "taugate-policy-audit", "vision"), verb
        assert allowed(granted, verb, WG, "clusterpolicyreports", "taugate-policy-audit"), verb
    assert not allowed(granted, "delete", WG, "policyreports/status", "x", "vision")


def test_a_policies_configmap_is_mounted_for_the_audit_as_for_the_webhook():
    objs = objects({"webhook": {"policiesConfigMap": "team-policies"}})
    container = _operator(objs)
    assert {"name": "policies", "mountPath": "/etc/taugate/policies", "readOnly": True} in container["volumeMounts"]
    volumes = one(objs, "Deployment", "taugate-operator")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "policies", "configMap": {"name": "team-policies"}} in volumes


def test_with_the_audit_off_the_operator_neither_audits_nor_may_write_reports():
    objs = objects({"operator": {"audit": {"enabled": False}}})
    assert not any(a.startswith("--audit") for a in _operator(objs)["args"])
    assert not allowed(rules_of(objs, "taugate-operator"), "create", WG, "policyreports", namespace="vision")


def test_scrapers_named_in_metrics_from_may_reach_the_audit_metrics_and_nobody_else():
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = objects({"networkPolicy": {"metricsFrom": [scraper]}})
    policy = one(objs, "NetworkPolicy", "taugate-operator")
    rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 9090)
    assert rule["from"] == [scraper]
    closed = one(objects(), "NetworkPolicy", "taugate-operator")  # no scrapers named: the port stays closed
    assert all(r["ports"][0]["port"] != 9090 for r in closed["spec"]["ingress"])
