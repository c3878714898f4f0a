"""Logs and Events as an operator of the platform reads them, on the real control plane: the chart's
``taugate serve`` and ``taugate operator`` (JSON logs at INFO, the chart's defaults), kubectl as a
researcher.

- An UPDATE taugate undoes (``kubectl label rayjob/x tau.azure.com/run-id-``) prints the Warning,
  and the workload gets an Event (``kubectl get events``, ``kubectl describe``) from ``taugate``;
  the webhook logs it once, and a denied create once, although the API server called two webhooks.
- The operator at INFO logs per meaningful change, not per Node heartbeat: Node status heartbeats
  (the write a kubelet or kwok's ``node/heartbeat`` stage makes: the Ready condition's
  ``lastHeartbeatTime``) add no line; the measured rate is printed (``pytest -s``).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import kubernetes
import pytest
import yaml

from tests.e2e.workloads import WORKSPACE, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
NINE_GPUS = yaml.safe_load((REPO / "examples" / "rayjob-nine-gpus.yaml").read_text())
RUN_ID = "tau.azure.com/run-id"
HEARTBEAT_ROUNDS = 20


def _json_lines(path, start: int = 0) -> list[dict]:
    """The JSON log records written to ``path`` from byte ``start`` on (other lines are the
    commands' own start-up prints)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def researcher(platform):
    kubeconfig = platform.cp.user_kubeconfig("alice", ("vision-researchers",))

    def kubectl(*args: str, **kw):
        return platform.cp.kubectl(*args, kubeconfig=kubeconfig, **kw)
    return kubectl


def test_a_label_taugate_restores_prints_the_warning_and_leaves_an_event_on_the_workload(platform, researcher):
    researcher("create", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="events-demo")))
    out = researcher("label", "-n", WORKSPACE, "rayjob/events-demo", f"{RUN_ID}-", check=False)
    assert out.returncode == 0 and "labeled" in out.stdout, out
    assert f'Warning: taugate restored metadata.labels["{RUN_ID}"]=' in out.stderr, out.stderr

    def restored_event():
        got = platform.cp.get_json("events", "-n", WORKSPACE, "--field-selector",
                                   "involvedObject.name=events-demo,reason=Restored")
        return got["items"]
    [event] = platform.wait_for("taugate's Restored Event on rayjob/events-demo", restored_event, 30)
    uid = platform.cp.get_json("rayjob", "events-demo", "-n", WORKSPACE)["metadata"]["uid"]
    assert event["type"] == "Warning" and event["reportingComponent"] == "taugate"
    assert event["involvedObject"]["uid"] == uid and event["involvedObject"]["kind"] == "RayJob"
    assert event["message"].startswith(f'update by alice: taugate restored metadata.labels["{RUN_ID}"]=')
    described = researcher("describe", "-n", WORKSPACE, "rayjob/events-demo").stdout
    events_section = described.split("Events:", 1)[1]
    assert "Warning  Restored" in events_section and "taugate" in events_section, events_section
    print(f"\nkubectl describe rayjob/events-demo, Events:{events_section}")

    warned = [r for r in _json_lines(platform.webhook.log)
              if r.get("decision") == "warned" and r.get("object", {}).get("name") == "events-demo"]
    assert len(warned) == 1, warned
    [line] = warned
    assert (line["level"], line["logger"], line["path"], line["operation"], line["user"]) == (
        "INFO", "taugate.webhook.decisions", "/mutate", "UPDATE", "alice")
    assert line["object"] == {"kind": "RayJob", "namespace": WORKSPACE, "name": "events-demo"}
    assert line["policies"] == ["taugate"]


def test_a_denied_create_is_logged_once_by_the_webhook_that_denied_it(platform, researcher):
    out = researcher("create", "-f", "-", input=json.dumps(into_workspace(NINE_GPUS, name="nine-logged")),
                     check=False)
    assert out.returncode != 0 and "denied the request" in out.stderr, out
    denied = [r for r in _json_lines(platform.webhook.log)
              if r.get("decision") == "denied" and r.get("object", {}).get("name") == "nine-logged"]
    assert len(denied) == 1, denied
    [line] = denied
    assert (line["operation"], line["user"], line["object"]["kind"]) == ("CREATE", "alice", "RayJob")
    assert line["policies"] and all(isinstance(p, str) for p in line["policies"])
    assert any('limits["nvidia.com/gpu"]' in p for p in line["problems"]), line["problems"]


@pytest.fixture
def admin_core(platform):
    client = kubernetes.config.new_client_from_config(config_file=str(platform.cp.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def _inventory(platform) -> list[dict]:
    cluster = platform.cp.get_json("clusters.tau.azure.com", "cluster")
    return (cluster.get("status") or {}).get("gpuInventory") or []


def test_the_operator_at_info_logs_per_change_not_per_node_heartbeat(platform, admin_core):
    gpu_nodes = {n.metadata.name: n.status.allocatable["nvidia.com/gpu"] for n in admin_core.list_node().items
                 if (n.status.allocatable or {}).get("nvidia.com/gpu")}
    assert len(gpu_nodes) >= 5, gpu_nodes
    before = _inventory(platform)
    assert before and any(c["maxGpusPerNode"] > 1 for c in before), before
    log = platform.operator.log
    start, started = log.stat().st_size, time.monotonic()

    for _ in range(HEARTBEAT_ROUNDS):  # what a kubelet (or kwok's node/heartbeat stage) writes
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in gpu_nodes:
            admin_core.patch_node_status(name, {"status": {"conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": now}]}})
    # One change that matters on every node, after its heartbeats: kopf handles a node's events in
    # order, so once the TauCluster shows every marker, every heartbeat before it was handled.
    for name in gpu_nodes:
        admin_core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "1"}}})
    platform.wait_for("the TauCluster to count 1 GPU per node everywhere",
                      lambda: all(c["maxGpusPerNode"] <= 1 for c in _inventory(platform)), 60)
    window = time.monotonic() - started
    records = _json_lines(log, start)
    info = [r for r in records if r["level"] in ("INFO", "WARNING", "ERROR", "CRITICAL")]
    heartbeats, changes = HEARTBEAT_ROUNDS * len(gpu_nodes), len(gpu_nodes)
    print(f"\noperator at INFO: {len(info)} line(s) in {window:.1f} s for {heartbeats} Node heartbeats and "
          f"{changes} allocatable changes ({len(info) / window * 3600:.0f} lines/hour; "
          f"{heartbeats / window * 3600:.0f} heartbeats/hour)")
    try:
        assert not any("succeeded" in r["message"] for r in info), [r["message"] for r in info]
        # Bounded by the changes (each may write the TauCluster's status once), not the heartbeats.
        assert len(info) <= 2 * changes, [r["message"] for r in info]
    finally:
        for name, gpus in gpu_nodes.items():
            admin_core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": gpus}}})
        platform.wait_for("the TauCluster's GPU inventory as before", lambda: _inventory(platform) == before, 60)
