"""The Kubernetes (and helm) versions README.md and docs/install.md name are the ones the tests
run: the end-to-end tier's control plane and helm, pinned in ``tests/e2e/gomod/kubernetes`` and
``tests/e2e/gomod/helm``; the API schemas the chart's objects are validated against
(``tests/install/chart.KUBERNETES_VERSIONS``); and the chart's minimum (``kubeVersion``)."""

from __future__ import annotations

import re

import yaml

from tests.install.chart import KUBERNETES_VERSIONS, REPO
from tests.upstream import pinned

VERSION = re.compile(r"(?<![\w.])v?(1\.\d+(?:\.\d+)?)(?![\w.])")


def _install_md_requirement() -> str:
    """The "Kubernetes ... or newer" bullet of docs/install.md's "Before you install", one line."""
    text = (REPO / "docs" / "install.md").read_text()
    section = text.split("## Before you install", 1)[1].split("\n## ", 1)[0]
    bullet = re.search(r"^- Kubernetes .*?(?=^- |\Z)", section, re.M | re.S)
    assert bullet, "docs/install.md's 'Before you install' has no '- Kubernetes ...' bullet"
    return " ".join(bullet.group(0).split())


def _minor(version: str) -> str:
    return ".".join(version.lstrip("v").split(".")[:2])


def test_install_md_names_the_minimum_the_schemas_and_the_control_plane_the_tests_run_and_nothing_else():
    requirement = _install_md_requirement()
    _, control_plane = pinned("kubernetes")  # v1.37.2
    minimum = re.fullmatch(r">=\s*(1\.\d+)\.0-0",
                           yaml.safe_load((REPO / "charts" / "taugate" / "Chart.yaml").read_text())["kubeVersion"])
    assert minimum, "Chart.yaml kubeVersion is not '>=1.N.0-0'"
    named = set(VERSION.findall(requirement))
    assert named == {minimum.group(1), control_plane.lstrip("v"), *(_minor(v) for v in KUBERNETES_VERSIONS)}, \
        requirement
    assert f"{minimum.group(1)} or newer" in requirement and f"Kubernetes {control_plane}" in requirement
    _, helm = pinned("helm", "helm.sh/helm/v3")
    assert f"helm {helm}" in requirement, requirement


def test_the_readme_names_the_kubernetes_version_of_the_end_to_end_tier():
    readme = (REPO / "README.md").read_text()
    _, control_plane = pinned("kubernetes")
    named = {m.group(1) for m in re.finditer(r"Kubernetes (v?1\.\d+(?:\.\d+)?)", readme)}
    assert named == {control_plane}, named
