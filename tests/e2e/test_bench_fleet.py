"""The fleet benchmark (``bench/fleet.py``) on the real control plane, tiny: two steps of kwok GPU
Nodes, workspaces and queued Jobs through the API server, every measurement read back, and the
recorder's cold start in both evidence backends."""

from __future__ import annotations

from bench import fleet


def test_the_fleet_benchmark_measures_each_step_and_the_recorders_backlog_in_both_stores(tmp_path):
    f = fleet.start(tmp_path)
    try:
        result = fleet.run(f, [10, 20], workspaces_per_node=0.2, workloads_per_node=1.0, concurrency=4,
                           backlog="last", rest_seconds=2, samples=1)
    finally:
        f.stop()
    first, last = result["rows"]
    assert (first["nodes"], first["workspaces"], first["workloads"]) == (10, 2, 10)
    assert (last["nodes"], last["workspaces"], last["workloads"]) == (20, 4, 20)
    for r in result["rows"]:
        assert r["errors"] == 0, r["first_error"]
        assert r["creates"] == 10 and 0 < r["create_p50_ms"] <= r["create_p99_ms"]
        # one call of taugate's webhook per create, on the API server's clock and on its own
        assert [(w["webhook"], w["calls"]) for w in r["taugate_api_server"]] == [
            ("mutate.workloads.tau.azure.com", 10)]
        assert r["taugate_own"]["calls"] == 10
        assert r["node_change_samples"] == 2 and 0 < r["node_change_p50_s"] <= r["node_change_max_s"]
        assert r["webhook_rss_mib"] > 0 and r["webhook_cpu_s_per_min"] >= 0
        assert r["operator_cold_start_s"] > 0 and r["operator_rss_mib"] > 0
        assert -1 <= r["operator_first_ready_s"] <= r["operator_cold_start_s"] + 1
        assert r["operator_stop_exit"] == 0 and r["operator_stop_s"] < 30  # a clean stop, its Lease released
        assert r["recorder_live_runs_per_s"] > 0
    assert "backlog" not in first
    files, s3 = last["backlog"]
    assert (files["backend"], s3["backend"]) == ("files", "s3")
    for b in (files, s3):
        assert b["runs"] == 20 and b["events"] >= 2 * b["runs"] and b["runs_per_s"] > 0
        assert b["operator_stop_exit"] == 0
    assert files["events"] == s3["events"]  # the same runs, the same chains, in either store
    table = fleet.markdown(result)
    assert "| 20 | 4 | 20 |" in table and "| 20 | s3 | 20 (20) |" in table
