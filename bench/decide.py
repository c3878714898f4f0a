"""Benchmark: the decision of ``/mutate`` and ``/validate`` in process (no HTTP), per review.

Times ``review.mutate`` then ``review.validate`` (on the mutated object, as the API server sends it
to the validating webhook) for KubeRay's GPU RayJob sample in workspace ``vision`` of
``examples/cluster.yaml`` with the bundled policies on the embedded engine, in two sweeps: every
review a new RayJob name (what a cluster sees: the name, uid and run-id differ every time) and the
same review repeated (a retry). Prints the median and p99 thread CPU time in microseconds per
review and the load average (other processes on the 2 cores inflate the numbers; thread CPU time
is the steadier figure).

Usage: ``python bench/decide.py [--reviews N] [--json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from taugate.settings import Settings
from taugate.snapshot import load_snapshot
from taugate.webhook import review
from taugate.webhook.engines import load_policy_engine

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "examples" / "rayjob-image-classifier.yaml"


def _request(obj: dict) -> dict:
    gvk = {"group": "ray.io", "version": "v1", "kind": "RayJob"}
    gvr = {"group": "ray.io", "version": "v1", "resource": "rayjobs"}
    return {"uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"].get("name", ""), "namespace": "vision", "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["vision-researchers", "system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(reviews: int) -> dict[str, Any]:
    settings = Settings()
    state = load_snapshot(REPO / "examples" / "cluster.yaml", settings)
    engine = load_policy_engine(REPO / "policies")
    base = yaml.safe_load(SAMPLE.read_text())
    base["metadata"].pop("generateName", None)
    out: dict[str, Any] = {"loadavg": os.getloadavg()[0], "reviews": reviews}
    for sweep in ("new name each review", "same review repeated"):
        mutate_us, validate_us = [], []
        for i in range(reviews):
            obj = copy.deepcopy(base)
            obj["metadata"]["name"] = f"resnet-{i}" if sweep.startswith("new") else "resnet"
            req = _request(obj)
            t0 = time.thread_time_ns()
            m = review.mutate(req, state, settings, engine)
            t1 = time.thread_time_ns()
            final = m.object if m.object is not None else obj
            v = review.validate(dict(req, object=final), state, settings, engine)
            t2 = time.thread_time_ns()
            assert m.allowed and v.allowed, (m.message, v.message)
            mutate_us.append((t1 - t0) / 1e3)
            validate_us.append((t2 - t1) / 1e3)
        out[sweep] = {"mutate_median_us": statistics.median(mutate_us), "mutate_p99_us": _pct(mutate_us, 0.99),
                      "validate_median_us": statistics.median(validate_us),
                      "validate_p99_us": _pct(validate_us, 0.99)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reviews", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    result = run(a.reviews)
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"load average {result['loadavg']:.2f}; {a.reviews} reviews per sweep; thread CPU time per review")
    for sweep in ("new name each review", "same review repeated"):
        r = result[sweep]
        print(f"  {sweep}: /mutate median {r['mutate_median_us']:.0f} us p99 {r['mutate_p99_us']:.0f} us; "
              f"/validate median {r['validate_median_us']:.0f} us p99 {r['validate_p99_us']:.0f} us")


if __name__ == "__main__":
    main()
