"""End-to-end admission benchmark: what each create costs through the real API server.

    python bench/e2e.py [--n 100] [--concurrency 16] [--rounds 3]
                        [--configs none,taugate,taugate-opa,gatekeeper,kyverno] [--out e2e]

On the control plane of ``tests/e2e`` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
built from their pinned Go modules by ``tests/e2e/build.sh``, cached in ``~/.cache/taugate-e2e``)
with Kueue and its webhooks (``tests/e2e/stack.py``, ``Stack.start_kueue``: present in every
configuration, reported on their own rows) and taugate installed as the chart installs it
(``tests/e2e/platform.install``), it creates ``--n`` objects of each workload at ``--concurrency``
requests in flight, as the admin (client certificate, persistent HTTPS connections, one per
thread), in the example's ``vision`` workspace:

- the GPU RayJob (KubeRay's ``pytorch-image-classifier`` sample) and
- a Kueue sample Job (``cmd/kueueviz/examples/03-agi-job.yaml``),

both with the workspace's queue label (``vision-queue``), so Kueue suspends them in every
configuration and no pod is made. Configurations:

- ``none``: no taugate, Gatekeeper or Kyverno webhook (Kueue's only);
- ``taugate``: the chart's Mutating/ValidatingWebhookConfigurations, ``taugate serve`` with the
  policy library in process (regorus);
- ``taugate-opa``: the same configurations pointed at a second ``taugate serve`` rendered with
  ``webhook.opa.enabled`` (``--policy-backend opa``), beside an OPA server built from
  ``tests/e2e/gomod/opa``;
- ``gatekeeper``: Gatekeeper's manager built from ``tests/e2e/gomod/gatekeeper`` (validation
  webhook only, audit off, our certificate, its rotation off) with its ValidatingWebhookConfiguration
  from the module's ``deploy/gatekeeper.yaml`` and the policy library translated to
  ConstraintTemplates (``bench/gatekeeper``);
- ``kyverno``: Kyverno's admission controller built from ``tests/e2e/gomod/kyverno``
  (``cmd/kyverno``; its background, reports and cleanup controllers not run) with the release
  manifest's arguments and ConfigMaps (``config/install-latest-testing.yaml``) but our certificate
  (``--disableCertManagerController``, the CA and serving pair in the Secrets it reads) and
  ``--admissionReports=false`` (admission reports are the reports controller's input; on, each
  admitted create would also write an EphemeralReport before Kyverno answers), its CRDs from
  ``config/crds``, and the same policies translated to CEL ValidatingPolicies (``bench/kyverno``).
  Its webhook configurations are the ones Kyverno registers itself: a first run, leader of its
  namespace's ``kyverno`` Lease, registers them for the policies (one validating webhook,
  ``/vpol/<every policy>``); the bench keeps them, stops that run and starts the one it measures
  as a replica that is not the leader (the Lease held by the bench), which serves admission and
  leaves the configurations to the bench's switching, as Kyverno's non-leader replicas do.

Each round runs every configuration once, in turn, each round starting one configuration later
than the last (one warm-up round first, not counted); each
configuration switch waits until the API server calls the configuration's webhooks (server-side
dry runs). Per configuration: the client's create latency p50/p99 (ms) and creates/s, the ratio
of both to ``none`` and, from the API server's
``apiserver_admission_webhook_admission_duration_seconds`` scraped before and after each round's
creates (``bench/admission_metrics.py``), per webhook: calls, mean and p50/p99; and the webhook
server's own time per review, differenced the same way (taugate's
``taugate_admission_duration_seconds`` per route, Gatekeeper's
``gatekeeper_validation_request_duration_seconds``, Kyverno's
``kyverno_admission_review_duration_seconds``). The webhook calls per create (the network calls the
API server makes for a create) are the CREATE calls of that histogram over the creates tried:
every webhook's (Kueue's included) and the configuration's own; CREATEs others make meanwhile
count too (Kueue's Workloads, which Gatekeeper's match-everything webhook also judges).

Writes ``bench/results/e2e.json`` and ``bench/results/e2e.md`` (``--out`` changes the stem: a name
under ``bench/results``, or an absolute path), and
the API server's last ``/metrics`` scrapes per configuration (``e2e-metrics-<configuration>-
{before,after}.txt``, not kept in git), prints the tables. Exit 0 when it
ran, 2 when the stack could not start.
"""

from __future__ import annotations

import argparse
import base64
import copy
import dataclasses
import datetime as _dt
import http.client
import json
import os
import platform as _platform
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# E402 below: these imports need the checkout on sys.path (the script runs as `python bench/e2e.py`).
from bench import admission_metrics as am  # noqa: E402
from bench import gatekeeper, kyverno  # noqa: E402
from taugate import admission_policy  # noqa: E402
from tests.e2e import platform as e2e_platform  # noqa: E402
from tests.e2e.controlplane import (  # noqa: E402
    LOOPBACK,
    ControlPlane,
    Process,
    build,
    free_port,
    start_process,
    wait_until,
)
from tests.e2e.stack import Stack  # noqa: E402
from tests.opa_server import OpaServer, opa_binary  # noqa: E402
from tests.paths import IMAGE_CLASSIFIER, KUEUE_JOB  # noqa: E402

