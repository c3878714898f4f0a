"""The end-to-end benchmark (``bench/e2e.py``) on a real control plane, small: a few creates of each
workload through the API server with no webhook and with taugate, alternating, and the API
server's own webhook histograms read back per webhook."""

from __future__ import annotations

from bench import e2e

N = 6


def test_the_e2e_benchmark_reports_each_webhook_the_api_server_called_with_its_latency(tmp_path):
    configs = ("none", "taugate")
    b = e2e.start(tmp_path, configs)
    try:
        result = e2e.run(b, configs, n=N, concurrency=3, rounds=1)
    finally:
        b.stop()
        b.cp.stop()
    rows = {(r["workload"], r["config"]): r for r in result["rows"]}
    assert len(rows) == 4
    for (workload, config), r in rows.items():
        assert r["errors"] == 0 and r["creates"] == N, (workload, config, result["first_errors"])
        assert 0 < r["p50_ms"] <= r["p99_ms"] < 30_000
        assert r["creates_per_s"] > 0
        names = {(w["webhook"], w["type"]): w for w in r["webhooks"]}
        # Kueue's own webhooks act in every configuration (kubebuilder names end in .kb.io).
        assert any(n.endswith(".kb.io") and t == "admit" for n, t in names), names
        assert any(n.endswith(".kb.io") and t == "validating" for n, t in names), names
        taugate = {k: v for k, v in names.items() if k[0].endswith("workloads.tau.azure.com")}
        if config == "none":
            assert taugate == {}
            assert "p99_vs_none" not in r and r["handler"] == {}
            continue
        # One call per create: /mutate decides both (reinvocation may add a call); no validating call.
        assert set(taugate) == {("mutate.workloads.tau.azure.com", "admit")}, taugate
        assert taugate[("mutate.workloads.tau.azure.com", "admit")]["calls"] >= N
        for w in taugate.values():
            assert w["rejected"] == 0
            assert 0 < w["mean_ms"] < 3000 and 0 < w["p50_ms"] <= w["p99_ms"] <= 3000
        assert r["p99_vs_none"] > 0 and r["throughput_vs_none"] > 0
        # taugate's own time per review, from its /metrics: far below what the API server waited.
        own = r["handler"]
        assert own["/mutate"]["calls"] >= N and own.get("/validate", {}).get("calls", 0) == 0, own
        assert 0 < own["/mutate"]["mean_ms"] <= taugate[("mutate.workloads.tau.azure.com", "admit")]["mean_ms"]
    md = e2e.markdown(result)
    assert "mutate.workloads.tau.azure.com" in md and "| none |" in md
