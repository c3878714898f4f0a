"""Heavy reviews against a normal one: ten clients send unique ~64 KiB RayJob reviews with 1,000
containers each while one client sends normal RayJob CREATEs; what the normal review's latency
is, with heavy reviews decided on the event loop (sized by bytes only, the rule before issue 27
item 9) and off it (sized by their work too: ``webhook.server.INLINE_OBJECTS``).

    python bench/heavy_reviews.py [--duration 20] [--heavy-clients 10] [--containers 1000]

The server is the real one (``AdmissionServer`` over HTTPS with the bundled policies and
``examples/cluster.yaml``), run in a child process pinned to core 0, once per rule; the clients
(aiohttp, one TLS connection each) run here, pinned to core 1. Every heavy review is unique (its
containers' names and CPU requests carry a counter), so nothing is remembered between them.
Prints a Markdown table (docs/performance.md quotes it) and writes
``bench/results/heavy_reviews.json``. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
EXAMPLE_RAYJOB = REPO / "examples" / "rayjob-image-classifier.yaml"
SERVICE = "taugate-webhook.taugate-system.svc"


def serve(inline_objects: int, cert_dir: Path, port_file: Path) -> None:
    """The child: the admission server on a free port (written to ``port_file``) until killed."""
    from taugate.certs.serving import ServingTLS
    from taugate.settings import Settings
    from taugate.webhook import lifecycle
    from taugate.webhook import server as srv
    from taugate.webhook.engines import load_policy_engine
    from taugate.webhook.providers import SnapshotStateProvider

    os.sched_setaffinity(0, {0})
    settings = Settings()

    async def main() -> None:
        server = srv.AdmissionServer(SnapshotStateProvider(EXAMPLE_CLUSTER, settings), settings,
                                     load_policy_engine(settings.policy_dir), inline_objects=inline_objects)
        running = await lifecycle.start(server, ServingTLS(cert_dir), host="127.0.0.1", port=0)
        port_file.write_text(str(running.port))
        await asyncio.Event().wait()

    asyncio.run(main())


def _review(obj: dict, uid: str) -> dict:
    gvk = {"group": "ray.io", "version": "v1", "kind": "RayJob"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": gvk, "requestKind": gvk,
                        "resource": {"group": "ray.io", "version": "v1", "resource": "rayjobs"},
                        "namespace": "vision", "operation": "CREATE", "name": "",
                        "userInfo": {"username": "alice@example.com", "groups": ["vision-researchers"]},
                        "object": obj, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def heavy_template(containers: int) -> bytes:
    """A review body with ``@N@`` where each request puts its counter (names and CPU requests)."""
    import yaml

    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    spec = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    spec["containers"] += [{"name": f"s{i}-@N@", "image": "b:@N@", "command": ["sleep", "@N@"]}
                           for i in range(containers)]
    return json.dumps(_review(obj, "heavy-@N@"), separators=(",", ":")).encode()


def normal_body(n: int) -> bytes:
    import yaml

    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    obj["metadata"]["name"] = f"victim-{n}"
    return json.dumps(_review(obj, f"victim-{n}")).encode()


async def drive(port: int, ca: Path, duration: float, heavy_clients: int, template: bytes) -> dict:
    import aiohttp

    ctx = ssl.create_default_context(cafile=str(ca))
    url = f"https://127.0.0.1:{port}/mutate"
    headers = {"Content-Type": "application/json"}
    victim: list[float] = []
    heavy: list[float] = []
    statuses: dict[str, int] = {}
    counter = iter(range(1, 10**9))
    stop = time.monotonic() + duration

    async def post(session, body: bytes) -> float:
        started = time.perf_counter()
        async with session.post(url, data=body, ssl=ctx, server_hostname=SERVICE, headers=headers) as r:
            answer = await r.json()
        elapsed = time.perf_counter() - started
        resp = answer.get("response") or {}
        key = f"{r.status} {'allowed' if resp.get('allowed') else (resp.get('status') or {}).get('code')}"
        statuses[key] = statuses.get(key, 0) + 1
        return elapsed

    async def heavy_client():
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < stop:
                heavy.append(await post(session, template.replace(b"@N@", str(next(counter)).encode())))

    async def victim_client():
        async with aiohttp.ClientSession() as session:
            await asyncio.sleep(1.0)  # load first: the heavy clients are sending (a benchmark's warm-up, not a test)
            while time.monotonic() < stop:
                victim.append(await post(session, normal_body(next(counter))))

    await asyncio.gather(victim_client(), *(heavy_client() for _ in range(heavy_clients)))
    return {"victim": victim, "heavy": heavy, "statuses": statuses}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def run(rule: str, inline_objects: int, args: argparse.Namespace, cert_dir: Path) -> dict:
    port_file = Path(tempfile.mkdtemp()) / "port"
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(inline_objects), str(cert_dir), str(port_file)],
                             cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text():
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start (exit {child.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text())
        template = heavy_template(args.containers)
        out = asyncio.run(drive(port, cert_dir / "ca.crt", args.duration, args.heavy_clients, template))
    finally:
        child.kill()
        child.wait()
    v, h = out["victim"], out["heavy"]
    return {"rule": rule, "inline_objects": inline_objects, "heavy_body_bytes": len(template) + 5,
            "victim_reviews": len(v), "victim_p50_ms": _pct(v, 0.5), "victim_p99_ms": _pct(v, 0.99),
            "victim_max_ms": max(v) * 1000 if v else float("nan"), "heavy_reviews": len(h),
            "heavy_p50_ms": _pct(h, 0.5), "heavy_p99_ms": _pct(h, 0.99), "answers": out["statuses"],
            "victim_mean_ms": statistics.fmean(v) * 1000 if v else float("nan")}


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--heavy-clients", type=int, default=10)
    p.add_argument("--containers", type=int, default=1000)
    args = p.parse_args()
    from taugate.certs import store
    from taugate.settings import Settings
    from taugate.webhook.server import INLINE_OBJECTS

    os.sched_setaffinity(0, {1})
    cert_dir = Path(tempfile.mkdtemp()) / "tls"
    store.generate(cert_dir, service="taugate-webhook", namespace="taugate-system")
    rows = [run("bytes only (before)", 10**9, args, cert_dir), run("bytes and objects", INLINE_OBJECTS, args, cert_dir)]
    deadline_ms = Settings().admission_deadline_seconds * 1000
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Measured {when} on {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}: "
             f"server on core 0, clients on core 1, {args.duration:g} s per rule, {args.heavy_clients} clients "
             f"sending unique {rows[0]['heavy_body_bytes'] // 1024} KiB reviews of {args.containers} containers, "
             f"one client sending normal RayJob CREATEs to /mutate; admission deadline {deadline_ms:g} ms.", "",
             "| rule | normal reviews | normal p50 ms | normal p99 ms | normal max ms | heavy reviews | "
             "heavy p50 ms | heavy p99 ms | answers |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        answers = ", ".join(f"{k}: {n}" for k, n in sorted(r["answers"].items()))
        lines.append(f"| {r['rule']} | {r['victim_reviews']} | {r['victim_p50_ms']:.1f} | {r['victim_p99_ms']:.1f} | "
                     f"{r['victim_max_ms']:.1f} | {r['heavy_reviews']} | {r['heavy_p50_ms']:.1f} | "
                     f"{r['heavy_p99_ms']:.1f} | {answers} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "heavy_reviews.json").write_text(json.dumps({"measured": when, "args": vars(args), "rows": rows},
                                                           indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
