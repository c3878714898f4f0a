"""Failure modes as docs/runbook.md describes them, on the real API server: with taugate down (its
workload route's ``failurePolicy: Ignore``), the API server's own policy refuses a GPU workload in a
workspace with the documented message while CPU workloads and other namespaces go on, and deleting
the configurations changes nothing of that; a certificate rotation while creates go on fails none
of them; the chart's uninstall path leaves no webhook configuration behind."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading

import yaml

from tests.e2e.platform import NAMESPACE, RELEASE, WEBHOOK_KINDS, rendered_chart, webhook_configurations
from tests.e2e.workloads import RUN_ID, WORKSPACE, into_workspace
from tests.paths import REPO
from tests.waiting import until_sync

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
CPU_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]}}}}


def _job(namespace: str, name: str) -> str:
    obj = json.loads(json.dumps(CPU_JOB))
    obj["metadata"] = {"name": name, "namespace": namespace}
    return json.dumps(obj)


def test_with_taugate_down_a_workspace_rayjob_is_refused_as_the_runbook_says_and_everything_else_goes_through(
        platform):
    cp = platform.cp
    cp.kubectl("create", "namespace", "not-a-workspace")
    platform.stop_webhook()
    try:
        for deleted in (False, True):  # the configurations in place, then deleted (the runbook's last resort)
            if deleted:
                cp.kubectl("delete", "mutatingwebhookconfiguration/taugate", "validatingwebhookconfiguration/taugate")
            out = cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="while-down")),
                             check=False)
            assert out.returncode != 0
            assert "ValidatingAdmissionPolicy 'taugate-admitted-workloads'" in out.stderr, out.stderr
            assert f"taugate has not admitted RayJob while-down in workspace namespace {WORKSPACE}" in out.stderr
            assert "taugate's admission webhook may be unavailable" in out.stderr
            # A CPU workload in the workspace, kube-system and any other namespace go on.
            for namespace in ("kube-system", "not-a-workspace", WORKSPACE):
                cp.kubectl("apply", "-f", "-", input=_job(namespace, f"while-down-{int(deleted)}"))
        # ... so the runbook's query finds only CPU workloads admitted while taugate was off.
        found = cp.kubectl("get", "rayjobs,rayclusters,jobs", "-n", WORKSPACE, "-l", f"!{RUN_ID}", "-o",
                           "name").stdout.split()
        assert sorted(found) == ["job.batch/while-down-0", "job.batch/while-down-1"]
    finally:
        platform.start_webhook()
        cp.apply_objects(webhook_configurations(platform.objects, platform.webhook_port,
                                                (platform.cert_dir / "ca.crt").read_bytes()), "--server-side",
                         "--field-manager=helm", "--force-conflicts")
        cp.kubectl("delete", "job", "while-down-0", "while-down-1", "-n", WORKSPACE, "--ignore-not-found")

    def mutated_again() -> bool:
        probe = json.dumps(into_workspace(EXAMPLE, name="back"))
        created = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe)
        return RUN_ID in json.loads(created.stdout)["metadata"]["labels"]

    platform.wait_for("taugate to mutate again", mutated_again, 60)



def test_with_the_opa_backend_down_the_api_server_applies_the_failure_policy(platform, opa_server):
    """The chart's ``webhook.opa`` args against a real OPA server: while OPA serves, taugate
    decides with it; once OPA is down, /mutate answers HTTP 503 (nothing decided) and the API
    server applies the workload route's ``failurePolicy: Ignore`` (k8s.io/apiserver
    mutating/dispatcher.go ``callAttrMutatingHook``: a failed call), then its own policy, which
    refuses the GPU RayJob: nothing is admitted unchecked."""
    cp = platform.cp
    default_objects = platform.objects
    platform.stop_webhook()
    platform.objects = rendered_chart({"webhook": {"opa": {"enabled": True, "port": opa_server.port}}})
    try:
        platform.start_webhook()
        assert "taugate/gpu-total-fits-queue/policy.rego" in opa_server.policies()
        too_big = into_workspace(yaml.safe_load((REPO / "policies" / "gpu-total-fits-queue" / "samples" /
                                                 "example_disallowed_image_classifier_64.yaml").read_text()),
                                 name="opa-decides")
        out = cp.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(too_big), check=False)
        assert out.returncode != 0 and "[gpu-total-fits-queue]" in out.stderr, out.stderr
        opa_server.stop()
        out = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                         input=json.dumps(into_workspace(EXAMPLE, name="opa-down")), check=False)
        # taugate answers HTTP 503 (nothing decided); the workload route's failurePolicy is Ignore, so the
        # API server goes on to its own policy, which refuses a GPU workload taugate did not admit.
        assert out.returncode != 0
        assert "ValidatingAdmissionPolicy 'taugate-admitted-workloads'" in out.stderr, out.stderr
        assert "taugate has not admitted RayJob opa-down" in out.stderr, out.stderr
    finally:
        platform.stop_webhook()
        platform.objects = default_objects
        platform.start_webhook()


def _set_ca_bundle(cp, bundle: bytes) -> None:
    for kind in WEBHOOK_KINDS:
        obj = cp.get_json(kind.lower(), RELEASE)
        patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle",
                  "value": base64.b64encode(bundle).decode()}
                 for i in range(len(obj["webhooks"]))]
        cp.kubectl("patch", kind.lower(), RELEASE, "--type=json", "-p", json.dumps(patch))


def test_a_certificate_rotation_while_creates_go_on_fails_no_create(platform):
    """``taugate certs rotate`` in its three steps, as the chart's sync does them: publish the new
    CA beside the old one in the configurations' caBundle, switch the serving certificate (the
    server reloads it), trim the old CA. A loop of creates through the API server runs throughout."""
    cp = platform.cp
    stop, results = threading.Event(), []

    def creates() -> None:
        i = 0
        while not stop.is_set() and i < 400:
            obj = into_workspace(EXAMPLE, name=f"rotate-{i}")
            out = cp.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)
            results.append((out.returncode, out.stderr.strip()))
            i += 1

    def after(more: int) -> None:
        """Wait until ``more`` further creates have been answered (the loop makes progress
        through each step; the API server's webhook client picks a changed configuration up
        within a second or two, about ten creates), or one failed."""
        goal = len(results) + more
        until_sync(lambda: len(results) >= goal or any(code != 0 for code, _ in results) or not worker.is_alive(),
                   timeout=120, what=f"{more} more creates")

    worker = threading.Thread(target=creates)
    worker.start()
    try:
        certs = [sys.executable, "-m", "taugate.cli", "certs", "rotate", f"--dir={platform.cert_dir}", "--wait=0"]
        after(10)
        subprocess.run([*certs, "--step=publish"], check=True, capture_output=True, cwd=REPO)
        _set_ca_bundle(cp, (platform.cert_dir / "ca.crt").read_bytes())
        after(15)
        subprocess.run([*certs, "--step=switch"], check=True, capture_output=True, cwd=REPO)
        after(20)
        subprocess.run([*certs, "--step=trim"], check=True, capture_output=True, cwd=REPO)
        _set_ca_bundle(cp, (platform.cert_dir / "ca.crt").read_bytes())
        after(15)
    finally:
        stop.set()
        worker.join(120)
    failures = [r for r in results if r[0] != 0]
    assert len(results) >= 20, f"only {len(results)} creates ran"
    assert failures == [], f"{len(failures)} of {len(results)} creates failed: {failures[:3]}"


def test_the_charts_uninstall_hook_removes_both_webhook_configurations(platform):
    """The pre-delete hook's own script, run with the hook's own ServiceAccount and RBAC (the
    hook objects applied as Helm applies them before the Job), against a copy of the
    configurations under another release name so the session's webhook stays installed."""
    cp = platform.cp
    values = {"fullnameOverride": "uninstall-check"}
    objects = rendered_chart(values)

    def pre_delete(o: dict) -> bool:
        return "pre-delete" in (o["metadata"].get("annotations") or {}).get("helm.sh/hook", "")

    hook_rbac = [o for o in objects if pre_delete(o)
                 and o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]
    assert {o["kind"] for o in hook_rbac} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    for o in hook_rbac:
        if o["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            o["metadata"].setdefault("namespace", NAMESPACE)
    configs = [o for o in objects if o["kind"] in WEBHOOK_KINDS]
    # The copies point nowhere and select nothing, so they change no other test's requests.
    for c in configs:
        for wh in c["webhooks"]:
            wh["clientConfig"] = {"url": "https://127.0.0.1:9/none"}
            wh["namespaceSelector"] = {"matchLabels": {"e2e.example/never": "true"}}
    cp.apply_objects(hook_rbac + configs)
    assert {c["metadata"]["name"] for c in configs} == {"uninstall-check"}
    job = next(o for o in objects
               if o["kind"] == "Job" and "pre-delete" in o["metadata"]["annotations"]["helm.sh/hook"])
    container = job["spec"]["template"]["spec"]["containers"][0]
    sa = job["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = cp.token_kubeconfig(NAMESPACE, sa, "uninstall-hook")
    proc = subprocess.run([sys.executable, *container["command"][1:], *container["args"]], capture_output=True,
                          text=True,
                          env={**os.environ, "KUBECONFIG": str(kubeconfig)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "deleted MutatingWebhookConfiguration/uninstall-check" in proc.stdout
    assert "deleted ValidatingWebhookConfiguration/uninstall-check" in proc.stdout
    for kind in WEBHOOK_KINDS:
        assert cp.kubectl("get", kind.lower(), "uninstall-check", check=False).returncode != 0
    # The session's own configurations are untouched.
    for kind in WEBHOOK_KINDS:
        assert cp.get_json(kind.lower(), RELEASE)["metadata"]["name"] == RELEASE