RESULTS = REPO / "bench" / "results"
CONFIGS = ("none", "taugate", "taugate-opa", "gatekeeper", "kyverno")
NAMESPACE = "vision"
QUEUE = "vision-queue"
BENCH_LABEL = {"taugate-bench": "e2e"}
TAUGATE_WEBHOOKS = ("mutate.workloads.tau.azure.com", "validate.workloads.tau.azure.com",
                    "validate.resources.tau.azure.com")
GATEKEEPER_WEBHOOK = "validation.gatekeeper.sh"
KYVERNO_POLICY_PATH = "/vpol/"
"""The path of the webhook Kyverno registers for (cluster-wide) ValidatingPolicies."""
# A GPU Job taugate did not admit: refused by taugate's admission policy while its binding is in force.
GPU_PROBE = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "bench-gpu-probe", "namespace": NAMESPACE,
                          "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
# A Job whose container requests no cpu or memory: requests-required denies it (taugate's policy and
# its Gatekeeper and Kyverno translations), so a dry run of it shows which webhook is in force.
DENY_PROBE = {"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": "bench-probe", "namespace": NAMESPACE,
                           "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
              "spec": {"template": {"spec": {"restartPolicy": "Never",
                                             "containers": [{"name": "c", "image": "busybox"}]}}}}


def _first(path: Path, kind: str) -> dict:
    return next(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == kind)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark row: the object a user creates and the collection URL it is POSTed to."""

    name: str
    collection: str
    obj: dict

    def body(self, object_name: str) -> bytes:
        o = copy.deepcopy(self.obj)
        o["metadata"]["name"] = object_name
        return json.dumps(o).encode()


def workloads() -> list[Workload]:
    """The GPU RayJob and the Kueue sample Job as a researcher would create them in ``vision``:
    the sample, in the namespace, with the workspace's queue label and ``BENCH_LABEL``
    (``generateName`` replaced by a name per create; the Job's ``kueue.x-k8s.io/priority-class``
    dropped: the example platform has no such WorkloadPriorityClass)."""
    rayjob = _first(IMAGE_CLASSIFIER, "RayJob")
    job = _first(KUEUE_JOB, "Job")
    out = []
    for name, obj, coll in (("GPU RayJob (KubeRay sample)", rayjob, f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"),
                            ("Job (Kueue sample)", job, f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")):
        meta = obj["metadata"]
        meta.pop("generateName", None)
        meta["namespace"] = NAMESPACE
        labels = meta.setdefault("labels", {})
        labels.pop("kueue.x-k8s.io/priority-class", None)
        labels.update({"kueue.x-k8s.io/queue-name": QUEUE, **BENCH_LABEL})
        out.append(Workload(name, coll, obj))
    return out


# ---- the client -------------------------------------------------------------------------------
def create_many(cp: ControlPlane, w: Workload, prefix: str, n: int, concurrency: int) -> dict:
    """POST ``n`` copies of ``w`` (names ``prefix-0``...) with ``concurrency`` threads (``send_all``)."""
    return send_all(cp, [("POST", w.collection, w.body(f"{prefix}-{i}")) for i in range(n)], concurrency)


def send_all(cp: ControlPlane, requests: list[tuple[str, str, bytes]], concurrency: int,
             content_type: str = "application/json") -> dict:
    """Send every ``(method, path, body)`` with ``concurrency`` threads, each on its own
    keep-alive HTTPS connection as the admin. Returns ``latencies_ms`` (requests answered 200 or
    201), ``seconds`` (wall time), ``errors`` (count) and ``first_error``."""
    ctx = cp.ssl_context()
    n = len(requests)
    lock = threading.Lock()
    next_i = [0]
    lat: list[float] = []
    errors: list[str] = []

    def worker() -> None:
        conn = http.client.HTTPSConnection(LOOPBACK, cp.port, context=ctx, timeout=30)
        try:
            while True:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= n:
                    return
                method, path, body = requests[i]
                t0 = time.perf_counter()
                try:
                    conn.request(method, path, body=body, headers={"Content-Type": content_type})
                    r = conn.getresponse()
                    data = r.read()
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    conn = http.client.HTTPSConnection(LOOPBACK, cp.port, context=ctx, timeout=30)
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")
                    continue
                dt = (time.perf_counter() - t0) * 1000
                with lock:
                    if r.status in (200, 201):
                        lat.append(dt)
                    else:
                        errors.append(f"HTTP {r.status}: {data[:400].decode(errors='replace')}")
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"latencies_ms": lat, "seconds": time.perf_counter() - t0, "errors": len(errors),
            "first_error": errors[0] if errors else None}


def write_results(out: str, result: dict, md: str) -> None:
    """``result`` as ``<out>.json`` and ``md`` as ``<out>.md``: under ``bench/results``, or at
    ``out`` when it is an absolute path."""
    path = Path(out) if Path(out).is_absolute() else RESULTS / out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(md)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def delete_bench_objects(cp: ControlPlane) -> None:
    """Delete every object the benchmark made and wait until they are gone (Kueue's Workloads go
    with them, by owner reference), so a round starts from the same cluster."""
    sel = ",".join(f"{k}={v}" for k, v in BENCH_LABEL.items())
    cp.kubectl("delete", "rayjobs.ray.io,jobs.batch", "-n", NAMESPACE, "-l", sel, "--wait=true", "--timeout=300s",
               "--cascade=background", timeout=330)


def scrape_text(cp: ControlPlane) -> str:
    """The API server's ``/metrics`` now (as the admin)."""
    with urllib.request.urlopen(f"{cp.server}/metrics", context=cp.ssl_context(), timeout=30) as r:
        return r.read().decode()


