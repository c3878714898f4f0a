"""The API server policy benchmark (``bench/api_policy.py``) on the real control plane, small:
the policy's time per create read from the API server's own metrics, with the example TauCluster,
with more profiles (the operator writes them into the policy's parameter), and without the
policy's binding."""

from __future__ import annotations

from bench import api_policy


def test_the_policy_benchmark_reads_the_api_servers_time_in_taugates_policy_as_the_taucluster_grows(tmp_path):
    b = api_policy.start(tmp_path)
    try:
        result = api_policy.run(b, [0, 50], n=20, workdir=tmp_path)
    finally:
        b.stop()
    small, large, baseline = result["rows"]
    assert small["profiles"] + 50 == large["profiles"] and small["taucluster_bytes"] < large["taucluster_bytes"]
    assert small["parameter_bytes"] < large["parameter_bytes"]  # the operator wrote the 50 profiles in it
    for r in result["rows"]:
        assert r["creates"] == 20 and 0 < r["wall_p50_ms"] <= r["wall_p99_ms"]
        assert r["api_server_cpu_ms_per_create"] > 0
        assert r["policy_plugin_creates"] >= 20  # the plugin sees every CREATE, the dry runs included
    # the policy is evaluated with a binding (how its time grows is the bench's to say, not a test's)
    assert baseline["policy_plugin_mean_ms"] < min(small["policy_plugin_mean_ms"], large["policy_plugin_mean_ms"])
    table = api_policy.markdown(result)
    assert "| no policy binding | - | - | 20 |" in table
