"""The chart installs exactly the CRDs the operator is built for: charts/taugate/crds (Helm's crds/
folder, installed before the templates) equals what controllers.crds generates from the models,
and the webhook rules name resources those CRDs define."""

from __future__ import annotations

import importlib

import pytest

from taugate import labels
from taugate.webhook.routes import ROUTES
from tests.install.chart import CHART, chart, crds


def _generated() -> dict[str, str]:
    try:
        module = importlib.import_module("taugate.controllers.crds")
    except ModuleNotFoundError as e:
        if e.name != "taugate.controllers.crds":
            raise
        pytest.skip("controllers.crds is not in this checkout")
    return module.render_crds()


def test_the_charts_crds_are_exactly_the_ones_generated_from_the_models():
    generated = _generated()
    in_chart = {entry["name"].removeprefix("crds/"): entry["data"] for entry in chart().crds}
    assert sorted(in_chart) == sorted(generated), \
        f"{CHART / 'crds'} differs from controllers.crds: run `taugate crds -o charts/taugate/crds`"
    stale = [name for name, text in generated.items() if in_chart[name] != text]
    assert stale == [], f"stale CRDs {stale}: run `taugate crds -o charts/taugate/crds`"


def test_every_tau_resource_a_webhook_intercepts_is_defined_by_a_crd_in_the_chart():
    definitions = {c["spec"]["names"]["plural"] for c in crds() if c["spec"]["group"] == labels.GROUP}
    if not definitions:
        pytest.skip("charts/taugate/crds/ holds no tau.azure.com CRD yet")
    for route in ROUTES:
        for rule in route.rules:
            if labels.GROUP in rule.api_groups:
                assert set(rule.resources) <= definitions, route.name
                assert labels.VERSION in rule.api_versions