# ---- the configurations -----------------------------------------------------------------------
@dataclasses.dataclass
class Bench:
    """Everything running: the control plane, Kueue, taugate (embedded and OPA backends), OPA,
    Gatekeeper and Kyverno; ``configurations`` holds each configuration's webhook configuration
    objects."""

    cp: ControlPlane
    workdir: Path
    stack: Stack | None = None
    taugate: e2e_platform.Platform | None = None
    taugate_opa: e2e_platform.Platform | None = None
    opa: OpaServer | None = None
    gatekeeper: Process | None = None
    gatekeeper_metrics_port: int = 0
    kyverno: Process | None = None
    kyverno_metrics_port: int = 0
    kyverno_webhook: str = ""
    configurations: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    started_s: dict[str, float] = dataclasses.field(default_factory=dict)
    last_scrapes: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)

    def stop(self) -> None:
        for p in (self.taugate_opa, self.taugate):
            if p:
                p.stop()
        if self.opa:
            self.opa.stop()
        if self.gatekeeper:
            self.gatekeeper.stop()
        if self.kyverno:
            self.kyverno.stop()
        if self.stack:
            self.stack.stop()

    # -- switching -------------------------------------------------------------------------------
    def switch(self, config: str, timeout: float = 90) -> None:
        """Make ``config``'s webhook configurations the ones in force (Kueue's stay) and return
        once the API server calls them (``_in_force``)."""
        wanted = {(o["kind"], o["metadata"]["name"]) for o in self.configurations[config]}
        every = {(o["kind"], o["metadata"]["name"]) for objs in self.configurations.values() for o in objs}
        for other in every - wanted:
            self.cp.kubectl("delete", other[0], other[1], "--ignore-not-found")
        if self.configurations[config]:
            self.cp.apply_objects(self.configurations[config], "--server-side", "--force-conflicts",
                                  "--field-manager=bench")
        deadline = time.monotonic() + timeout
        while not self._in_force(config):
            if time.monotonic() > deadline:
                raise RuntimeError(f"configuration {config} did not take effect within {timeout:g} s")
            time.sleep(0.5)

    def _in_force(self, config: str) -> bool:
        """A dry run of ``DENY_PROBE`` is denied by the configuration's webhook (taugate's one workload
        call, Gatekeeper's validating webhook, Kyverno's ValidatingPolicies webhook; allowed with
        none), and, for the two taugate configurations, reached the right ``taugate serve``."""
        servers = (("taugate", self.taugate), ("taugate-opa", self.taugate_opa))
        before = {k: _taugate_reviews(p) for k, p in servers if p}
        r = self.cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(DENY_PROBE),
                            check=False)
        err = r.stderr
        if config in ("none", "gatekeeper", "kyverno"):  # taugate's admission policy binding gone, too
            gpu = self.cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                  input=json.dumps(GPU_PROBE), check=False)
            if admission_policy.NAME in gpu.stderr:
                return False
        if config == "none":
            return r.returncode == 0
        if config == "gatekeeper":
            return r.returncode != 0 and GATEKEEPER_WEBHOOK in err and "requests-required" in err
        if config == "kyverno":
            return (r.returncode != 0 and f'"{self.kyverno_webhook}"' in err
                    and "Policy taugate-requests-required failed: requests-required: " in err)
        if r.returncode == 0 or "mutate.workloads.tau.azure.com" not in err:  # the one workload call
            return False
        after = {k: _taugate_reviews(p) for k, p in servers if p}
        other = "taugate-opa" if config == "taugate" else "taugate"
        return after[config] > before[config] and after.get(other, 0) == before.get(other, 0)


HANDLER_METRIC = "taugate_admission_duration_seconds"


def _taugate_metrics(p: e2e_platform.Platform) -> str:
    """``taugate serve``'s /metrics."""
    ctx = ssl.create_default_context(cafile=str(p.cert_dir / "ca.crt"))
    with urllib.request.urlopen(f"https://{LOOPBACK}:{p.webhook_port}/metrics", context=ctx, timeout=5) as r:
        return r.read().decode()


def _taugate_reviews(p: e2e_platform.Platform | None) -> float:
    """How many reviews ``taugate serve`` has answered (its ``taugate_admission_duration_seconds``
    counts)."""
    if p is None:
        return 0.0
    return sum(h.count for h in am.parse(_taugate_metrics(p), HANDLER_METRIC, ("webhook",)).values())


