"""The Gatekeeper translation of the policy library (``bench/gatekeeper``, the peer in the
end-to-end benchmark) decides as the library does: each translated template, evaluated by a real
OPA (built from ``tests/e2e/gomod/opa``) on Gatekeeper's input (``input.review.object`` and the
Constraint's parameters), reports every ``example_disallowed*`` sample of its policy and no
``example_allowed*`` one, and lets the benchmark's two workloads through."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from bench import gatekeeper
from tests.opa_server import opa_binary
from tests.paths import POLICIES


def violations(tmp_path, obj: dict) -> dict[str, list[str]]:
    """Policy name -> the messages its template's ``violation`` rule gives for ``obj`` (OPA, Rego v0
    as Gatekeeper's ``rego`` field takes it, with ``lib.rego`` loaded as the template's lib)."""
    inp = tmp_path / "input.json"
    inp.write_text(json.dumps({"review": {"object": obj, "kind": {"kind": obj["kind"]}},
                               "parameters": gatekeeper.parameters()}))
    query = "{" + ", ".join(f'"{p}": data.{gatekeeper._kind(p).lower()}.violation' for p in gatekeeper.TRANSLATED) + "}"
    args = [str(opa_binary()), "eval", "--v0-compatible", "-f", "json", "-i", str(inp),
            "-d", str(gatekeeper.HERE / "lib.rego")]
    for p in gatekeeper.TRANSLATED:
        args += ["-d", str(gatekeeper.HERE / f"{p}.rego")]
    out = subprocess.run([*args, query], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    value = json.loads(out.stdout)["result"][0]["expressions"][0]["value"]
    return {p: sorted(v["msg"] for v in vs) for p, vs in value.items()}


def samples(policy: str) -> list[tuple[str, dict]]:
    return [(f.name, d) for f in sorted((POLICIES / policy / "samples").glob("example_*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]


@pytest.mark.parametrize("policy", gatekeeper.TRANSLATED)
def test_each_translated_template_reports_its_policys_disallowed_samples_and_no_allowed_one(tmp_path, policy):
    seen = samples(policy)
    assert len(seen) >= 6
    for name, obj in seen:
        found = violations(tmp_path, obj)[policy]
        if name.startswith("example_disallowed"):
            assert found, f"{policy} translation lets {name} through"
            assert all(m.startswith(f"{policy}: ") for m in found)
        else:
            assert found == [], f"{policy} translation reports {name}: {found}"


def test_the_benchmarks_workloads_pass_every_translated_template(tmp_path):
    from bench.e2e import workloads

    for w in workloads():
        assert violations(tmp_path, w.obj) == {p: [] for p in gatekeeper.TRANSLATED}, w.name


def test_every_library_policy_is_translated_or_named_with_the_reason_it_is_not():
    library = {p.name for p in POLICIES.iterdir() if (p / "policy.rego").is_file()}
    assert set(gatekeeper.TRANSLATED) | set(gatekeeper.NOT_TRANSLATED) == library
    assert not set(gatekeeper.TRANSLATED) & set(gatekeeper.NOT_TRANSLATED)
    kinds = {t["spec"]["crd"]["spec"]["names"]["kind"] for t in gatekeeper.templates()}
    assert kinds == {c["kind"] for c in gatekeeper.constraints()}
    assert all(t["metadata"]["name"] == t["spec"]["crd"]["spec"]["names"]["kind"].lower()
               for t in gatekeeper.templates())
