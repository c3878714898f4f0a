"""The Kyverno translation of the policy library (``bench/kyverno``, a peer in the end-to-end
benchmark) decides as the Gatekeeper translation does: Kyverno's own CLI (``kubectl-kyverno apply``,
built from ``tests/e2e/gomod/kyverno``: the CEL engine its admission controller runs) applies every
translated ValidatingPolicy to every policy sample and to the benchmark's two workloads, and each
policy reports exactly the messages the Gatekeeper translation's Rego reports there (OPA, built
from ``tests/e2e/gomod/opa``): every ``example_disallowed*`` sample of its own policy, no
``example_allowed*`` one, nothing on the benchmark's workloads, and never an error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from bench import gatekeeper, kyverno
from tests.e2e.controlplane import build
from tests.paths import POLICIES
from tests.policies.test_gatekeeper_translation import samples, violations


@pytest.fixture(scope="module")
def kyverno_cli() -> Path:
    """Kyverno's CLI, built with its admission controller by tests/e2e/build.sh (cached)."""
    path = build("kyverno")["kyverno"] / "kubectl-kyverno"
    assert os.access(path, os.X_OK), f"tests/e2e/build.sh reported {path.parent} but it holds no kubectl-kyverno"
    return path


def kyverno_results(cli: Path, tmp_path: Path, objects: list[dict]) -> dict[tuple[str, str], dict[str, tuple]]:
    """``(namespace, name)`` -> policy -> ``(result, message)`` of ``kubectl-kyverno apply`` with
    every translated policy on ``objects`` (names unique), the workspace namespaces labelled as the
    policies' namespaceSelector wants them (the CLI's values file)."""
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump_all(kyverno.policies()))
    (tmp_path / "resources.yaml").write_text(yaml.safe_dump_all(objects))
    (tmp_path / "values.yaml").write_text(yaml.safe_dump({
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Value", "metadata": {"name": "values"},
        "namespaceSelector": [{"name": ns, "labels": {kyverno.WORKSPACE_LABEL: ns}}
                              for ns in gatekeeper.parameters()["workspaceProfiles"]]}))
    out = subprocess.run([str(cli), "apply", str(tmp_path / "policies.yaml"), "--resource",
                          str(tmp_path / "resources.yaml"), "--values-file", str(tmp_path / "values.yaml"),
                          "--policy-report"], capture_output=True, text=True, timeout=120)
    assert "apiVersion" in out.stdout, out.stderr
    report = yaml.safe_load(out.stdout[out.stdout.index("apiVersion"):])
    got: dict[tuple[str, str], dict[str, tuple]] = {}
    for r in report.get("results") or []:
        for res in r["resources"]:
            got.setdefault((res.get("namespace", ""), res["name"]), {})[r["policy"]] = (r["result"], r.get("message"))
    return got


def messages(policy: str, result: tuple[str, str | None]) -> list[str]:
    """A Kyverno result as the list of Rego violation messages it joins (each begins ``policy: ``)."""
    status, message = result
    assert status in ("pass", "fail", "warn"), f"{policy}: {status}: {message}"
    if status == "pass":
        return []
    parts = (message or "").split(f"; {policy}: ")
    return sorted([parts[0], *[f"{policy}: {p}" for p in parts[1:]]])


@pytest.mark.parametrize("policy", kyverno.TRANSLATED)
def test_on_each_policys_samples_every_translated_policy_reports_what_the_gatekeeper_translation_does(
        kyverno_cli, tmp_path, policy):
    seen = samples(policy)
    assert len(seen) >= 6
    got = kyverno_results(kyverno_cli, tmp_path, [o for _, o in seen])
    for name, obj in seen:
        results = got[(obj["metadata"]["namespace"], obj["metadata"]["name"])]
        assert set(results) == {f"taugate-{p}" for p in kyverno.TRANSLATED}, name
        want = violations(tmp_path, obj)
        for p in kyverno.TRANSLATED:
            assert messages(p, results[f"taugate-{p}"]) == want[p], (name, p)
        own = messages(policy, results[f"taugate-{policy}"])
        if name.startswith("example_disallowed"):
            assert own and all(m.startswith(f"{policy}: ") for m in own), f"{policy} translation lets {name} through"
        else:
            assert own == [], f"{policy} translation reports {name}: {own}"


def test_the_benchmarks_workloads_pass_every_translated_policy(kyverno_cli, tmp_path):
    from bench.e2e import workloads

    objects = {w.name: json.loads(w.body(f"bench-{i}")) for i, w in enumerate(workloads())}
    got = kyverno_results(kyverno_cli, tmp_path, list(objects.values()))
    for name, obj in objects.items():
        results = got[(obj["metadata"]["namespace"], obj["metadata"]["name"])]
        assert results == {f"taugate-{p}": ("pass", "success") for p in kyverno.TRANSLATED}, name


def test_the_policies_are_the_gatekeeper_translations_and_match_what_its_constraints_match():
    assert kyverno.TRANSLATED == gatekeeper.TRANSLATED
    library = {p.name for p in POLICIES.iterdir() if (p / "policy.rego").is_file()}
    assert set(kyverno.TRANSLATED) | set(kyverno.NOT_TRANSLATED) == library
    pols = {p["metadata"]["name"]: p for p in kyverno.policies()}
    assert set(pols) == {f"taugate-{p}" for p in kyverno.TRANSLATED}
    for c in gatekeeper.constraints():
        spec = pols[c["metadata"]["name"]]["spec"]
        kinds = {(g, k) for m in c["spec"]["match"]["kinds"] for g in m["apiGroups"] for k in m["kinds"]}
        resources = {(g, r) for rule in spec["matchConstraints"]["resourceRules"]
                     for g in rule["apiGroups"] for r in rule["resources"]}
        assert resources == {(g, k.lower() + "s") for g, k in kinds}
        assert spec["matchConstraints"]["namespaceSelector"] == c["spec"]["match"]["namespaceSelector"]
        action = {"deny": "Deny", "warn": "Warn"}[c["spec"]["enforcementAction"]]
        assert spec["validationActions"] == [action]
        assert spec["variables"][0] == {"name": "params", "expression": kyverno.cel_literal(c["spec"]["parameters"])}