def _opa_platform(plat: e2e_platform.Platform, opa_url: str) -> e2e_platform.Platform:
    """A second taugate webhook as the chart renders it with ``webhook.opa.enabled`` (args
    ``--policy-backend=opa --opa-url=...``, env ``TAUGATE_OPA_TIMEOUT_SECONDS``), its OPA URL
    pointed at ``opa_url``; same certificate, ServiceAccount and cluster as ``plat``."""
    objects = e2e_platform.rendered_chart({"webhook": {"opa": {"enabled": True}}})
    for o in objects:
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-webhook"):
            c = o["spec"]["template"]["spec"]["containers"][0]
            if "--policy-backend=opa" not in c["args"]:
                raise RuntimeError("the chart rendered with webhook.opa.enabled has no --policy-backend=opa")
            c["args"] = [f"--opa-url={opa_url}" if a.startswith("--opa-url=") else a for a in c["args"]]
    return dataclasses.replace(plat, objects=objects, webhook_port=free_port(), webhook=None, operator=None,
                               workdir=plat.workdir / "opa-webhook")


GATEKEEPER_METRIC = "gatekeeper_validation_request_duration_seconds"


def _gatekeeper_handler(port: int) -> dict[am.Key, am.Histogram]:
    """Gatekeeper's own time per validation review (``gatekeeper_validation_request_duration_seconds``,
    ``pkg/webhook/stats_reporter.go``, on its Prometheus port), every series added into one, keyed
    ``("validation.gatekeeper.sh",)``."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as r:
        series = am.parse(r.read().decode(), GATEKEEPER_METRIC, ("admission_status", "admission_dryrun"))
    total = am.Histogram()
    for h in series.values():
        total = total.plus(h)
    return {(GATEKEEPER_WEBHOOK,): total} if series else {}


def start_gatekeeper(cp: ControlPlane, workdir: Path) -> tuple[Process, list[dict], int]:
    """Gatekeeper's manager (``--operation=webhook``: the validating webhook, no audit, no
    mutation; ``--operation=generate``: the constraint CRDs, which upstream's audit Deployment
    makes) as the admin, its CRDs, the translated policy library (``bench/gatekeeper``), and its
    ValidatingWebhookConfiguration (returned, not applied)."""
    binary = cp.binary("gatekeeper")
    cp.kubectl("create", "namespace", gatekeeper.NAMESPACE)
    cp.apply_objects(gatekeeper.crds(), "--server-side", "--field-manager=bench")
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
               *[f"crd/{c['metadata']['name']}" for c in gatekeeper.crds()])
    certs = workdir / "gatekeeper-certs"
    certs.mkdir(parents=True, exist_ok=True)
    crt, key = cp.ca.issue("gatekeeper-webhook-service.gatekeeper-system.svc", server_hosts=(LOOPBACK, "localhost"))
    (certs / "tls.crt").write_bytes(crt)
    (certs / "tls.key").write_bytes(key)
    (certs / "ca.crt").write_bytes(cp.ca.pem)
    # Gatekeeper owns the status objects it writes by its own Pod (POD_NAME); it runs here as a
    # process, so the Pod is one that never runs (a nodeSelector no Node matches).
    image = f"openpolicyagent/gatekeeper:{gatekeeper.version()}"
    cp.apply_objects([{"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "gatekeeper-bench", "namespace": gatekeeper.NAMESPACE},
                       "spec": {"nodeSelector": {"taugate-bench/no-such-node": "true"},
                                "containers": [{"name": "manager", "image": image}]}}],
                     "--server-side", "--field-manager=bench")
    port, health, prometheus = free_port(), free_port(), free_port()
    p = start_process("gatekeeper", [
        binary, f"--port={port}", f"--host={LOOPBACK}", f"--cert-dir={certs}", "--disable-cert-rotation",
        "--operation=webhook", "--operation=generate", f"--health-addr={LOOPBACK}:{health}",
        f"--metrics-addr={LOOPBACK}:{free_port()}",
        f"--prometheus-port={prometheus}", f"--exempt-namespace={gatekeeper.NAMESPACE}",
        "--disable-opa-builtin={http.send}", "--enable-k8s-native-validation=false", "--shutdown-delay=0",
        "--log-level=WARNING"], workdir,
        env={"KUBECONFIG": str(cp.kubeconfig), "POD_NAMESPACE": gatekeeper.NAMESPACE, "POD_NAME": "gatekeeper-bench"})
    cp.apply_objects(gatekeeper.templates(), "--server-side", "--field-manager=bench")
    kinds = [t["spec"]["crd"]["spec"]["names"]["kind"] for t in gatekeeper.templates()]

    def constraint_crds_served() -> bool:
        r = cp.kubectl("get", *[f"crd/{k.lower()}.constraints.gatekeeper.sh" for k in kinds], check=False)
        return r.returncode == 0

    deadline = time.monotonic() + 180
    while not constraint_crds_served():
        if not p.alive():
            raise RuntimeError(f"gatekeeper exited: {p.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Gatekeeper made no constraint CRDs for {kinds} in 180 s: {p.tail()}")
        time.sleep(1)
    cp.apply_objects(gatekeeper.constraints(), "--server-side", "--field-manager=bench")
    return p, [gatekeeper.webhook_configuration(port, cp.ca.pem)], prometheus


KYVERNO_METRIC = "kyverno_admission_review_duration_seconds"


def _kyverno_handler(port: int, webhook: str) -> dict[am.Key, am.Histogram]:
    """Kyverno's own time per admission review (``kyverno_admission_review_duration_seconds``,
    ``pkg/metrics/admission.go``, recorded around each review it handles, on its metrics port),
    every series added into one, keyed ``(webhook,)`` (its ValidatingPolicies webhook)."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as r:
        series = am.parse(r.read().decode(), KYVERNO_METRIC,
                          ("resource_kind", "resource_request_operation", "request_allowed"))
    total = am.Histogram()
    for h in series.values():
        total = total.plus(h)
    return {(webhook,): total} if series else {}


