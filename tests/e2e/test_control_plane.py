"""The control plane itself: built from the pinned Go modules, serving the CRDs taugate installs
and reads, with taugate's chart objects accepted by the real API server's validation."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.controlplane import wait_until
from tests.e2e.platform import RELEASE, WEBHOOK_KINDS, release_objects, rendered_chart, upstream_crds
from tests.install import chart as chart_helpers

GOMOD = Path(__file__).resolve().parent / "gomod"


def _pinned(component: str, module: str) -> str:
    text = (GOMOD / component / "go.mod").read_text()
    return re.search(rf"^\s*{re.escape(module)} (v\S+)", text, re.M).group(1)


def test_the_api_server_and_kubectl_report_the_kubernetes_version_they_were_built_from(control_plane):
    out = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    pinned = _pinned("kubernetes", "k8s.io/kubernetes")
    assert out["serverVersion"]["gitVersion"] == pinned
    assert out["clientVersion"]["gitVersion"] == pinned


def test_the_controller_manager_and_the_scheduler_act_on_a_job(control_plane):
    """The Job controller creates the pod, and the scheduler decides on it (bound, or
    PodScheduled=False when no node fits): both components work against the API server."""
    cp = control_plane
    cp.kubectl("create", "namespace", "cp-check")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello", "namespace": "cp-check"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}}}}
    cp.apply_objects([job])

    def scheduled_condition():
        pods = cp.get_json("pods", "-n", "cp-check", "-l", "job-name=hello")["items"]
        conds = [c for p in pods for c in (p.get("status") or {}).get("conditions") or []
                 if c["type"] == "PodScheduled"]
        return conds[0] if conds else None
    cond = wait_until("the Job's pod to be created and scheduled", scheduled_condition, 60, processes=cp.processes)
    assert cond["status"] == "True" or cond["reason"] == "Unschedulable"
    cp.kubectl("delete", "namespace", "cp-check", "--wait=false")


def test_every_crd_taugate_installs_or_reads_is_established_and_served(platform):
    names = [c["metadata"]["name"] for c in chart_helpers.crds() + upstream_crds()]
    assert {"clusters.tau.azure.com", "workspaces.tau.azure.com", "rayjobs.ray.io",
            "localqueues.kueue.x-k8s.io"} <= set(names)
    for name in names:
        crd = platform.cp.get_json("crd", name)
        established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert established.get("Established") == "True", name
        assert established.get("NonStructuralSchema") is None, f"{name} has a non-structural schema"


def test_every_release_object_of_the_chart_is_stored_by_the_api_server(platform):
    objects = release_objects(platform.cp, rendered_chart())
    assert len(objects) > 10
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    got = json.loads(platform.cp.kubectl("get", "-f", "-", "-o", "json", input=listed).stdout)
    stored = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in got["items"]}
    assert stored == {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}


def test_the_webhook_configurations_are_stored_as_rendered_except_their_client_config(platform):
    rendered = {o["kind"]: o for o in rendered_chart() if o["kind"] in WEBHOOK_KINDS}
    assert set(rendered) == set(WEBHOOK_KINDS)
    for kind, want in rendered.items():
        got = platform.cp.get_json(kind.lower(), want["metadata"]["name"])
        assert [w["name"] for w in got["webhooks"]] == [w["name"] for w in want["webhooks"]]
        for g, w in zip(got["webhooks"], want["webhooks"], strict=True):
            assert g["clientConfig"]["url"].startswith(f"https://127.0.0.1:{platform.webhook_port}/")
            assert g["clientConfig"]["url"].endswith(w["clientConfig"]["service"]["path"])
            for key in ("rules", "failurePolicy", "matchPolicy", "sideEffects", "timeoutSeconds",
                        "namespaceSelector", "matchConditions", "reinvocationPolicy", "admissionReviewVersions"):
                if key in w:
                    want_value = w[key]
                    if key == "rules":  # the API server adds the default scope
                        want_value = [{**r, "scope": r.get("scope", "*")} for r in w[key]]
                    assert g[key] == want_value, f"{kind} {w['name']}: {key}"
    assert RELEASE in {o["metadata"]["name"] for o in rendered.values()}
