"""What taugate's own API server policy costs a create, as the TauCluster grows.

    python bench/api_policy.py [--profiles 0,100,500] [--n 200] [--out api_policy]

The operator keeps a ValidatingAdmissionPolicy, ``taugate-admitted-workloads``
(``taugate/admission_policy.py``), whose parameter is the TauProfilePlacement of that name that the
operator writes from the TauCluster ``cluster`` (until 2026-12-07 the TauCluster itself, which the
API server converted whole on every evaluation: 190 ms per create at 505 profiles). The API server
evaluates it in process for every create and update of a judged kind in a workspace namespace; no
webhook metric shows its time. This bench measures it on the control plane of ``tests/e2e``
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from their pinned Go modules,
taugate installed as the chart installs it, ``tests/e2e/platform.install``), nothing else running.

For each count in ``--profiles`` the TauCluster gets that many workload profiles beyond the
example's (copies of its first, each for its own namespace), the bench waits until the operator
has resolved them into the TauCluster's status, and then makes ``--n`` server-side dry runs of the
GPU Job of ``policies/gpu-per-pod-fits-node/samples`` in the example's ``vision`` workspace, one
after the other (a dry run passes every admission step, the policy included, and stores nothing).
Per row: the TauCluster's and the parameter's sizes (bytes of their JSON), the client's
wall time p50/p99, the API server's CPU per create (``/proc/<pid>/stat``, user + system), and the mean time of the API
server's ``ValidatingAdmissionPolicy`` admission plugin per CREATE
(``apiserver_admission_controller_admission_duration_seconds``, differenced). Last, the operator
stopped and the policy's binding deleted, the same dry runs without the policy: the baseline.

Writes ``bench/results/api_policy.json`` and ``.md`` (``--out`` changes the stem), prints the
table. Exit 0 when it ran, 2 when the control plane could not start.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform as _platform
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# E402 below: these imports need the checkout on sys.path (the script runs as `python bench/api_policy.py`).
from bench.e2e import percentile, write_results  # noqa: E402
from taugate.kube import Kube, KubeError, load_configuration  # noqa: E402
from taugate.kubeaccess import Resource  # noqa: E402
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, build, wait_until  # noqa: E402
from tests.e2e.platform import Platform, install  # noqa: E402
from tests.e2e.workloads import into_workspace  # noqa: E402
from tests.paths import POLICIES  # noqa: E402

JOBS = Resource("batch", "v1", "jobs", "Job", True)
GPU_JOB = yaml.safe_load((POLICIES / "gpu-per-pod-fits-node" / "samples" /
                          "example_allowed_job_single_gpu.yaml").read_text())
PLUGIN = 'name="ValidatingAdmissionPolicy"'
BINDING = "taugate-admitted-workloads"


def plugin_time(text: str) -> tuple[float, float]:
    """(seconds, count) of the ValidatingAdmissionPolicy plugin over CREATEs, from a ``/metrics`` text."""
    total = count = 0.0
    prefix = "apiserver_admission_controller_admission_duration_seconds_"
    for line in text.splitlines():
        if line.startswith(prefix) and PLUGIN in line and 'operation="CREATE"' in line:
            if line.startswith(prefix + "sum{"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith(prefix + "count{"):
                count += float(line.rsplit(" ", 1)[1])
    return total, count


class Bench:
    """The control plane, taugate on it, and an admin client."""

    def __init__(self, cp: ControlPlane, plat: Platform) -> None:
        self.cp, self.plat = cp, plat
        self.kube = Kube.from_configuration(load_configuration(kubeconfig=str(cp.kubeconfig)))
        self.api_pid = next(p for p in cp.processes if p.name == "kube-apiserver").popen.pid
        self.base_profiles = self.cluster()["spec"]["workloadProfiles"]

    def cluster(self) -> dict:
        return json.loads(self.cp.kubectl("get", "clusters.tau.azure.com", "cluster", "-o", "json").stdout)

    def parameter_bytes(self) -> int:
        """The size of the policy's parameter (the operator writes it before the TauCluster's status)."""
        return len(self.cp.kubectl("get", "profileplacements.tau.azure.com", BINDING, "-o", "json").stdout)

    def api_cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.api_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def scrape(self) -> tuple[float, float]:
        with urllib.request.urlopen(f"{self.cp.server}/metrics", context=self.cp.ssl_context(), timeout=30) as r:
            return plugin_time(r.read().decode())

    def profiles(self, extra: int, workdir: Path) -> int:
        """Give the TauCluster ``extra`` profiles beyond the example's and wait until the operator
        resolved them; returns the TauCluster's size in bytes."""
        more = []
        for i in range(extra):
            p = copy.deepcopy(self.base_profiles[0])
            p["name"], p["applicability"] = f"bench-{i:04d}", {"namespaces": [f"bench-{i:04d}"]}
            more.append(p)
        want = self.base_profiles + more
        patch = workdir / "profiles.json"  # a file: 500 profiles are more than an argument may hold
        patch.write_text(json.dumps({"spec": {"workloadProfiles": want}}))
        self.cp.kubectl("patch", "clusters.tau.azure.com", "cluster", "--type=merge", "--patch-file", str(patch))

        def resolved() -> int | None:
            c = self.cluster()
            status = ((c.get("status") or {}).get("workloadProfiles") or {})
            return len(json.dumps(c)) if len(status.get("profiles") or []) == len(want) else None
        return wait_until(f"the operator to resolve {len(want)} profiles", resolved, 600,
                          processes=self.cp.processes)

    def dry_runs(self, n: int, label: str) -> dict:
        """``n`` server-side dry runs of the GPU Job, one after the other (after 10 not counted,
        once the webhook has the profile set the operator resolved: until then it refuses)."""
        def admitted() -> bool:
            try:
                self.kube.dry_run(JOBS, into_workspace(GPU_JOB, name="warm"))
            except KubeError:
                return False
            return True
        wait_until("the webhook to admit on the resolved profile set", admitted, 120, processes=self.cp.processes)
        for i in range(10):
            self.kube.dry_run(JOBS, into_workspace(GPU_JOB, name=f"warm-{i}"))
        cpu0, (s0, c0) = self.api_cpu_seconds(), self.scrape()
        walls = []
        for i in range(n):
            t = time.perf_counter()
            self.kube.dry_run(JOBS, into_workspace(GPU_JOB, name=f"bench-{i}"))
            walls.append((time.perf_counter() - t) * 1000)
        cpu1, (s1, c1) = self.api_cpu_seconds(), self.scrape()
        return {"label": label, "creates": n, "wall_p50_ms": round(percentile(walls, 0.5) or 0, 2),
                "wall_p99_ms": round(percentile(walls, 0.99) or 0, 2),
                "api_server_cpu_ms_per_create": round((cpu1 - cpu0) / n * 1000, 2),
                "policy_plugin_creates": int(c1 - c0),
                "policy_plugin_mean_ms": round((s1 - s0) / (c1 - c0) * 1000, 3) if c1 > c0 else None}

    def without_policy(self) -> None:
        """Stop the operator (it would put the binding back) and delete the policy's binding."""
        assert self.plat.operator is not None
        self.plat.operator.stop()
        self.cp.kubectl("delete", "validatingadmissionpolicybinding", BINDING)

    def stop(self) -> None:
        self.kube.close()
        self.plat.stop()
        self.cp.stop()