def _kyverno_process(cp: ControlPlane, workdir: Path, name: str, port: int, metrics_port: int) -> Process:
    """Kyverno's admission controller (``cmd/kyverno``) as the release manifest runs it (its
    arguments and environment), as the admin, serving on ``https://127.0.0.1:port`` (``--serverIP``:
    the webhook URLs it registers name that address), metrics on ``metrics_port``, our certificate
    (no certificate controller), no admission reports, no controller-runtime metrics server;
    ``name`` is its pod name, its identity in the leader election."""
    override = {"--webhookServerPort": str(port), "--metricsPort": str(metrics_port),
                "--controllerRuntimeMetricsAddress": "0", "--admissionReports": "false"}
    args = []
    for a in kyverno.admission_controller_args():
        flag = a.split("=", 1)[0]
        args.append(f"{flag}={override.pop(flag)}" if flag in override else a)
    if override:
        raise RuntimeError(f"Kyverno's release manifest no longer sets {sorted(override)}")
    args += [f"--kubeconfig={cp.kubeconfig}", f"--webhookServerHost={LOOPBACK}", f"--serverIP={LOOPBACK}:{port}",
             f"--metricsHost={LOOPBACK}", "--disableCertManagerController", "--disableLogColor"]
    env = kyverno.admission_controller_env(namespace=kyverno.NAMESPACE, pod=name)
    env["TUF_ROOT"] = str(workdir / "sigstore")
    return start_process(name, [cp.binary("kyverno"), *args], workdir, env=env)


def start_kyverno(cp: ControlPlane, workdir: Path) -> tuple[Process, list[dict], int, str]:
    """Kyverno's admission controller as the admin, its CRDs and ConfigMaps, the translated policy
    library (``bench/kyverno``), and the webhook configurations Kyverno registers for it
    (returned, not applied; with the name of its ValidatingPolicies webhook).

    A first run is the leader (its namespace's ``kyverno`` Lease is free): its webhook controller
    registers its webhook configurations, the policies are applied (validated by its policy
    webhook), and once its resource webhook configuration calls ``/vpol/`` with every policy they
    are kept. That run stops, its configurations are deleted (the switching puts them back), the
    Lease is given to the bench for a day, and the run measured starts on the same address: a
    replica that is not the leader serves admission but registers nothing, so the switching owns
    the configurations."""
    cp.kubectl("create", "namespace", kyverno.NAMESPACE)
    cp.apply_objects(kyverno.crds(), "--server-side", "--field-manager=bench")
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
               *[f"crd/{c['metadata']['name']}" for c in kyverno.crds()])
    crt, key = cp.ca.issue(f"kyverno-svc.{kyverno.NAMESPACE}.svc", server_hosts=(LOOPBACK, "localhost"))
    b64 = {k: base64.b64encode(v).decode() for k, v in (("ca", cp.ca.pem), ("crt", crt), ("key", key))}
    cp.apply_objects([
        *kyverno.config_maps(),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": kyverno.CA_SECRET, "namespace": kyverno.NAMESPACE},
         "data": {"tls.crt": b64["ca"]}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": kyverno.TLS_SECRET, "namespace": kyverno.NAMESPACE},
         "data": {"tls.crt": b64["crt"], "tls.key": b64["key"]}}], "--server-side", "--field-manager=bench")
    port, metrics = free_port(), free_port()
    url = f"https://{LOOPBACK}:{port}{KYVERNO_POLICY_PATH}"
    names = [p["metadata"]["name"] for p in kyverno.policies()]

    def registered() -> list[dict] | None:
        """Kyverno's webhook configurations, once its ValidatingPolicies webhook calls every policy."""
        objs = [o for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
                for o in cp.get_json(kind, "-l", kyverno.WEBHOOK_LABEL)["items"]]
        for o in objs:
            for w in o.get("webhooks") or []:
                u = w["clientConfig"].get("url", "")
                if u.startswith(url) and set(u[len(url):].split("/")) == set(names):
                    return objs
        return None

    leader = _kyverno_process(cp, workdir, "kyverno-register", port, metrics)
    try:
        wait_until("Kyverno to register its policy webhook", lambda: cp.get_json(
            "validatingwebhookconfigurations", "-l", kyverno.WEBHOOK_LABEL)["items"], 180, processes=[leader])
        cp.apply_objects(kyverno.policies(), "--server-side", "--field-manager=bench")
        objs = wait_until(f"Kyverno to register a webhook calling {url}<every policy>", registered, 120,
                          processes=[leader])
    finally:
        leader.stop()
    configurations = []
    for o in objs:
        meta = o["metadata"]
        configurations.append({"apiVersion": o["apiVersion"], "kind": o["kind"],
                               "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if k in meta},
                               "webhooks": o.get("webhooks") or []})
        cp.kubectl("delete", o["kind"], meta["name"], "--ignore-not-found")
    webhook = next(w["name"] for o in configurations for w in o["webhooks"]
                   if w["clientConfig"].get("url", "").startswith(url))
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cp.apply_objects([{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "kyverno", "namespace": kyverno.NAMESPACE},
                       "spec": {"holderIdentity": "taugate-bench", "leaseDurationSeconds": 86400,
                                "acquireTime": now, "renewTime": now}}],
                     "--server-side", "--force-conflicts", "--field-manager=bench")
    p = _kyverno_process(cp, workdir, "kyverno", port, metrics)
    ctx = ssl.create_default_context(cadata=cp.ca.pem.decode())
    wait_until("Kyverno's admission controller to be ready", lambda: _https_ok(
        f"https://{LOOPBACK}:{port}/health/readiness", ctx), 120, processes=[p])
    return p, configurations, metrics, webhook


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
        return r.status == 200


