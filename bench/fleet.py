"""A GPU fleet on the real API server: kwok GPU nodes, workspaces and queued workloads (issue 32,
item 4).

    python bench/fleet.py [--steps 1000,2500,5000] [--workspaces-per-node 0.1]
                          [--workloads-per-node 2] [--concurrency 16] [--backlog last|all|none]
                          [--out fleet]

On the control plane of ``tests/e2e`` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
Kueue and kwok, built from their pinned Go modules and cached by ``tests/e2e/build.sh``; versitygw
for the object store; kwok renews no node Lease and the node-lifecycle controller is off: on 2
shared cores kwok falls behind renewing thousands of Leases and the controller marks its Nodes
Unknown and back, ``Stack.start_kwok``) with taugate installed as the
chart installs it (``tests/e2e/platform.install``, the recorder on, evidence in files), the fleet
grows in steps. Each step brings the cluster to ``N`` GPU nodes, ``N * workspaces-per-node``
workspaces and ``N * workloads-per-node`` workloads, all created through the API server:

1. **Nodes.** GPU Nodes of five classes (``bench/scale.py``'s ``CLASSES``: H100 and H200 with 8
   GPUs, A100 and L40S with 4, A10 with 1), each labelled with its class and product, annotated
   for kwok (its heartbeat stage rewrites their conditions every 10 to 20 minutes), created with their
   status as a kubelet registers a Node. Then, with only kwok's heartbeats going on:
   ``taugate serve``'s resident memory and its CPU seconds per minute (``/proc``), and **the time
   from a node change to the webhook's decision**: a server-side dry run of a Job asking 16 GPUs
   per pod under the probe profile (class h100, 16 GPUs per worker) is denied by
   ``gpu-per-pod-fits-node`` while the largest h100 Node has 8; the bench sets one h100 Node's
   allocatable GPUs to 16 (``/status``, as a device plugin's kubelet reports it) and times until a
   dry run is allowed, then sets it back and times until one is denied again (dry runs back to
   back, each a full admission through the API server).
2. **Workspaces.** The operator is stopped as the kubelet stops a pod (SIGTERM, 30 s, SIGKILL;
   **the stop's seconds and exit code**: 0 when it stopped cleanly and released its Lease). With
   the operator stopped, the step's new TauWorkspaces, their ClusterQueues
   (one GPU flavor each, ``stopPolicy: Hold``: Kueue keeps every workload pending, so a workload
   stays queued) and one workload profile each (on the TauCluster) are created; then the operator
   starts and **the time until every TauWorkspace and the TauCluster are Ready** (the operator
   makes each workspace's namespace, LocalQueue, RBAC and ServiceAccount) is its cold start, and
   the time until the first new workspace was Ready (its condition's ``lastTransitionTime``) the
   part of it before the first workspace reconcile ended.
3. **Workloads.** The step's new workloads are created at ``--concurrency`` in flight, spread
   over every workspace: the Kueue sample Job (``03-agi-job.yaml``, 3 pods) asking its
   workspace's GPUs per pod, with the workspace's queue label. **Admission while all that runs**
   (kwok, Kueue making a Workload per Job, the operator and its recorder following every run):
   the client's create latency p50/p99 and creates/s, the API server's time in taugate's webhook
   and taugate's own time per review (both differenced from ``/metrics``). Then **the recorder's
   live rate**: runs (TauRuns whose evidence is recorded and whose phase is set) per second from
   the first create until every run is recorded, or ``--recorder-wait`` (120 s) after the last
   create (it records the rest meanwhile, while the next step runs).
4. **Recorder backlog** (``--backlog``: the last step by default): the operator restarted on an
   empty evidence root, once in files and once in the object store (versitygw, an Object Lock
   bucket, GOVERNANCE retention), records the cluster's runs again: runs/s and evidence events/s
   (the events of the chains, from the TauRuns' ``status.evidence.events``) from its start until
   ``--backlog-runs`` of them (2,000, or all when fewer) name the new root.

Writes ``bench/results/fleet.json`` and ``fleet.md`` (``--out`` changes the stem), prints the
table. Exit 0 when it ran, 2 when the stack could not start.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as _dt
import json
import os
import platform as _platform
import ssl
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# E402 below: these imports need the checkout on sys.path (the script runs as `python bench/fleet.py`).
from bench import admission_metrics as am  # noqa: E402
from bench.e2e import TAUGATE_WEBHOOKS, percentile, scrape_text, send_all, write_results  # noqa: E402
from bench.scale import CLASSES  # noqa: E402
from taugate import labels  # noqa: E402
from tests.e2e import platform as e2e_platform  # noqa: E402
from tests.e2e.controlplane import LOOPBACK, ControlPlane, ControlPlaneError, build, wait_until  # noqa: E402
from tests.e2e.objectstore import ObjectStore  # noqa: E402
from tests.e2e.stack import KWOK_NODE_ANNOTATION, Stack  # noqa: E402
from tests.paths import KUEUE_JOB  # noqa: E402

SYSTEM_NAMESPACE = e2e_platform.SYSTEM_NAMESPACE
LEASE = "taugate-operator"  # the chart's leader Lease, in the release namespace
TAU = "/apis/tau.azure.com/v1alpha1"
PROBE_PROFILE = "fleet-probe"
PROBE_GPUS = 16
PROBE_JOB = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "fleet-probe", "namespace": "vision",
                          "labels": {labels.WORKLOAD_PROFILE: PROBE_PROFILE}},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {
                     "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {labels.GPU_RESOURCE: str(PROBE_GPUS)}}}]}}}}
"""The node-change probe: 16 GPUs in one pod, under a profile of class h100 whose largest Node
has 8 until the bench gives one 16."""
GPUS = {cls: gpus for cls, _, gpus in CLASSES}
PRODUCTS = {cls: product for cls, product, _ in CLASSES}


# ---- what the fleet is made of (pure) -----------------------------------------------------------
def node(i: int, kwok_port: int) -> dict:
    """The ``i``-th GPU Node, as a kubelet registers it (status included), managed by kwok."""
    cls, product, gpus = CLASSES[i % len(CLASSES)]
    name = f"fleet-{cls}-{i:05d}"
    capacity = {"cpu": "96", "memory": "1800Gi", "pods": "110", "ephemeral-storage": "2Ti",
                labels.GPU_RESOURCE: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(KWOK_NODE_ANNOTATION),
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "type": "kwok", labels.GPU_CLASS: cls, "nvidia.com/gpu.product": product,
                                    "nvidia.com/gpu.count": str(gpus)}},
            "spec": {"taints": [{"key": labels.GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kwok"}],
                       "addresses": [{"type": "InternalIP", "address": LOOPBACK}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": kwok_port}}}}


def workspace_name(i: int) -> str:
    return f"fleet-{i:04d}"


def workspace_class(i: int) -> str:
    return CLASSES[i % len(CLASSES)][0]


def workspace_objects(i: int) -> tuple[dict, dict, dict]:
    """The ``i``-th workspace: its TauWorkspace, ClusterQueue (held: workloads stay queued) and
    workload profile (its class, 3 workers of the class's GPUs per node)."""
    ws, cls = workspace_name(i), workspace_class(i)
    gpus = GPUS[cls]
    tw = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace",
          "metadata": {"name": ws, "namespace": SYSTEM_NAMESPACE},
          "spec": {"target": {"namespace": ws, "createNamespace": True}, "queue": f"{ws}-queue",
                   "clusterQueue": f"{ws}-cq", "teamRef": {"name": f"{ws}-team"},
                   "kubernetesSubject": {"kind": "Group", "name": f"{ws}-researchers"},
                   "principalRef": {"provider": "entra", "name": f"{ws}-researchers"},
                   "role": "tau-researcher-v1"}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"{ws}-cq"},
          "spec": {"namespaceSelector": {}, "stopPolicy": "Hold", "resourceGroups": [{
              "coveredResources": ["cpu", "memory", labels.GPU_RESOURCE],
              "flavors": [{"name": cls, "resources": [
                  {"name": "cpu", "nominalQuota": "1000"}, {"name": "memory", "nominalQuota": "8000Gi"},
                  {"name": labels.GPU_RESOURCE, "nominalQuota": 8 * gpus}]}]}]}}
    profile = {"name": f"{ws}-{cls}", "description": f"fleet workspace {ws}", "applicability": {"namespaces": [ws]},
               "gpuClass": cls, "gpusPerWorker": gpus, "workerCount": 3, "mode": "elastic",
               "placement": "unconstrained", "defaultLocalQueue": f"{ws}-queue",
               "priorities": {"disableDefaultPriorities": True},
               "tolerations": [{"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]}
    return tw, cq, profile


def flavors() -> list[dict]:
    """A ResourceFlavor per GPU class (the example has h100 and a100; kept as they are)."""
    return [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": cls},
             "spec": {"nodeLabels": {labels.GPU_CLASS: cls},
                      "tolerations": [{"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]}}
            for cls, _, _ in CLASSES if cls not in ("h100", "a100")]


def probe_profile() -> dict:
    return {"name": PROBE_PROFILE, "description": "bench/fleet.py's node-change probe",
            "applicability": {"namespaces": ["vision"]}, "gpuClass": "h100", "gpusPerWorker": PROBE_GPUS,
            "workerCount": 1, "mode": "elastic", "placement": "unconstrained", "defaultLocalQueue": "vision-queue",
            "priorities": {"disableDefaultPriorities": True},
            "tolerations": [{"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]}


def workload(i: int, workspaces: int) -> tuple[str, bytes]:
    """The ``i``-th workload (the Kueue sample Job, its workspace's GPUs per pod) and where to POST it."""
    w = i % workspaces
    ws, gpus = workspace_name(w), GPUS[workspace_class(w)]
    job = next(d for d in yaml.safe_load_all(KUEUE_JOB.read_text()) if isinstance(d, dict) and d.get("kind") == "Job")
    job = copy.deepcopy(job)
    meta = job["metadata"]
    meta.pop("generateName", None)
    meta.update(name=f"train-{i:06d}", namespace=ws)
    meta["labels"] = {labels.KUEUE_QUEUE_NAME: f"{ws}-queue", "taugate-bench": "fleet"}
    for c in job["spec"]["template"]["spec"]["containers"]:
        c["resources"].setdefault("limits", {})[labels.GPU_RESOURCE] = str(gpus)
    return f"/apis/batch/v1/namespaces/{ws}/jobs", json.dumps(job).encode()


# ---- measuring processes ------------------------------------------------------------------------
def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise ControlPlaneError(f"no VmRSS for pid {pid}")


def tree_rss_mib(pid: int) -> float:
    """The RSS of ``pid`` and its descendants (the operator and its recorder's process), summed."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            total += rss_mib(p)
        except (OSError, ControlPlaneError):
            continue  # gone meanwhile, or a zombie
    return round(total, 1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# ---- the run ------------------------------------------------------------------------------------
@dataclass
class Fleet:
    cp: ControlPlane
    workdir: Path
    stack: Stack
    plat: e2e_platform.Platform
    store: ObjectStore
    nodes: int = 0
    workspaces: int = 0
    workloads: int = 0
    profiles: list[dict] = field(default_factory=list)
    backlogs: int = 0
    recorder_wait: float = 120.0
    recorded_before: int = 0

    def stop(self) -> None:
        self.stack.stop()
        self.cp.stop()

    def lease_holder(self) -> str:
        lease = self.get(f"/apis/coordination.k8s.io/v1/namespaces/{e2e_platform.NAMESPACE}/leases/{LEASE}")
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def start_live_operator(self) -> None:
        """The operator on the live evidence root, once it holds the Lease: the next stop then
        times a running operator, not a process still importing (which SIGTERM ends by default)."""
        before = self.lease_holder()
        self.plat.start_operator(record=True, env={"TAUGATE_RECORDER_EVIDENCE_ROOT": self.evidence_dir("live")})
        assert self.plat.operator is not None
        wait_until("the operator to hold the Lease", lambda: self.lease_holder() not in ("", before), 120,
                   processes=[*self.cp.processes, self.plat.operator], interval=0.5)

    def stop_operator(self) -> dict:
        """SIGTERM, then the kubelet's default grace period (30 s; the chart sets none for the
        operator), then SIGKILL: the seconds until it exited and its exit code (0: it stopped
        cleanly and released its Lease, so the next start does not wait for it to expire; -9:
        killed)."""
        op = self.plat.operator
        assert op is not None
        t0 = time.monotonic()
        op.stop(timeout=30.0)
        self.plat.operator = None
        return {"operator_stop_s": round(time.monotonic() - t0, 1), "operator_stop_exit": op.popen.returncode}

    # -- API helpers --
    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.cp.server}{path}", context=self.cp.ssl_context(), timeout=120) as r:
            return json.loads(r.read())

    def list_all(self, path: str) -> list[dict]:
        items: list[dict] = []
        token = ""
        while True:
            q = {"limit": "2000", **({"continue": token} if token else {})}
            page = self.get(f"{path}?{urllib.parse.urlencode(q)}")
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def send(self, what: str, requests: list[tuple[str, str, bytes]], concurrency: int,
             content_type: str = "application/json") -> dict:
        got = send_all(self.cp, requests, concurrency, content_type)
        if got["errors"]:
            raise ControlPlaneError(f"{what}: {got['errors']} of {len(requests)} failed, first: {got['first_error']}")
        return got

    def dry_run_allowed(self) -> bool:
        got = send_all(self.cp, [("POST", "/apis/batch/v1/namespaces/vision/jobs?dryRun=All",
                                  json.dumps(PROBE_JOB).encode())], 1)
        if got["errors"] and "gpu-per-pod-fits-node" not in (got["first_error"] or ""):
            raise ControlPlaneError(f"the probe's dry run failed otherwise: {got['first_error']}")
        return not got["errors"]

    # -- steps --
    def add_nodes(self, total: int, concurrency: int) -> dict:
        t0 = time.monotonic()
        self.send("creating Nodes", [("POST", "/api/v1/nodes", json.dumps(node(i, self.stack.kwok_port)).encode())
                                     for i in range(self.nodes, total)], concurrency)
        self.nodes = total
        return {"nodes_create_s": round(time.monotonic() - t0, 1)}

    def webhook_at_rest(self, seconds: float) -> dict:
        """The webhook's memory and CPU over ``seconds`` of kwok's heartbeats only."""
        assert self.plat.webhook is not None
        pid = self.plat.webhook.popen.pid
        c0, t0 = cpu_seconds(pid), time.monotonic()
        deadline = t0 + seconds
        while time.monotonic() < deadline:  # measuring a rate over a window, not waiting for an event
            self.cp.check_alive()
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        cpu = cpu_seconds(pid) - c0
        return {"webhook_rss_mib": rss_mib(pid), "webhook_cpu_s_per_min": round(cpu * 60 / (time.monotonic() - t0), 2)}

    def node_change(self, samples: int) -> dict:
        """Seconds from a Node's allocatable change to the first admission that decides by it."""
        name = f"fleet-h100-{0:05d}"

        def set_gpus(n: int) -> float:
            patch = json.dumps({"status": {"allocatable": {labels.GPU_RESOURCE: str(n)},
                                           "capacity": {labels.GPU_RESOURCE: str(n)}}}).encode()
            t = time.monotonic()
            self.send("patching a Node's GPUs", [("PATCH", f"/api/v1/nodes/{name}/status", patch)], 1,
                      "application/merge-patch+json")
            return t

        if self.dry_run_allowed():
            raise ControlPlaneError("the probe is allowed before any h100 Node has 16 GPUs")
        up, down = [], []
        for _ in range(samples):
            t = set_gpus(PROBE_GPUS)
            wait_until("a dry run allowed after a Node reports 16 GPUs", self.dry_run_allowed, 120,
                       processes=self.cp.processes, interval=0)
            up.append(time.monotonic() - t)
            t = set_gpus(GPUS["h100"])
            wait_until("a dry run denied after the Node reports 8 GPUs again", lambda: not self.dry_run_allowed(), 120,
                       processes=self.cp.processes, interval=0)
            down.append(time.monotonic() - t)
        both = up + down
        return {"node_change_samples": len(both), "node_change_p50_s": round(percentile(both, 0.5) or 0, 3),
                "node_change_max_s": round(max(both), 3)}

    def add_workspaces(self, total: int, concurrency: int) -> dict:
        """The cold start: the operator stopped, the new workspaces created, the operator started."""
        stopped = self.stop_operator()
        new = [workspace_objects(i) for i in range(self.workspaces, total)]
        self.send("creating ClusterQueues", [("POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
                                              json.dumps(cq).encode()) for _, cq, _ in new], concurrency)
        self.profiles += [p for _, _, p in new]
        self.patch_profiles()
        self.send("creating TauWorkspaces", [("POST", f"{TAU}/namespaces/{SYSTEM_NAMESPACE}/workspaces",
                                              json.dumps(tw).encode()) for tw, _, _ in new], concurrency)
        self.workspaces = total
        t0, wall = time.monotonic(), time.time()
        self.plat.start_operator(record=True, env={"TAUGATE_RECORDER_EVIDENCE_ROOT": self.evidence_dir("live")})
        assert self.plat.operator is not None
        wait_until(f"the operator to make {total} workspaces and the TauCluster Ready", self.all_ready, 3600,
                   processes=[*self.cp.processes, self.plat.operator], interval=1)
        op = self.plat.operator
        assert op is not None
        became = sorted(t - wall for t in self.ready_since() if t >= wall - 1)
        return {**stopped, "operator_cold_start_s": round(time.monotonic() - t0, 1),
                "operator_first_ready_s": round(became[0], 1) if became else None,
                "operator_rss_mib": tree_rss_mib(op.popen.pid)}

    def patch_profiles(self) -> None:
        cluster = self.get(f"{TAU}/clusters/cluster")
        example = [p for p in cluster["spec"]["workloadProfiles"]
                   if p["name"] != PROBE_PROFILE and not p["name"].startswith("fleet-")]
        body = json.dumps({"spec": {"workloadProfiles": example + [probe_profile()] + self.profiles}}).encode()
        self.send("adding the profiles", [("PATCH", f"{TAU}/clusters/cluster", body)], 1,
                  "application/merge-patch+json")

    def all_ready(self) -> bool:
        cluster = self.get(f"{TAU}/clusters/cluster")
        status = cluster.get("status") or {}
        resolved = {p.get("name"): p for p in (status.get("workloadProfiles") or {}).get("profiles") or []}
        if status.get("phase") != "Ready" or any(
                not any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (resolved.get(p["name"]) or {}).get("conditions") or [])
                for p in [probe_profile(), *self.profiles]):
            return False
        ws = self.list_all(f"{TAU}/namespaces/{SYSTEM_NAMESPACE}/workspaces")
        return len(ws) >= self.workspaces and all((w.get("status") or {}).get("phase") == "Ready" for w in ws)

    def ready_since(self) -> list[float]:
        """When each TauWorkspace became Ready (its Ready condition's ``lastTransitionTime``, whole
        seconds): the new workspaces of a cold start from the first reconciled on."""
        out = []
        for w in self.list_all(f"{TAU}/namespaces/{SYSTEM_NAMESPACE}/workspaces"):
            for c in (w.get("status") or {}).get("conditions") or []:
                if c.get("type") == "Ready" and c.get("status") == "True" and c.get("lastTransitionTime"):
                    out.append(_dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp())
        return out

    def add_workloads(self, total: int, concurrency: int) -> dict:
        reqs = [("POST", *workload(i, self.workspaces)) for i in range(self.workloads, total)]
        before_api, before_own = scrape_text(self.cp), self.webhook_metrics()
        t0 = time.monotonic()
        got = send_all(self.cp, reqs, concurrency)
        api = am.difference(am.parse(scrape_text(self.cp)), am.parse(before_api))
        own = am.difference(am.parse(self.webhook_metrics(), "taugate_admission_duration_seconds", ("webhook",)),
                            am.parse(before_own, "taugate_admission_duration_seconds", ("webhook",)))
        self.workloads = total
        lat = got["latencies_ms"]
        taugate_api = [w for w in am.summarize(api) if w["webhook"] in TAUGATE_WEBHOOKS]
        out = {"creates": len(reqs), "errors": got["errors"], "first_error": got["first_error"],
               "create_p50_ms": _r(percentile(lat, 0.5)), "create_p99_ms": _r(percentile(lat, 0.99)),
               "creates_per_s": _r(len(lat) / got["seconds"]) if got["seconds"] else None,
               "taugate_api_server": taugate_api, "taugate_own": am.handler_summary(own).get("/mutate")}
        # The recorder's pace while it keeps up with the creates: the runs recorded from the first
        # create until every run is, or ``recorder_wait`` after the last create (it goes on
        # recording in the background, as it would, while the next step runs).
        live = self.evidence_dir("live")
        before = self.recorded_before
        try:
            got = self.wait_recorded(f"the recorder to record {total} runs", live, total, self.recorder_wait)
        except ControlPlaneError as e:  # not all in the time given: what it did record counts
            if "timed out" not in str(e):
                raise  # a process ended
            got = self.recorded(live)
        recorded = got["runs"] - before
        out.update(recorder_live_runs=recorded, recorder_live_runs_per_s=_r(recorded / (time.monotonic() - t0)))
        self.recorded_before = got["runs"]
        return out

    def webhook_metrics(self) -> str:
        ctx = ssl.create_default_context(cafile=str(self.plat.cert_dir / "ca.crt"))
        with urllib.request.urlopen(f"https://{LOOPBACK}:{self.plat.webhook_port}/metrics", context=ctx,
                                    timeout=30) as r:
            return r.read().decode()

    def recorded(self, root: str) -> dict:
        """The fleet workloads' runs whose TauRun is recorded under ``root`` (phase set, evidence
        there) and their evidence events."""
        done = [r for r in self.list_all(f"{TAU}/tauruns") if r["metadata"]["namespace"].startswith("fleet-")
                and (r.get("status") or {}).get("phase")
                and str(((r.get("status") or {}).get("evidence") or {}).get("path") or "").startswith(root)]
        return {"runs": len(done), "events": sum(int(r["status"]["evidence"].get("events") or 0) for r in done)}

    def wait_recorded(self, what: str, root: str, runs: int, timeout: float) -> dict:
        """Until ``runs`` runs are recorded under ``root`` (a list of every TauRun each few seconds:
        at 10,000 runs a list is megabytes, not something to ask for four times a second)."""
        got = wait_until(what, lambda: (r := self.recorded(root))["runs"] >= runs and r, timeout,
                         processes=[*self.cp.processes, *([self.plat.operator] if self.plat.operator else [])],
                         interval=3)
        assert isinstance(got, dict)
        return got

    def evidence_dir(self, name: str) -> str:
        return str(self.workdir / "evidence" / name)

    def backlog(self, backend: str, runs: int) -> dict:
        """The operator restarted on an empty evidence root records the runs again: the time until
        ``runs`` of them (all, or the first ones of a large fleet) are recorded."""
        stopped = self.stop_operator()
        self.backlogs += 1
        if backend == "files":
            root = self.evidence_dir(f"backlog-{self.backlogs}")
            env = {"TAUGATE_RECORDER_EVIDENCE_ROOT": root}
        else:
            root = self.store.create_bucket(f"fleet-evidence-{self.backlogs}") + "/runs"
            env = {**self.store.env(), "TAUGATE_RECORDER_EVIDENCE_ROOT": root,
                   "TAUGATE_RECORDER_EVIDENCE_RETENTION_MODE": "GOVERNANCE",
                   "TAUGATE_RECORDER_EVIDENCE_RETENTION_DAYS": "1"}
        t0 = time.monotonic()
        self.plat.start_operator(record=True, env=env)
        runs = min(runs, self.workloads)
        got = self.wait_recorded(f"the recorder to record {runs} runs again in {backend}", root, runs, 7200)
        seconds = time.monotonic() - t0
        # back to the live root for the next step
        self.stop_operator()
        self.start_live_operator()
        return {**stopped, "backend": backend, "of": self.workloads, "runs": got["runs"], "events": got["events"],
                "seconds": round(seconds, 1),
                "runs_per_s": _r(got["runs"] / seconds), "events_per_s": _r(got["events"] / seconds)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def start(workdir: Path) -> Fleet:
    cp = ControlPlane(build("etcd", "kubernetes", "kueue", "kwok", "versitygw"), workdir / "controlplane")
    cp.start()  # no node-lifecycle controller: kwok renews no Lease here (Stack.start_kwok)
    stack = Stack(cp, workdir / "stack")
    stack.workdir.mkdir(parents=True, exist_ok=True)
    try:
        stack.start_kueue()
        stack.start_kwok(node_leases=False)
        store = ObjectStore(Path(cp.binary("versitygw")), workdir / "object-store").start()
        assert store.process is not None
        stack.processes.append(store.process)
        plat = stack.platform = e2e_platform.install(cp, workdir / "taugate", record=True,
                                                     node_annotations=KWOK_NODE_ANNOTATION)
        stack.advertise_kwok_kubelet()
        cp.apply_objects(flavors(), "--server-side", "--field-manager=platform-team")
        f = Fleet(cp, workdir, stack, plat, store)
        f.patch_profiles()
        f.plat.wait_for("the TauCluster Ready with the probe profile", f.all_ready, 120)
        # the live recorder writes under the bench's evidence root from the start
        assert plat.operator is not None
        plat.operator.stop()
        f.start_live_operator()
        return f
    except BaseException:
        stack.stop()
        cp.stop()
        raise


def run(f: Fleet, steps: list[int], workspaces_per_node: float, workloads_per_node: float, concurrency: int,
        backlog: str, rest_seconds: float = 60, samples: int = 5, backlog_runs: int = 2000) -> dict:
    rows = []
    for k, n in enumerate(steps):
        row: dict = {"nodes": n, "workspaces": max(1, round(n * workspaces_per_node)),
                     "workloads": max(1, round(n * workloads_per_node))}
        row.update(f.add_nodes(n, concurrency))
        row.update(f.add_workspaces(row["workspaces"], concurrency))
        row.update(f.node_change(samples))
        row.update(f.webhook_at_rest(rest_seconds))
        row.update(f.add_workloads(row["workloads"], concurrency))
        if backlog == "all" or (backlog == "last" and k == len(steps) - 1):
            row["backlog"] = [f.backlog("files", backlog_runs), f.backlog("s3", backlog_runs)]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"when": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": _machine(),
            "concurrency": concurrency, "rows": rows}


def _machine() -> str:
    return f"{_platform.machine()}, {os.cpu_count()} cores, Python {_platform.python_version()}"


def markdown(result: dict) -> str:
    lines = [f"Measured {result['when']} on {result['machine']}; creates at {result['concurrency']} in flight.", "",
             "| GPU nodes | workspaces | workloads | webhook RSS MiB | webhook CPU s/min at rest | node change → "
             "decision p50 / max s | operator stop s (exit code) | operator cold start s (first workspace Ready) | "
             "operator RSS MiB (with its recorder) | creates/s | "
             "create p50 / p99 ms | "
             "taugate on the API server's clock p50 / p99 ms | taugate's own p50 / p99 ms | recorder live runs/s "
             "(runs recorded in the step) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        api: dict = next((w for w in r["taugate_api_server"] if w["type"] == "admit"), {})
        own = r.get("taugate_own") or {}
        lines.append(f"| {r['nodes']} | {r['workspaces']} | {r['workloads']} | {r['webhook_rss_mib']} | "
                     f"{r['webhook_cpu_s_per_min']} | {r['node_change_p50_s']} / {r['node_change_max_s']} | "
                     f"{r['operator_stop_s']} ({r['operator_stop_exit']}) | "
                     f"{r['operator_cold_start_s']} ({r['operator_first_ready_s']}) | {r['operator_rss_mib']} | "
                     f"{r['creates_per_s']} | "
                     f"{r['create_p50_ms']} / {r['create_p99_ms']} | {api.get('p50_ms')} / {api.get('p99_ms')} | "
                     f"{own.get('p50_ms')} / {own.get('p99_ms')} | {r['recorder_live_runs_per_s']} "
                     f"({r['recorder_live_runs']}) |")
    backlogs = [(r, b) for r in result["rows"] for b in r.get("backlog") or []]
    if backlogs:
        lines += ["", "The recorder from a cold start on an empty evidence root (every run recorded again):", "",
                  "| GPU nodes | backend | runs timed (of the fleet's) | evidence events | seconds | runs/s | "
                  "events/s | operator stop before it s (exit code) |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r, b in backlogs:
            lines.append(f"| {r['nodes']} | {b['backend']} | {b['runs']} ({b['of']}) | {b['events']} | "
                         f"{b['seconds']} | {b['runs_per_s']} | {b['events_per_s']} | "
                         f"{b['operator_stop_s']} ({b['operator_stop_exit']}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="1000,2500,5000", help="GPU node counts, ascending (default: %(default)s)")
    p.add_argument("--workspaces-per-node", type=float, default=0.1)
    p.add_argument("--workloads-per-node", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--backlog", choices=("last", "all", "none"), default="last")
    p.add_argument("--backlog-runs", type=int, default=2000,
                   help="runs the cold-start recorder is timed over (default: %(default)s, or all when fewer)")
    p.add_argument("--rest-seconds", type=float, default=60)
    p.add_argument("--recorder-wait", type=float, default=120,
                   help="seconds after a step's last create the live recorder is given to catch up")
    p.add_argument("--out", default="fleet")
    p.add_argument("--workdir", type=Path, help="keep every process's log here (default: a temporary directory)")
    a = p.parse_args(argv)
    steps = [int(s) for s in a.steps.split(",")]
    with contextlib.ExitStack() as stack:
        workdir = a.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="taugate-fleet-")))
        try:
            f = start(workdir)
        except ControlPlaneError as e:
            print(f"bench/fleet.py: the stack did not start: {e}", file=sys.stderr)
            return 2
        f.recorder_wait = a.recorder_wait
        try:
            result = run(f, steps, a.workspaces_per_node, a.workloads_per_node, a.concurrency, a.backlog,
                         a.rest_seconds, backlog_runs=a.backlog_runs)
        finally:
            f.stop()
    md = markdown(result)
    write_results(a.out, result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
