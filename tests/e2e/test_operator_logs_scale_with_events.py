"""The operator at INFO logs per meaningful change, not per Node heartbeat, on the whole stack (Kueue,
KubeRay and kwok's GPU nodes, ``tests/e2e/stack.py``; the operator with the chart's args and env,
so JSON at INFO, recorder on).

Node status heartbeats are written as a kubelet (or kwok's ``node/heartbeat`` stage, every 20-45 s
per node) writes them: the Ready condition's ``lastHeartbeatTime``. kopf ran a handler for each
and logged ``Handler '_node' succeeded.`` at INFO (1,273 lines in 11 minutes with 10 kwok nodes);
that line is DEBUG now (``controllers/kopf_startup.py`` ``RoutineAtDebug``). kopf merges one object's
events that arrive within ``settings.batching.batch_window`` (0.1 s), so a burst of heartbeats is
fewer handler runs than heartbeats spread out: the bound below counts changes, never heartbeats.
The measured numbers are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import kubernetes
import pytest

HEARTBEAT_ROUNDS = 20


def _json_lines(path, start: int = 0) -> list[dict]:
    with open(path, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def stack_platform(whole_stack):
    return whole_stack.platform


@pytest.fixture
def admin_core(stack_platform):
    client = kubernetes.config.new_client_from_config(config_file=str(stack_platform.cp.kubeconfig))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def _inventory(platform) -> list[dict]:
    cluster = platform.cp.get_json("clusters.tau.azure.com", "cluster")
    return (cluster.get("status") or {}).get("gpuInventory") or []


def test_the_operator_at_info_logs_per_change_not_per_node_heartbeat(stack_platform, admin_core):
    gpu_nodes = {n.metadata.name: n.status.allocatable["nvidia.com/gpu"] for n in admin_core.list_node().items
                 if (n.status.allocatable or {}).get("nvidia.com/gpu")}
    assert len(gpu_nodes) >= 5, gpu_nodes
    before = _inventory(stack_platform)
    assert before and any(c["maxGpusPerNode"] > 1 for c in before), before
    log = stack_platform.operator.log
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
    stack_platform.wait_for("the TauCluster to count 1 GPU per node everywhere",
                            lambda: all(c["maxGpusPerNode"] <= 1 for c in _inventory(stack_platform)), 60)
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
        stack_platform.wait_for("the TauCluster's GPU inventory as before",
                                lambda: _inventory(stack_platform) == before, 60)