def start(workdir: Path, configs: tuple[str, ...]) -> Bench:
    """Build (or find cached) and start everything ``configs`` need; on failure stop it all."""
    components = ["etcd", "kubernetes", "kueue"]
    if "taugate-opa" in configs:
        components.append("opa")
    if "gatekeeper" in configs:
        components.append("gatekeeper")
    if "kyverno" in configs:
        components.append("kyverno")
    t0 = time.monotonic()
    cp = ControlPlane(build(*components), workdir / "controlplane")
    b = Bench(cp, workdir)
    b.started_s["build"] = time.monotonic() - t0
    try:
        t0 = time.monotonic()
        cp.start()
        b.stack = Stack(cp, workdir / "stack")
        b.stack.workdir.mkdir(parents=True, exist_ok=True)
        b.stack.start_kueue()
        b.started_s["control plane + Kueue"] = time.monotonic() - t0
        t0 = time.monotonic()
        b.taugate = e2e_platform.install(cp, workdir / "taugate")
        # The operator made the workspaces and installed the admission policy; stopped now, since it
        # would put back the policy's binding the bench takes away for the other configurations.
        assert b.taugate.operator is not None
        b.taugate.operator.stop()
        b.taugate.operator = None
        ca = (b.taugate.cert_dir / "ca.crt").read_bytes()
        b.configurations["none"] = []
        # taugate is its webhook configurations and its admission policy's binding (the peers run without it)
        b.configurations["taugate"] = e2e_platform.webhook_configurations(
            b.taugate.objects, b.taugate.webhook_port, ca) + [admission_policy.binding()]
        b.started_s["taugate"] = time.monotonic() - t0
        if "taugate-opa" in configs:
            t0 = time.monotonic()
            opa_dir = workdir / "opa"
            opa_dir.mkdir(parents=True, exist_ok=True)
            b.opa = OpaServer(opa_binary(), opa_dir).start()
            b.taugate_opa = _opa_platform(b.taugate, b.opa.url)
            b.taugate_opa.workdir.mkdir(parents=True, exist_ok=True)
            b.taugate_opa.start_webhook()
            b.configurations["taugate-opa"] = e2e_platform.webhook_configurations(
                b.taugate_opa.objects, b.taugate_opa.webhook_port, ca) + [admission_policy.binding()]
            b.started_s["taugate-opa + OPA"] = time.monotonic() - t0
        if "gatekeeper" in configs:
            t0 = time.monotonic()
            b.gatekeeper, b.configurations["gatekeeper"], b.gatekeeper_metrics_port = start_gatekeeper(cp, workdir)
            b.started_s["gatekeeper"] = time.monotonic() - t0
        if "kyverno" in configs:
            t0 = time.monotonic()
            b.kyverno, b.configurations["kyverno"], b.kyverno_metrics_port, b.kyverno_webhook = start_kyverno(
                cp, workdir)
            b.started_s["kyverno"] = time.monotonic() - t0
    except BaseException:
        b.stop()
        cp.stop()
        raise
    return b


