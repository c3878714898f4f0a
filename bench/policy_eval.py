"""Benchmark: policy evaluation time per admission request (embedded regorus engine).

Builds the policy input for KubeRay's GPU RayJob sample (pytorch-resnet-image-classifier,
4 workers x 1 GPU) in workspace ``vision`` of ``examples/cluster.yaml`` exactly as the
validating webhook does (``webhook.review.admit`` with a recording engine), then times
``engine.evaluate(input)``: one engine query (``data.taugate.aggregate.results``) that
evaluates every policy of ``policies/``. Also times the 16 workers x 4 GPUs variant, which
two policies flag (the messages cost extra formatting).

Usage: ``python bench/policy_eval.py [--iterations N] [--json]``; prints median and p99 wall
time and the median thread CPU time in milliseconds per case, with the load average (other
processes on the 2 cores inflate wall time). Target on the 2-core dev machine: median <= 0.3 ms
for the sample.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# E402 below: these imports need the checkout on sys.path (the script runs as `python bench/policy_eval.py`).

from taugate.settings import Settings  # noqa: E402
from taugate.snapshot import load_snapshot  # noqa: E402
from taugate.webhook.engines import load_policy_engine  # noqa: E402
from taugate.webhook.policy.engine import EmbeddedPolicyEngine  # noqa: E402
from taugate.webhook.review import admit  # noqa: E402
from tests.paths import IMAGE_CLASSIFIER as SAMPLE  # noqa: E402  (KubeRay's GPU RayJob, from its Go module)


class Recorder:
    """A PolicyEngine that records the inputs validation hands to the real engine."""

    def __init__(self, engine):
        self.engine, self.inputs = engine, []
        self.digest = engine.digest

    def evaluate(self, input: dict):
        self.inputs.append(copy.deepcopy(input))
        return self.engine.evaluate(input)


def scaled(obj: dict, workers: int, gpus: int) -> dict:
    obj = copy.deepcopy(obj)
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = group["minReplicas"] = group["maxReplicas"] = workers
    for key in ("limits", "requests"):
        group["template"]["spec"]["containers"][0]["resources"][key]["nvidia.com/gpu"] = str(gpus)
    return obj


def measure(engine, doc: dict, iterations: int) -> dict:
    for _ in range(200):
        engine.evaluate(doc)
    gc.collect()
    gc.disable()
    try:
        times, cpu = [], []
        for _ in range(iterations):
            start, start_cpu = time.perf_counter(), time.thread_time()
            engine.evaluate(doc)
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
    finally:
        gc.enable()
    times.sort()
    return {"median_ms": statistics.median(times) * 1e3, "p99_ms": times[int(len(times) * 0.99) - 1] * 1e3,
            "cpu_median_ms": statistics.median(cpu) * 1e3, "input_bytes": len(json.dumps(doc))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=5000)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = p.parse_args(argv)
    settings = Settings()
    state = load_snapshot(ROOT / "examples" / "cluster.yaml", settings)
    engine = load_policy_engine(ROOT / "policies")
    assert isinstance(engine, EmbeddedPolicyEngine)  # what this measures: the in-process engine
    sample = yaml.safe_load(SAMPLE.read_text())
    cases = {"rayjob 4 workers x 1 GPU (allowed)": sample,
             "rayjob 16 workers x 4 GPUs (denied)": scaled(sample, 16, 4)}
    report: dict[str, Any] = {"policies": len(engine.store.current.policies), "digest": engine.digest[:12],
              "load_average": os.getloadavg()[0], "cases": {}}
    for name, obj in cases.items():
        rec = Recorder(engine)
        decision = admit(obj, state=state, settings=settings, engine=rec, namespace="vision")
        doc = rec.inputs[-1]
        report["cases"][name] = {**measure(engine, doc, args.iterations), "allowed": decision.allowed,
                                 "results": len(engine.evaluate(doc))}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"policy evaluation, {report['policies']} policies in one query, set {report['digest']}, "
              f"{args.iterations} iterations, load average {report['load_average']:.2f} on {os.cpu_count()} cores")
        for name, r in report["cases"].items():
            print(f"  {name}: median {r['median_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, "
                  f"CPU median {r['cpu_median_ms']:.3f} ms (input {r['input_bytes']} bytes, {r['results']} result(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
