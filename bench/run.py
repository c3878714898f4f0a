"""Admission benchmark: taugate against the null webhook, on this machine, in one run.

    python bench/run.py [--duration 3] [--repeat 5] [--scale-repeat 5] [--connections 1,16,64]
                        [--loop asyncio|uvloop] [--quick]

It starts the real ``taugate serve`` (TLS, mutate + validate with the policy library) and the
null webhook (``bench/null_webhook.py``: same aiohttp + TLS stack, parses the review, answers
allowed) each pinned to core 0, and drives them one after the other with ``wrk`` pinned to core
1 (installed with apt-get if missing), over loopback, each run bounded by ``--duration``.
Workloads come from KubeRay's and Kueue's samples in their pinned Go modules
(``bench/workloads.py``). Then the RayJob rows against a generated 5,000-node / 300-profile /
500-workspace snapshot (``bench/scale.py``), each run
alternating with one against the small-snapshot server (the p99 comparison is the median of the
per-pair ratios), with the server's resident memory and the snapshot load time. Every taugate
run also reports taugate's own handler p99 (its ``taugate_admission_duration_seconds``
histogram). A probe before and after measures how much of the server's core the machine itself
takes away (``stall_probe``), and the report counts how often the null webhook, the floor,
missed the p99 targets itself.

``python bench/run.py --e2e [options of bench/e2e.py]`` runs the end-to-end mode instead: creates
through a real API server with no webhook, taugate, taugate on OPA and Gatekeeper (``bench/e2e.py``).

Writes ``bench/results/latest.json`` and ``bench/results/latest.md`` (the Markdown table that
docs/performance.md quotes; ``--quick`` writes ``quick.json`` and ``quick.md`` instead) and prints
the table.
Exit 0 when it ran (targets missed are reported, not hidden), 2 when it could not run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import platform
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# E402 below: these imports need the checkout on sys.path (the script runs as `python bench/run.py`).
from bench import scale, workloads  # noqa: E402
from taugate.settings import Settings  # noqa: E402
from taugate.snapshot import load_snapshot  # noqa: E402

RESULTS = REPO / "bench" / "results"
LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("TAUGATE_BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
"""