# ---- the run ----------------------------------------------------------------------------------
def run(b: Bench, configs: tuple[str, ...], n: int, concurrency: int, rounds: int,
        loads: list[Workload] | None = None) -> dict:
    """``rounds`` interleaved rounds (plus one warm-up) of ``n`` creates per workload and
    configuration; returns the result document (see ``summarize``)."""
    loads = loads or workloads()
    raw: dict[str, dict] = {c: {"creates": {w.name: [] for w in loads}, "seconds": {w.name: 0.0 for w in loads},
                                "errors": {w.name: 0 for w in loads}, "first_error": None,
                                "webhooks": {w.name: {} for w in loads}, "handler": {w.name: {} for w in loads},
                                "own_webhooks": sorted({w["name"] for o in b.configurations[c]
                                                        for w in o.get("webhooks") or []})}
                            for c in configs}
    loadavg = []
    for rnd in range(rounds + 1):
        # Each round starts one configuration later, so none always runs first or after another.
        for config in configs[rnd % len(configs):] + configs[:rnd % len(configs)]:
            b.switch(config)
            for w in loads:
                prefix = f"bench-{config}-{rnd}-{'rj' if 'RayJob' in w.name else 'job'}"
                handler_before = _handler(b, config)
                before = scrape_text(b.cp)
                got = create_many(b.cp, w, prefix, n, concurrency)
                after = scrape_text(b.cp)
                handler_after = _handler(b, config)
                b.last_scrapes[config] = (before, after)
                delete_bench_objects(b.cp)
                if rnd == 0:
                    continue  # warm-up
                r = raw[config]
                r["creates"][w.name] += got["latencies_ms"]
                r["seconds"][w.name] += got["seconds"]
                r["errors"][w.name] += got["errors"]
                r["first_error"] = r["first_error"] or got["first_error"]
                r["webhooks"][w.name] = am.add(r["webhooks"][w.name], am.difference(am.parse(after), am.parse(before)))
                r["handler"][w.name] = am.add(r["handler"][w.name], am.difference(handler_after, handler_before))
            loadavg.append(os.getloadavg()[0])
            print(f"bench: round {rnd}{' (warm-up)' if rnd == 0 else ''} {config} done "
                  f"(load {loadavg[-1]:.2f})", flush=True)
    return summarize(raw, configs, loads, n, concurrency, rounds, loadavg)


def _handler(b: Bench, config: str) -> dict[am.Key, am.Histogram]:
    """The webhook server's own review-time histograms now: taugate's per webhook (``/mutate``,
    ``/validate``), Gatekeeper's validation one, Kyverno's every review; none for ``none``."""
    server = {"taugate": b.taugate, "taugate-opa": b.taugate_opa}.get(config)
    if server is not None:
        return am.parse(_taugate_metrics(server), HANDLER_METRIC, ("webhook",))
    if config == "gatekeeper" and b.gatekeeper_metrics_port:
        return _gatekeeper_handler(b.gatekeeper_metrics_port)
    if config == "kyverno" and b.kyverno_metrics_port:
        return _kyverno_handler(b.kyverno_metrics_port, b.kyverno_webhook)
    return {}


def summarize(raw: dict, configs, loads: list[Workload], n: int, concurrency: int, rounds: int,
              loadavg: list[float]) -> dict:
    """Rows per (workload, configuration): client ``p50_ms``/``p99_ms``/``creates_per_s`` and
    their ratios to ``none``; per webhook the API server's ``admission_metrics.summarize``; the
    webhook calls per create tried (``calls_per_create``: every webhook's CREATE calls, Kueue's
    included; ``own_calls_per_create``: the configuration's own webhooks')."""
    rows = []
    for w in loads:
        base = None
        for config in configs:
            r = raw[config]
            lat = r["creates"][w.name]
            secs = r["seconds"][w.name]
            webhooks = am.summarize(r["webhooks"][w.name])
            tried = len(lat) + r["errors"][w.name]
            own = set(r.get("own_webhooks") or ())
            row = {"workload": w.name, "config": config, "creates": len(lat), "errors": r["errors"][w.name],
                   "p50_ms": _r(percentile(lat, 0.5)), "p99_ms": _r(percentile(lat, 0.99)),
                   "creates_per_s": round(len(lat) / secs, 1) if secs else None,
                   "calls_per_create": round(sum(x["calls"] for x in webhooks) / tried, 2) if tried else None,
                   "own_calls_per_create": (round(sum(x["calls"] for x in webhooks if x["webhook"] in own) / tried, 2)
                                            if tried else None),
                   "webhooks": webhooks,
                   "handler": am.handler_summary(r["handler"][w.name])}
            if config == "none":
                base = row
            if base and base is not row:
                row["p50_vs_none"] = _ratio(row["p50_ms"], base["p50_ms"])
                row["p99_vs_none"] = _ratio(row["p99_ms"], base["p99_ms"])
                row["throughput_vs_none"] = _ratio(row["creates_per_s"], base["creates_per_s"])
            rows.append(row)
    return {"when": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{_platform.machine()}, {os.cpu_count()} cores, Python {_platform.python_version()}",
            "n": n, "concurrency": concurrency, "rounds": rounds,
            "loadavg_1m": {"min": min(loadavg, default=None), "max": max(loadavg, default=None)},
            "first_errors": {c: raw[c]["first_error"] for c in configs if raw[c]["first_error"]},
            "rows": rows}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _fmt(v, suffix: str = "") -> str:
    return "-" if v is None else f"{v:g}{suffix}"


