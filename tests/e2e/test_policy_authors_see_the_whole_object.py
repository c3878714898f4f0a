"""Issue 29's proof on the real control plane: policy authors see the whole object, and one broken
policy breaks nothing else.

- The worked example's image-pinning policy (examples/policies/pin-image-tags, reading
  ``input.review.object``) enforced as ``deny`` refuses a RayJob on ``rayproject/ray:latest``
  through ``kubectl apply``, naming the field, and admits the pinned one.
- A policy that fails at run time on every workload, hot-reloaded into the running webhook, stays
  inactive (``/readyz``'s ``PolicySetCurrent`` condition False naming it, ``taugate_policy_set_broken``
  1) and changes no decision: the same objects get the same answers, word for word.
"""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.request

import yaml

from tests.e2e.workloads import WORKSPACE, into_workspace
from tests.paths import POLICIES, REPO
from tests.policies.test_a_broken_policy_breaks_nothing_else import ALWAYS_BROKEN

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
FIELD = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].image"


def _latest(name: str) -> dict:
    obj = into_workspace(EXAMPLE, name=name)
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = \
        "rayproject/ray:latest"
    return obj


def _get(platform, path: str) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(platform.cert_dir / "ca.crt"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{platform.webhook_port}{path}", context=ctx, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _apply(cp, obj: dict):
    return cp.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)


def test_an_image_pinning_policy_denies_latest_and_a_broken_reload_changes_nothing(platform, tmp_path):
    cp = platform.cp
    served = tmp_path / "policies"
    shutil.copytree(POLICIES, served)
    shutil.copytree(REPO / "examples" / "policies" / "pin-image-tags", served / "pin-image-tags")
    with (served / "enforcement.yaml").open("a") as f:
        f.write("pin-image-tags: deny\n")
    platform.stop_webhook()
    try:
        platform.start_webhook(policies=served)
        latest = _apply(cp, _latest("pinning-latest"))
        assert latest.returncode != 0, latest.stdout
        assert "admission webhook" in latest.stderr and "denied the request" in latest.stderr
        assert f"[pin-image-tags] {FIELD}: container image \"rayproject/ray:latest\" is not pinned" in latest.stderr
        pinned = _apply(cp, into_workspace(EXAMPLE, name="pinning-released"))
        assert pinned.returncode == 0, pinned.stderr

        # A policy failing at run time on every workload is copied into the served folder.
        (served / "starts-broken").mkdir()
        (served / "starts-broken" / "policy.rego").write_text(ALWAYS_BROKEN)
        (served / "starts-broken" / "policy_test.rego").write_text(
            "package taugate.policies.starts_broken\n\ntest_loads if true\n")

        def rejected() -> bool:
            status, body = _get(platform, "/readyz")
            condition = json.loads(body)["conditions"][0]
            return status == 200 and condition["status"] == "False" and "starts-broken" in condition["message"]
        platform.wait_for("the broken set rejected by the reload gate", rejected, timeout=300)
        assert "taugate_policy_set_broken 1.0" in _get(platform, "/metrics")[1]

        again = _apply(cp, _latest("pinning-latest"))
        assert again.returncode == latest.returncode and again.stderr == latest.stderr
        assert "starts-broken" not in again.stderr
        still = _apply(cp, into_workspace(EXAMPLE, name="pinning-released"))
        assert still.returncode == 0 and still.stdout == pinned.stdout and "starts-broken" not in still.stderr
        assert cp.kubectl("get", "rayjob", "pinning-released", "-n", WORKSPACE, check=False).returncode != 0  # dry run
    finally:
        platform.stop_webhook()
        platform.start_webhook()
