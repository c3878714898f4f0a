"""The chart installs exactly the CRDs the operator is built for: charts/taugate/crds (Helm's crds/
folder, installed before the templates) equals what controllers.crds generates from the models,
and the webhook rules name resources those CRDs define."""

from __future__ import annotations

from taugate import labels
from taugate.controllers.crds import VENDORED_CRDS, check_crds, render_crds
from taugate.webhook.routes import ROUTES
from tests.install.chart import CHART, chart, crds
from tests.paths import CLUSTER_POLICY_REPORT_CRD, POLICY_REPORT_CRD


def test_the_charts_crds_are_exactly_the_ones_generated_from_the_models():
    generated = render_crds()
    in_chart = {entry["name"].removeprefix("crds/"): entry["data"] for entry in chart().crds
                if entry["name"].removeprefix("crds/") not in VENDORED_CRDS}
    assert sorted(in_chart) == sorted(generated), \
        f"{CHART / 'crds'} differs from controllers.crds: run `taugate crds -o charts/taugate/crds`"
    stale = [name for name, text in generated.items() if in_chart[name] != text]
    assert stale == [], f"stale CRDs {stale}: run `taugate crds -o charts/taugate/crds`"


def test_every_tau_resource_a_webhook_intercepts_is_defined_by_a_crd_in_the_chart():
    definitions = {c["spec"]["names"]["plural"] for c in crds() if c["spec"]["group"] == labels.GROUP}
    assert definitions, f"{CHART / 'crds'} holds no {labels.GROUP} CRD: run `taugate crds -o charts/taugate/crds`"
    for route in ROUTES:
        for rule in route.rules:
            if labels.GROUP in rule.api_groups:
                assert set(rule.resources) <= definitions, route.name
                assert labels.VERSION in rule.api_versions


def test_the_policy_report_crds_are_kyvernos_unchanged_and_helm_installs_them_with_the_chart():
    in_chart = {entry["name"].removeprefix("crds/"): entry["data"] for entry in chart().crds}
    for vendored, upstream in zip(VENDORED_CRDS, (CLUSTER_POLICY_REPORT_CRD, POLICY_REPORT_CRD), strict=True):
        assert in_chart[vendored] == upstream.read_text(), f"{vendored} differs from {upstream}"
    names = {c["metadata"]["name"] for c in crds()}
    assert {"policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"} <= names
    assert check_crds(CHART / "crds") == []  # vendored, so `taugate crds --check` does not call them unexpected