def markdown(result: dict) -> str:
    """The tables of ``result``: client view per configuration, then the API server's per webhook."""
    out = [f"Measured {result['when']} on {result['machine']}; {result['n']} creates per workload per round at "
           f"{result['concurrency']} in flight, {result['rounds']} interleaved rounds after a warm-up; "
           f"1-minute load average during the run {result['loadavg_1m']['min']:.2f}-{result['loadavg_1m']['max']:.2f}.",
           "", "| workload | configuration | creates | errors | p50 ms | p99 ms | creates/s | p50 vs none | "
           "p99 vs none | creates/s vs none | webhook calls per create | of which the configuration's |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        out.append(f"| {r['workload']} | {r['config']} | {r['creates']} | {r['errors']} | {_fmt(r['p50_ms'])} | "
                   f"{_fmt(r['p99_ms'])} | {_fmt(r['creates_per_s'])} | {_fmt(r.get('p50_vs_none'))} | "
                   f"{_fmt(r.get('p99_vs_none'))} | {_fmt(r.get('throughput_vs_none'))} | "
                   f"{_fmt(r.get('calls_per_create'))} | {_fmt(r.get('own_calls_per_create'))} |")
    out += ["", "Webhook calls per create: the CREATE calls the API server made to admission webhooks (each a "
            "network round trip) between the scrapes around the creates, over the creates tried: every "
            "webhook's (Kueue's included), and of them the configuration's own webhooks'. Objects others "
            "create meanwhile count too (Kueue's Workloads, which a webhook matching every kind, as "
            "Gatekeeper's, also judges)."]
    out += ["", "The API server's `apiserver_admission_webhook_admission_duration_seconds` per webhook (CREATE calls "
            "during the creates; mean exact, p50/p99 interpolated in its 5/25/100 ms buckets):", "",
            "| workload | configuration | webhook | type | calls | rejected | mean ms | p50 ms | p99 ms |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        for wh in r["webhooks"]:
            out.append(f"| {r['workload']} | {r['config']} | `{wh['webhook']}` | {wh['type']} | {wh['calls']} | "
                       f"{wh['rejected']} | {_fmt(wh['mean_ms'])} | {_fmt(wh['p50_ms'])} | {_fmt(wh['p99_ms'])} |")
    handler = [(r, name, h) for r in result["rows"] for name, h in (r.get("handler") or {}).items()]
    if handler:
        out += ["", "The webhook server's own time per review (taugate's `taugate_admission_duration_seconds` per "
                "route, Gatekeeper's `gatekeeper_validation_request_duration_seconds` over every review it got, "
                "Kyverno's `kyverno_admission_review_duration_seconds` over every review it got; mean "
                "exact, p50/p99 interpolated in their buckets): what the API server's time above adds to it is TLS, "
                "the connection and the wait for a CPU.", "",
                "| workload | configuration | server's webhook | reviews | mean ms | p50 ms | p99 ms |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['workload']} | {r['config']} | `{name}` | {h['calls']} | {_fmt(h['mean_ms'])} | "
                f"{_fmt(h['p50_ms'])} | {_fmt(h['p99_ms'])} |" for r, name, h in handler]
    if result.get("first_errors"):
        out += ["", "First error per configuration: "
                + "; ".join(f"{c}: {e}" for c, e in result["first_errors"].items())]
    if result.get("gatekeeper"):
        g = result["gatekeeper"]
        out += ["", f"Gatekeeper {g['version']}; policies translated to ConstraintTemplates: "
                + ", ".join(g["translated"]) + "; not translated: "
                + "; ".join(f"{k} ({v})" for k, v in g["not_translated"].items()) + "."]
    if result.get("kyverno"):
        k = result["kyverno"]
        out += ["", f"Kyverno {k['version']}; policies translated to ValidatingPolicies (CEL): "
                + ", ".join(k["translated"]) + "; not translated: the same as for Gatekeeper."]
    if result.get("started_s"):
        out += ["", "Start-up (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["started_s"].items())]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100, help="creates per workload per configuration per round")
    p.add_argument("--concurrency", type=int, default=16, help="creates in flight")
    p.add_argument("--rounds", type=int, default=3, help="counted rounds (after one warm-up round)")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {','.join(CONFIGS)}")
    p.add_argument("--out", default="e2e", help="results file stem under bench/results (or an absolute path)")
    args = p.parse_args(argv)
    configs = tuple(c for c in args.configs.split(",") if c)
    if unknown := set(configs) - set(CONFIGS):
        p.error(f"unknown configurations {sorted(unknown)}")
    workdir = Path(tempfile.mkdtemp(prefix="taugate-bench-e2e-"))
    print(f"bench: starting the stack in {workdir} (load {os.getloadavg()[0]:.2f})", flush=True)
    try:
        b = start(workdir, configs)
    except Exception as e:  # noqa: BLE001 - reported, exit 2
        print(f"bench: the stack could not start: {e}", file=sys.stderr)
        return 2
    try:
        print(f"bench: up ({', '.join(f'{k} {v:.0f} s' for k, v in b.started_s.items())}); running", flush=True)
        result = run(b, configs, args.n, args.concurrency, args.rounds)
    finally:
        b.stop()
        b.cp.stop()
    result["started_s"] = b.started_s
    if "gatekeeper" in configs:
        result["gatekeeper"] = {"version": gatekeeper.version(), "translated": list(gatekeeper.TRANSLATED),
                                "not_translated": gatekeeper.NOT_TRANSLATED}
    if "kyverno" in configs:
        result["kyverno"] = {"version": kyverno.version(), "translated": list(kyverno.TRANSLATED),
                             "not_translated": kyverno.NOT_TRANSLATED}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (RESULTS / f"{args.out}.md").write_text(md)
    for config, (before, after) in b.last_scrapes.items():  # the last round's scrapes, to check the parsing by
        (RESULTS / f"{args.out}-metrics-{config}-before.txt").write_text(before)
        (RESULTS / f"{args.out}-metrics-{config}-after.txt").write_text(after)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