def ensure_wrk() -> str:
    """The wrk binary, installed from Debian's packages when missing."""
    found = shutil.which("wrk")
    if found:
        return found
    subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=False, capture_output=True)
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, capture_output=True)
    return shutil.which("wrk") or sys.exit("bench: wrk could not be installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, path: str, timeout: float) -> float:
    """Seconds until https://127.0.0.1:port/path answers 200."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not ready after {timeout} s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if m is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value if unit == "ms" else value * 1000


def run_wrk(wrk: str, url: str, body: Path, connections: int, duration: float, script: Path) -> dict:
    """One wrk run pinned to core 1: req/s, p50 and p99 in ms, non-2xx and socket errors."""
    env = {**os.environ, "TAUGATE_BENCH_BODY": str(body)}
    cmd = ["taskset", "-c", "1", wrk, "-t1", f"-c{connections}", f"-d{int(duration)}s", "--latency",
           "-s", str(script), url]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 30)
    out = proc.stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not found:
        raise RuntimeError(f"wrk gave no result for {url}: {out[-1500:]} {proc.stderr[-1500:]}")
    rps = float(found.group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"rps": rps, "p50_ms": _ms(lat["50"]), "p99_ms": _ms(lat["99"]),
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": sum(map(int, errors.groups())) if errors else 0}


class Server:
    """A server process pinned to core 0."""

    def __init__(self, cmd: list[str], port: int, ready_path: str, timeout: float = 120):
        self.port = port
        self.proc = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        try:
            self.ready_s = wait_ready(port, ready_path, timeout)
        except RuntimeError:
            self.stop()
            stderr = self.proc.stderr.read().decode() if self.proc.stderr else ""
            raise RuntimeError(f"{cmd[0]} did not start: {stderr[-2000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def check_answer(port: int, path: str, body: bytes) -> dict:
    """One request before the load: the answer must be a valid AdmissionReview for the uid."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        answer = json.loads(r.read())
    uid = json.loads(body)["request"]["uid"]
    assert answer["response"]["uid"] == uid, answer
    return answer["response"]


_BUCKET = re.compile(r'^taugate_admission_duration_seconds_bucket\{(?P<labels>[^}]*)\} (?P<count>\S+)$', re.M)


def handler_buckets(port: int, path: str) -> dict[float, float]:
    """taugate's own time per review on ``path`` (``taugate_admission_duration_seconds``, from
    the request's arrival in the handler to its answer): cumulative count per bucket bound (s)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for m in _BUCKET.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        if labels.get("webhook") == path:
            out[float(labels["le"])] = float(m.group("count"))
    return out


def handler_quantiles(before: dict[float, float], after: dict[float, float]) -> dict:
    """p50 and p99 (ms, the upper bound of the bucket they fall in) of the reviews answered
    between two ``handler_buckets`` scrapes."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0
    if not total:
        return {"handler_p50_ms": None, "handler_p99_ms": None}
    def pick(q: float) -> float:
        """The bucket bound (ms) under which a fraction ``q`` of the requests fell."""
        return next(le for le, c in counts if c >= q * total) * 1000

    return {"handler_p50_ms": pick(0.5), "handler_p99_ms": pick(0.99)}


STALL_PROBE = """
import json, sys, time
end, rates = time.perf_counter() + float(sys.argv[1]), []
while True:
    t0, n = time.perf_counter(), 0
    while True:
        for _ in range(200):
            pass
        n += 1
        t = time.perf_counter()
        if t - t0 >= 0.005:
            break
    rates.append(n / (t - t0))
    if t > end:
        break
print(json.dumps(rates))
"""


def stall_probe(seconds: float = 5.0) -> dict:
    """How much of core 0 (the server's core) the machine itself takes away, measured with
    nothing else running on it: a pure-Python loop counts its speed in 5 ms windows for
    ``seconds``. ``slow_pct``: share of windows that ran at under half the median speed;
    ``lost_ms_per_s``: time those windows lost, per second (ms/s); ``longest_slow_ms``: the
    longest run of slow windows (ms); ``in_guest_ms``: time the probe waited for the CPU in
    this guest's own scheduler over the whole probe (ms; near 0 means the slowdown comes from
    the host, invisible to the guest, whose steal counter stays at 0 here)."""
    code = STALL_PROBE + "print(open('/proc/self/schedstat').read().split()[1])"
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code, str(seconds)], capture_output=True,
                         text=True, timeout=seconds + 60).stdout.split("\n")
    rates, waited_ns = json.loads(out[0]), int(out[1])
    median = sorted(rates)[len(rates) // 2]
    slow = [r < median / 2 for r in rates]
    longest = run = 0
    for s in slow:
        run = run + 1 if s else 0
        longest = max(longest, run)
    lost = sum((1 - r / median) * 5 for r in rates if r < median / 2)
    return {"seconds": seconds, "slow_pct": round(100 * sum(slow) / len(rates), 1),
            "lost_ms_per_s": round(lost / seconds, 1), "longest_slow_ms": longest * 5,
            "in_guest_ms": round(waited_ns / 1e6, 1)}


def decision_us(states: dict, rows, settings: Settings) -> dict:
    """In-process cost of one decision (parse, decide, render), microseconds, the fastest of 7
    batches of 300, per RayJob row and cluster state: with the queue and the network out of
    the way, whether the cost depends on the size of the cluster state shows directly."""
    import timeit

    import orjson

    from taugate.webhook import review
    from taugate.webhook.engines import load_policy_engine

    engine = load_policy_engine(settings.policy_dir)
    out = {}
    for name, path, body in rows:
        # As the server decides: a mutation edits the review it has just parsed, in place.
        decide = functools.partial(review.mutate, in_place=True) if path == "/mutate" else review.validate
        for label, state in states.items():
            def once(body=body, decide=decide, state=state) -> bytes:
                rev = review.parse_review(body)
                return orjson.dumps(review.review_response(rev, decide(rev["request"], state, settings, engine)))
            for _ in range(100):
                once()
            out[f"{name} {path} {label}"] = round(min(timeit.repeat(once, number=300, repeat=7)) / 300 * 1e6, 1)
    return out


def _median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (its own percentiles: they belong together)."""
    return sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]


def bench_rows(wrk: str, rows, conns, duration, tmp: Path, script: Path, taugate_port: int, null_port: int | None,
               repeat: int = 5, other: str = "null"):
    """Each row ``repeat`` times, taugate and the reference server on ``null_port`` alternately (so
    a noisy neighbour hits both), reporting the median run of each and the medians of the
    per-pair ratios: ``ratio`` of throughputs, ``p99_ratio`` of p99 latencies (taugate / other)."""
    out = []
    for name, path, body in rows:
        f = tmp / f"body-{abs(hash((name, path)))}.json"
        f.write_bytes(body)
        resp = check_answer(taugate_port, path, body)
        # One discarded second per server first: the first requests fill caches and allocator
        # arenas, which is start-up cost, not the steady state the rows report.
        run_wrk(wrk, f"https://127.0.0.1:{taugate_port}{path}", f, 16, 1, script)
        if null_port:
            run_wrk(wrk, f"https://127.0.0.1:{null_port}{path}", f, 16, 1, script)
        for c in conns:
            ts, ns, ratios, p99_ratios = [], [], [], []
            for _ in range(repeat):
                before = handler_buckets(taugate_port, path)
                ts.append(run_wrk(wrk, f"https://127.0.0.1:{taugate_port}{path}", f, c, duration, script))
                ts[-1].update(handler_quantiles(before, handler_buckets(taugate_port, path)))
                if null_port:
                    ns.append(run_wrk(wrk, f"https://127.0.0.1:{null_port}{path}", f, c, duration, script))
                    ratios.append(ts[-1]["rps"] / ns[-1]["rps"])
                    p99_ratios.append(ts[-1]["p99_ms"] / ns[-1]["p99_ms"])
            t, n = _median_run(ts), (_median_run(ns) if ns else None)
            row = {"workload": name, "path": path, "connections": c, "allowed": resp["allowed"],
                   "patched": "patch" in resp, "taugate": t, "null": n, "runs": {"taugate": ts, "null": ns},
                   "ratio": round(sorted(ratios)[len(ratios) // 2], 3) if ratios else None,
                   "p99_ratio": round(sorted(p99_ratios)[len(p99_ratios) // 2], 3) if p99_ratios else None}
            out.append(row)
            versus = (f" | {other} {n['rps']:8.0f} req/s p99 {n['p99_ms']:.2f} ms | ratio {row['ratio']:.2f}"
                      if n else "")
            print(f"  {name:28} {path:10} c={c:<3} taugate {t['rps']:8.0f} req/s p50 {t['p50_ms']:.2f} p99 "
                  f"{t['p99_ms']:.2f} ms (handler p99 {_bound(t.get('handler_p99_ms'))} ms){versus}", flush=True)
    return out


def _bound(ms: float | None) -> str:
    return "-" if ms is None else f"<= {ms:g}"


def _taugate_cells(r: dict) -> str:
    """A row's first cells: workload, path, connections, then taugate's req/s, p50, p99, handler p99."""
    t = r["taugate"]
    return (f"| {r['workload']} | `{r['path']}` | {r['connections']} | {t['rps']:.0f} | {t['p50_ms']:.2f} | "
            f"{t['p99_ms']:.2f} | {_bound(t.get('handler_p99_ms'))} |")


def floor_sentence(rows: list[dict]) -> str:
    """How often the null webhook's own runs missed the p99 targets (16 connections: 10 ms, 64
    connections: 40 ms), over every row: what any webhook on this stack and machine can reach."""
    parts = []
    for conns, limit in ((16, 10.0), (64, 40.0)):
        p99s = sorted(run["p99_ms"] for r in rows if r["connections"] == conns for run in r["runs"]["null"])
        if p99s:
            over = sum(p > limit for p in p99s)
            parts.append(f"at {conns} connections its p99 was over {limit:g} ms in {over} of {len(p99s)} runs "
                         f"({p99s[0]:.1f}-{p99s[-1]:.1f} ms)")
    return ("The null webhook (the floor): " + "; ".join(parts) + ".") if parts else ""


def markdown(result: dict) -> str:
    probe = result.get("stall_probe", {})
    lines = [f"Measured {result['date']} on {result['machine']} (server and wrk pinned to separate cores, "
             f"{result['duration_s']} s per run, median of {result['repeat']} alternating runs per row; "
             f"loop {result['loop']}).", "",
             "p50/p99 are wrk's (the client's view: queueing, TLS and the machine included); handler p99 is "
             "taugate's own time per review, from its `taugate_admission_duration_seconds` histogram (upper "
             "bucket bound).", "",
             "The machine: with nothing else on it, the server's core ran at under half its median speed in "
             + ", ".join(f"{v['slow_pct']}% of 5 ms windows {k} the runs (losing {v['lost_ms_per_s']} ms/s, "
                         f"longest stretch {v['longest_slow_ms']} ms)" for k, v in probe.items())
             + "; the guest's own scheduler made the probe wait "
             + " and ".join(f"{v['in_guest_ms']} ms" for v in probe.values())
             + ", so the host takes that time. " + floor_sentence(result["rows"]), "",
             "| workload | path | conns | taugate req/s | p50 ms | p99 ms | handler p99 ms | null req/s | "
             "null p50 ms | null p99 ms | ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        n = r["null"]
        lines.append(f"{_taugate_cells(r)} {n['rps']:.0f} | {n['p50_ms']:.2f} | {n['p99_ms']:.2f} | {r['ratio']:.2f} |")
    s = result["scale"]
    lines += ["", f"Scale ({s['nodes']} GPU nodes, {s['profiles']} profiles, {s['workspaces']} workspaces): "
              f"resident memory {s['rss_mb_idle']:.0f} MB after load, {s['rss_mb_loaded']:.0f} MB after the runs; "
              f"snapshot load {s['load_s_json']:.2f} s (JSON) / {s['load_s_yaml']:.2f} s (YAML) in process, "
              f"server ready in {s['ready_s']:.2f} s.", "",
              "In process, one RayJob decision (parse, decide, render; fastest of 7 batches of 300) took "
              + ", ".join(f"{k} {v} us" for k, v in s.get("decision_us", {}).items()) + ".", "",
              "Each run alternates with one against the small-snapshot server; the last column is the median of "
              "the per-pair p99 ratios.", "",
              "| workload | path | conns | req/s | p50 ms | p99 ms | handler p99 ms | small req/s | small p99 ms "
              "| p99 vs small snapshot |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in s["rows"]:
        o = r["small"]
        lines.append(f"{_taugate_cells(r)} {o['rps']:.0f} | {o['p99_ms']:.2f} | {r['p99_vs_small']:+.0%} |")
    lines += ["", "Targets (GPU RayJob CREATE on /mutate): " + ", ".join(
        f"{k}: {'met' if v['met'] else 'MISSED'} ({v['value']})" for k, v in result["targets"].items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per wrk run")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs per row and server (median reported; the ratio is the median of the per-pair ratios)")
    p.add_argument("--scale-repeat", type=int, default=5,
                   help="pairs of runs per scale row (a p99 ratio needs more pairs than a throughput ratio)")
    p.add_argument("--connections", default="1,16,64")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="event loop for both servers (uvloop: pip install uvloop; no measurable gain here)")
    p.add_argument("--quick", action="store_true",
                   help="2 s runs, 16 connections only, one pair; writes bench/results/quick.{json,md}")
    a = p.parse_args()
    if a.quick:
        a.duration, a.connections, a.repeat, a.scale_repeat = 2.0, "16", 1, 1
    conns = [int(c) for c in a.connections.split(",")]
    wrk = ensure_wrk()
    settings = Settings()
    tmp = Path(tempfile.mkdtemp(prefix="taugate-bench-"))
    script = tmp / "post.lua"
    script.write_text(LUA)
    taugate = shutil.which("taugate") or sys.exit("bench: the taugate command is not installed (pip install -e .)")
    subprocess.run([taugate, "certs", "generate", "--dir", str(tmp / "tls"), "--service", "taugate-webhook",
                    "--namespace", "taugate-system"], check=True, capture_output=True)
    small = REPO / "examples" / "cluster.yaml"
    state = load_snapshot(small, settings)
    rows = workloads.build(state, settings)
    servers: list[Server] = []
    result: dict = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                    "duration_s": a.duration, "repeat": a.repeat, "loop": a.loop}
    result["stall_probe"] = {"before": stall_probe()}
    try:
        tport, nport = free_port(), free_port()
        serve = [taugate, "serve", "--cluster", str(small), "--cert-dir", str(tmp / "tls"), "--port", str(tport),
                 "--loop", a.loop]
        servers.append(Server(serve, tport, "/readyz"))
        servers.append(Server([sys.executable, str(REPO / "bench" / "null_webhook.py"), "--cert-dir", str(tmp / "tls"),
                               "--port", str(nport), "--loop", a.loop], nport, "/healthz"))
        print("small snapshot (examples/cluster.yaml):", flush=True)
        result["rows"] = bench_rows(wrk, rows, conns, a.duration, tmp, script, tport, nport, a.repeat)
        servers.pop().stop()  # the null webhook; the small-snapshot taugate stays, for the pairs below

        big = tmp / "scale.json"
        big.write_bytes(json.dumps({"apiVersion": "v1", "kind": "List", "items": scale.generate()}).encode())
        t0 = time.perf_counter()
        big_state = load_snapshot(big, settings)
        load_json = time.perf_counter() - t0
        in_process = decision_us({"small": state, "5,000 nodes": big_state},
                                 [r for r in rows if r[0] == "RayJob CREATE"], settings)
        del big_state
        big_yaml = tmp / "scale.yaml"
        subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), str(big_yaml)], check=True)
        t0 = time.perf_counter()
        load_snapshot(big_yaml, settings)
        load_yaml = time.perf_counter() - t0
        bport = free_port()
        srv = Server([taugate, "serve", "--cluster", str(big), "--cert-dir", str(tmp / "tls"), "--port", str(bport),
                      "--loop", a.loop], bport, "/readyz", timeout=300)
        servers.append(srv)
        rss_idle = rss_mb(srv.proc.pid)
        # Alternate runs against the 5,000-node server and the small-snapshot one, so both
        # see the same machine: a p99 compared across minutes measures this VM, not taugate.
        print("scale snapshot (5,000 GPU nodes, 300 profiles, 500 workspaces), paired with the small one:", flush=True)
        scale_rows = bench_rows(wrk, [r for r in rows if r[0] == "RayJob CREATE"], conns, a.duration, tmp, script,
                                bport, tport, a.scale_repeat, other="small")
        for r in scale_rows:
            r["small"] = r.pop("null")
            r["p99_vs_small"] = r["p99_ratio"] - 1
        result["scale"] = {"nodes": 5000, "profiles": 300, "workspaces": 500, "rss_mb_idle": rss_idle,
                           "rss_mb_loaded": rss_mb(srv.proc.pid), "load_s_json": load_json, "load_s_yaml": load_yaml,
                           "ready_s": srv.ready_s, "rows": scale_rows,
                           "decision_us": in_process}
    finally:
        for s in servers:
            s.stop()
    result["stall_probe"]["after"] = stall_probe()
    key = [r for r in result["rows"] if r["workload"] == "RayJob CREATE" and r["path"] == "/mutate"]
    by_c = {r["connections"]: r for r in key}
    targets = {}
    if 16 in by_c:
        ratio = by_c[16]["ratio"]
        targets["throughput >= 0.35 x null at 16 conns"] = {"met": ratio >= 0.35, "value": ratio}
        targets["p99 <= 10 ms at 16 conns"] = {"met": by_c[16]["taugate"]["p99_ms"] <= 10,
                                               "value": by_c[16]["taugate"]["p99_ms"]}
    if 64 in by_c:
        targets["p99 <= 40 ms at 64 conns"] = {"met": by_c[64]["taugate"]["p99_ms"] <= 40,
                                               "value": by_c[64]["taugate"]["p99_ms"]}
    sc = result["scale"]
    targets["RSS <= 250 MB at 5,000 nodes"] = {"met": sc["rss_mb_loaded"] <= 250, "value": round(sc["rss_mb_loaded"])}
    # The subject: the GPU RayJob CREATE on /mutate at 16 (and 64) connections. The
    # 1-connection p99 (the slowest ~80 of ~8,000 requests, 1-4 ms) is shown, not judged.
    judged = [r for r in sc["rows"] if r["path"] == "/mutate" and r["connections"] in (16, 64)]
    if judged:
        worst = max(r["p99_vs_small"] for r in judged)
        targets["p99 at 5,000 nodes within 20% of small (16, 64 conns)"] = {"met": worst <= 0.2,
                                                                            "value": f"{worst:+.0%}"}
    result["targets"] = targets
    RESULTS.mkdir(exist_ok=True)
    name = "quick" if a.quick else "latest"  # a quick look never replaces the full run docs/performance.md quotes
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (RESULTS / f"{name}.md").write_text(md)
    print("\n" + md)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if "--e2e" in sys.argv[1:]:  # the end-to-end mode: bench/e2e.py, through a real API server
        from bench import e2e

        sys.exit(e2e.main([a for a in sys.argv[1:] if a != "--e2e"]))
    sys.exit(main())