def start(workdir: Path) -> Bench:
    cp = ControlPlane(build("etcd", "kubernetes"), workdir / "controlplane")
    try:
        cp.start()
        return Bench(cp, install(cp, workdir / "taugate"))
    except BaseException:
        cp.stop()
        raise


def run(b: Bench, profiles: list[int], n: int, workdir: Path) -> dict:
    rows = []
    for extra in profiles:
        size = b.profiles(extra, workdir)
        row = b.dry_runs(n, f"{len(b.base_profiles) + extra} profiles")
        row.update(profiles=len(b.base_profiles) + extra, taucluster_bytes=size, parameter_bytes=b.parameter_bytes())
        rows.append(row)
        print(json.dumps(row), flush=True)
    b.without_policy()
    row = b.dry_runs(n, "no policy binding")
    row.update(profiles=None, taucluster_bytes=None, parameter_bytes=None)
    rows.append(row)
    print(json.dumps(row), flush=True)
    return {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{_platform.machine()}, {os.cpu_count()} cores, Python {_platform.python_version()}",
            "rows": rows}


def markdown(result: dict) -> str:
    lines = [f"Measured {result['when']} on {result['machine']}; server-side dry runs one after the other.", "",
             "| TauCluster | bytes | parameter bytes | dry runs | wall p50 / p99 ms | API server CPU ms per create | "
             "policy plugin ms per create |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {r['taucluster_bytes'] or '-'} | {r.get('parameter_bytes') or '-'} | "
                     f"{r['creates']} | {r['wall_p50_ms']} / "
                     f"{r['wall_p99_ms']} | {r['api_server_cpu_ms_per_create']} | {r['policy_plugin_mean_ms']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="0,100,500", help="extra profiles per row, ascending")
    ap.add_argument("--n", type=int, default=200, help="dry runs per row")
    ap.add_argument("--out", default="api_policy")
    args = ap.parse_args(argv)
    profiles = [int(x) for x in args.profiles.split(",")]
    with tempfile.TemporaryDirectory(prefix="taugate-api-policy-") as tmp:
        try:
            b = start(Path(tmp))
        except ControlPlaneError as e:
            print(f"bench/api_policy.py: the control plane did not start: {e}", file=sys.stderr)
            return 2
        try:
            result = run(b, profiles, args.n, Path(tmp))
        finally:
            b.stop()
    md = markdown(result)
    write_results(args.out, result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
