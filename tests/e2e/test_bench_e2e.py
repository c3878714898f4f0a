"""The end-to-end benchmark (``bench/e2e.py``) on a real control plane, small: a few creates of each
workload through the API server with no webhook and with taugate (or Kyverno), alternating, and the
API server's own webhook histograms read back per webhook, with the webhook calls per create."""

from __future__ import annotations

import json

import yaml

from bench import e2e
from tests.paths import POLICIES

N = 6


def _rows(result: dict) -> dict[tuple[str, str], dict]:
    """The rows of a run of both workloads in two configurations, each with every create made."""
    rows = {(r["workload"], r["config"]): r for r in result["rows"]}
    assert len(rows) == 4
    for (workload, config), r in rows.items():
        assert r["errors"] == 0 and r["creates"] == N, (workload, config, result["first_errors"])
    return rows


def test_the_e2e_benchmark_reports_each_webhook_the_api_server_called_with_its_latency(tmp_path):
    configs = ("none", "taugate")
    b = e2e.start(tmp_path, configs)
    try:
        result = e2e.run(b, configs, n=N, concurrency=3, rounds=1)
    finally:
        b.stop()
        b.cp.stop()
    for (_, config), r in _rows(result).items():
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
            assert r["own_calls_per_create"] == 0 and r["calls_per_create"] >= 1  # Kueue's
            continue
        # One call per create: /mutate decides both (reinvocation may add a call); no validating call.
        assert set(taugate) == {("mutate.workloads.tau.azure.com", "admit")}, taugate
        assert taugate[("mutate.workloads.tau.azure.com", "admit")]["calls"] >= N
        assert r["own_calls_per_create"] == round(taugate[("mutate.workloads.tau.azure.com", "admit")]["calls"] / N, 2)
        assert r["calls_per_create"] == round(sum(w["calls"] for w in names.values()) / N, 2)
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


def _sample(policy: str, name: str) -> dict:
    return yaml.safe_load((POLICIES / policy / "samples" / name).read_text())


def test_the_kyverno_peer_refuses_through_the_api_server_and_costs_one_call_per_create(tmp_path):
    """Kyverno's admission controller with the translated library, the webhook configurations it
    registered put in force by the bench's switching: a RayJob whose workers ask for more GPUs than
    a node has is refused by the API server with the translation's message (and not stored), a
    RayJob with a GPU on its head is stored with Kyverno's warning, and the benchmark's workloads
    go through with one call to Kyverno's webhook per create."""
    configs = ("none", "kyverno")
    b = e2e.start(tmp_path, configs)
    try:
        b.switch("kyverno")
        too_big = _sample("gpu-per-pod-fits-node", "example_disallowed_sixteen_gpus_per_pod.yaml")
        r = b.cp.kubectl("create", "-f", "-", input=json.dumps(too_big), check=False)
        assert r.returncode != 0
        assert f'admission webhook "{b.kyverno_webhook}" denied the request' in r.stderr
        assert ("Policy taugate-gpu-per-pod-fits-node failed: gpu-per-pod-fits-node: worker group big-workers asks "
                "for 16 GPUs per pod, but the largest h100 node has 8") in r.stderr, r.stderr
        gone = b.cp.kubectl("get", "rayjob", too_big["metadata"]["name"], "-n", too_big["metadata"]["namespace"],
                            check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
        head_gpu = _sample("head-without-gpu", "example_disallowed_head_one_gpu.yaml")
        r = b.cp.kubectl("create", "-f", "-", input=json.dumps(head_gpu), check=False)
        assert r.returncode == 0, r.stderr
        warning = "Warning: Policy taugate-head-without-gpu failed: head-without-gpu: the Ray head asks for 1 GPUs"
        assert warning in r.stderr, r.stderr
        b.cp.kubectl("delete", "rayjob", head_gpu["metadata"]["name"], "-n", head_gpu["metadata"]["namespace"])
        result = e2e.run(b, configs, n=N, concurrency=3, rounds=1)
    finally:
        b.stop()
        b.cp.stop()
    for (_, config), r in _rows(result).items():
        kyverno = {w["webhook"]: w for w in r["webhooks"] if w["webhook"] == b.kyverno_webhook}
        if config == "none":
            assert kyverno == {} and r["handler"] == {} and r["own_calls_per_create"] == 0
            continue
        assert kyverno[b.kyverno_webhook]["calls"] == N and kyverno[b.kyverno_webhook]["rejected"] == 0
        assert kyverno[b.kyverno_webhook]["type"] == "validating"
        assert r["own_calls_per_create"] == 1.0
        own = r["handler"][b.kyverno_webhook]  # Kyverno's own time per review, from its /metrics
        assert own["calls"] >= N and 0 < own["mean_ms"] <= kyverno[b.kyverno_webhook]["mean_ms"]
        assert r["p99_vs_none"] > 0 and r["throughput_vs_none"] > 0
    md = e2e.markdown(result)
    assert "| kyverno |" in md and "webhook calls per create" in md
