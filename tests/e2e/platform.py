"""taugate installed on the real control plane as a cluster would have it.

``install(cp, workdir)``:
1. the CRDs: taugate's (``charts/taugate/crds``), those of the workload kinds taugate governs
   (KubeRay's RayJob/RayCluster/RayService, JobSet, LeaderWorkerSet, Kubeflow's PyTorchJob) and
   Kueue's LocalQueue/ClusterQueue/ResourceFlavor/Workload/WorkloadPriorityClass, read from their
   Go modules (versions pinned in ``tests/e2e/gomod``);
2. the Helm chart rendered by Helm (helm-python-sdk, the output of ``helm template``), every
   release object applied through the API server except the hook Jobs (no kubelet runs them here;
   their RBAC and scripts are exercised by the tests that need them);
3. ``taugate operator`` and ``taugate serve`` as local processes, with the args and environment of
   the chart's Deployments, authenticated as the chart's own ServiceAccounts (bound tokens), not
   as the admin;
4. the rendered webhook configurations with only ``clientConfig`` rewritten to
   ``url: https://127.0.0.1:PORT/PATH`` + ``caBundle`` (envtest's rewrite): rules, selectors,
   failurePolicy, timeouts, reinvocationPolicy, matchPolicy and matchConditions as rendered (a
   test of the replicas keeps the rendered ``service`` and adds EndpointSlices of replicas started
   with ``start_webhook_replica`` on the host's address: ``webhook_configurations(port=None)``);
5. the platform of ``examples/cluster.yaml``: the TauCluster, TauWorkspaces, GPU Nodes,
   ResourceFlavors, ClusterQueues and the profiles' (Workload)PriorityClasses (the operator
   makes the namespaces, LocalQueues, RBAC, ServiceAccounts and PVCs from the TauWorkspaces).
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.e2e.controlplane import LOOPBACK, ControlPlane, Process, free_port, start_process, wait_until
from tests.e2e.objectstore import REGION, ObjectStore
from tests.install import chart as chart_helpers
from tests.paths import (
    EXAMPLE_CLUSTER,
    JOBSET_CRD,
    KUEUE_CRDS,
    LWS_CRD,
    PYTORCHJOB_CRD,
    RAYCLUSTER_CRD,
    RAYJOB_CRD,
    RAYSERVICE_CRD,
    REPO,
    TRAINING_RUNTIME_CRDS,
    TRAINJOB_CRD,
)

RELEASE = chart_helpers.RELEASE
NAMESPACE = chart_helpers.NAMESPACE
SYSTEM_NAMESPACE = "tau-platform"
OPERATOR_POD = "taugate-operator"
"""The pod name (``POD_NAME``) of the operator the platform starts: its log is ``taugate-operator.log``."""
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A CPU-only batch Job in the example's `vision` workspace: what the readiness probe dry-runs.
PROBE_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "e2e-probe", "namespace": "vision"},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


def upstream_crds() -> list[dict]:
    """The CRDs that taugate reads or that its workloads need, as their Go modules ship them: the
    workload kinds' (``workload_crds``) and Kueue's LocalQueue, ClusterQueue, ResourceFlavor,
    Workload and WorkloadPriorityClass."""
    files = [KUEUE_CRDS / f"kueue.x-k8s.io_{p}.yaml" for p in
             ("localqueues", "clusterqueues", "resourceflavors", "workloads", "workloadpriorityclasses")]
    return workload_crds() + [yaml.safe_load(f.read_text()) for f in files]


def workload_crds() -> list[dict]:
    """The CRDs of the custom workload kinds taugate governs and Kueue's integrations watch
    (``stack.KUEUE_FRAMEWORKS``), as their pinned modules ship them: KubeRay's RayJob/RayCluster/
    RayService, JobSet, LeaderWorkerSet, Kubeflow's PyTorchJob and Kubeflow Trainer's TrainJob
    with the (Cluster)TrainingRuntimes Kueue's trainjob integration reads its pod templates from.
    Kueue sets an integration up only once its CRD is served
    (``pkg/controller/jobframework/setup.go``)."""
    return [yaml.safe_load(f.read_text()) for f in (RAYJOB_CRD, RAYCLUSTER_CRD, RAYSERVICE_CRD, JOBSET_CRD, LWS_CRD,
                                                     PYTORCHJOB_CRD, TRAINJOB_CRD, *TRAINING_RUNTIME_CRDS)]


def _is_hook(obj: dict) -> bool:
    return "helm.sh/hook" in ((obj.get("metadata") or {}).get("annotations") or {})


def rendered_chart(values: dict | None = None) -> list[dict]:
    """Every object of the chart as Helm renders a fresh install into ``taugate-system``."""
    return chart_helpers.objects({"systemNamespace": SYSTEM_NAMESPACE, **(values or {})})


def release_objects(cp: ControlPlane, objects: list[dict]) -> list[dict]:
    """The objects ``helm install`` creates (hooks left out), namespaced ones in the release
    namespace where the template names none, as Helm places them."""
    cluster_scoped = {line.split()[-1] for line in
                      cp.kubectl("api-resources", "--namespaced=false",
                                 "--no-headers").stdout.splitlines() if line.strip()}
    out = []
    for o in objects:
        if _is_hook(o):
            continue
        o = copy.deepcopy(o)
        if o["kind"] not in cluster_scoped:
            o["metadata"].setdefault("namespace", NAMESPACE)
        out.append(o)
    return out


def webhook_configurations(objects: list[dict], port: int | None, ca_pem: bytes) -> list[dict]:
    """The rendered webhook configurations with each webhook's ``clientConfig`` pointed at
    ``https://127.0.0.1:port`` + the route's path, trusting ``ca_pem``; nothing else changed.
    With ``port`` None the rendered ``service`` is kept and only the ``caBundle`` added, as
    cert-manager's CA injector or ``taugate certs sync`` fill it in a cluster: the API server then
    calls a ready endpoint of the Service's EndpointSlices."""
    out = []
    for obj in objects:
        if obj.get("kind") not in WEBHOOK_KINDS:
            continue
        obj = copy.deepcopy(obj)
        for wh in obj["webhooks"]:
            ca = base64.b64encode(ca_pem).decode()
            if port is None:
                wh["clientConfig"]["caBundle"] = ca
                continue
            path = wh["clientConfig"]["service"]["path"]
            wh["clientConfig"] = {"url": f"https://{LOOPBACK}:{port}{path}", "caBundle": ca}
        out.append(obj)
    return out


def _container(objects: list[dict], deployment: str) -> dict:
    dep = chart_helpers.one(objects, "Deployment", deployment)
    return dep["spec"]["template"]["spec"]["containers"][0]


EVIDENCE_S3_SECRET = "taugate-evidence-s3"
EVIDENCE_CA_SECRET = "taugate-evidence-ca"


def _env(cp: ControlPlane, container: dict, overrides: dict[str, str], pod_name: str = "") -> dict[str, str]:
    """The container's environment as the kubelet resolves it: values, the pod's namespace and
    name (``pod_name``), and Secret keys read from the release namespace (``secretKeyRef``);
    then ``overrides``."""
    env = {}
    for e in container.get("env") or []:
        source = e.get("valueFrom") or {}
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = NAMESPACE
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name" and pod_name:
            env[e["name"]] = pod_name
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = cp.get_json("secret", ref["name"], "-n", NAMESPACE)
            env[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        else:
            raise AssertionError(f"the chart sets {e['name']} from {source}, which this harness cannot resolve")
    for source in container.get("envFrom") or []:
        if "secretRef" not in source:
            raise AssertionError(f"the chart sets variables from {source}, which this harness cannot resolve")
        secret = cp.get_json("secret", source["secretRef"]["name"], "-n", NAMESPACE)
        env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
    env.update(overrides)
    return env


def _taugate(*args: str) -> list[str]:
    return [sys.executable, "-m", "taugate.cli", *args]


@dataclass
class Platform:
    """taugate on the control plane: the rendered chart, the two processes, the webhook port,
    the kubeconfigs of the chart's ServiceAccounts, and where their logs are."""

    cp: ControlPlane
    workdir: Path
    objects: list[dict]
    webhook_port: int = 0
    cert_dir: Path = Path()
    webhook: Process | None = None
    operator: Process | None = None
    kubeconfigs: dict[str, Path] = field(default_factory=dict)
    signing_key: Path | None = None
    object_store: ObjectStore | None = None

    @property
    def evidence_root(self) -> str:
        """Where the operator's recorder writes evidence records (``TAUGATE_RECORDER_EVIDENCE_ROOT``):
        the chart's ``operator.evidence.s3.url`` when the records go to the object store, else a
        directory under the workdir."""
        if self.object_store is not None:
            env = _container(self.objects, f"{RELEASE}-operator").get("env") or []
            return next(str(e["value"]) for e in env if e["name"] == "TAUGATE_RECORDER_EVIDENCE_ROOT")
        return str(self.workdir / "evidence")

    def evidence_env(self) -> dict[str, str]:
        """What ``taugate evidence``/``status`` need besides ``--evidence-root`` to read it (the
        object store's ``AWS_*`` variables)."""
        return self.object_store.env() if self.object_store is not None else {}

    # ---- the processes -------------------------------------------------------------------------
    def start_webhook(self, policies: Path | None = None) -> Process:
        """``taugate serve`` with the chart's webhook args and env, as the webhook's
        ServiceAccount, serving the policy folder ``policies`` (default this checkout's), on
        127.0.0.1 and ``webhook_port`` (the webhook configurations' url); it becomes ``webhook``.
        Returns once ``/readyz`` is ok (its state has synced from the watches)."""
        self.webhook = self.start_webhook_replica(LOOPBACK, self.webhook_port, name="taugate-serve", policies=policies)
        return self.webhook

    def start_webhook_replica(self, host: str, port: int, *, name: str, policies: Path | None = None,
                              chart_shutdown_delay: bool = False) -> Process:
        """One more ``taugate serve`` as a replica of the chart's Deployment runs it (its args and
        env, the webhook's ServiceAccount, the serving certificate) but bound on ``host``:``port``,
        with its log ``<name>.log``; returns once its ``/readyz`` is ok. Its ``--shutdown-delay``
        is 0 unless ``chart_shutdown_delay`` (then the chart's). ``webhook`` is left as is: the
        caller stops it."""
        c = _container(self.objects, f"{RELEASE}-webhook")
        args = []
        for a in c["args"]:
            if a == "--in-cluster":
                args += [a, f"--kubeconfig={self.kubeconfigs['webhook']}"]
            elif a.startswith("--host="):
                args.append(f"--host={host}")
            elif a.startswith("--port="):
                args.append(f"--port={port}")
            elif a.startswith("--cert-dir="):
                args.append(f"--cert-dir={self.cert_dir}")
            elif a.startswith("--policies="):
                args.append(f"--policies={policies or REPO / 'policies'}")
            elif a.startswith("--shutdown-delay=") and not chart_shutdown_delay:
                args.append("--shutdown-delay=0")
            else:
                args.append(a)
        p = start_process(name, _taugate(*args), self.workdir, env=_env(self.cp, c, {}), cwd=REPO)
        wait_until(f"{name} /readyz", lambda: self.webhook_ready(host, port), 60, processes=[p])
        return p

    def webhook_get(self, host: str, port: int, path: str, timeout: float = 3) -> tuple[int, bytes]:
        """``GET path`` of the webhook server at ``host``:``port``: (status, body). TLS verified
        against the serving certificate's CA for the Service's DNS name, as the API server
        verifies it (``<service>.<namespace>.svc``)."""
        ctx = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        with socket.create_connection((host, port), timeout=timeout) as raw:
            conn.sock = ctx.wrap_socket(raw, server_hostname=f"{RELEASE}-webhook.{NAMESPACE}.svc")
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                return r.status, r.read()
            finally:
                conn.close()

    def webhook_ready(self, host: str, port: int) -> bool:
        """Whether the webhook server at ``host``:``port`` answers ``/readyz`` with 200 within the
        chart's readinessProbe timeout (2 s): what the kubelet's probe asks."""
        try:
            return self.webhook_get(host, port, "/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def stop_webhook(self) -> None:
        if self.webhook:
            self.webhook.stop()
            self.webhook = None

    def start_operator(self, record: bool = False, *, pod_name: str = OPERATOR_POD,
                       env: dict[str, str] | None = None) -> Process:
        """``taugate operator`` with the chart's args and env, as the operator's ServiceAccount,
        as the pod ``pod_name`` (its log ``<pod_name>.log``; the leader Lease's holderIdentity starts
        with it); it becomes ``operator``. ``record`` keeps the recorder on (TauRuns and evidence
        under the workdir); it follows runs through Kueue Workloads and KubeRay objects, so only the
        whole stack (``stack.py``) turns it on. Two started here share one evidence root, as the
        chart's replicas share one volume on one node. ``env`` overrides variables of the chart's
        (e.g. another ``TAUGATE_RECORDER_EVIDENCE_ROOT``)."""
        c = _container(self.objects, f"{RELEASE}-operator")
        args = []
        for a in c["args"]:
            if a == "--in-cluster":
                args.append(f"--kubeconfig={self.kubeconfigs['operator']}")
            elif a.startswith("--liveness="):
                args.append(f"--liveness=http://{LOOPBACK}:{free_port()}/healthz")
            elif a.startswith("--audit-policies="):  # the image's policy folder is this checkout's
                args.append(f"--audit-policies={REPO / 'policies'}")
            elif a.startswith("--audit-metrics-port="):
                args.append(f"--audit-metrics-port={free_port()}")
            else:
                args.append(a)
        if not record:
            args.append("--no-record")
        overrides = {"TAUGATE_RECORDER_EVIDENCE_ROOT": self.evidence_root,
                     "TAUGATE_RECORDER_DATA_ROOT": str(self.workdir / "data")}
        if self.object_store is not None:  # the chart mounts the CA from a Secret at a path of the pod
            overrides["AWS_CA_BUNDLE"] = str(self.object_store.ca_bundle)
        if record:  # the chart mounts the signing key from a Secret; here a key made as the docs make it
            self.signing_key = self.workdir / "evidence-key" / "ed25519.pem"
            if not self.signing_key.is_file():
                self.signing_key.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(_taugate("evidence", "keygen", f"--out={self.signing_key}",
                                        f"--public-out={self.signing_key.with_suffix('.pub.pem')}"),
                               check=True, capture_output=True, cwd=REPO)
            overrides["TAUGATE_RECORDER_SIGNING_KEY_FILE"] = str(self.signing_key)
        env = _env(self.cp, c, {**overrides, **(env or {})}, pod_name)
        self.operator = start_process(pod_name, _taugate(*args), self.workdir, env=env, cwd=REPO)
        return self.operator

    def stop(self) -> None:
        """Stop the webhook and the operator (idempotent)."""
        for p in (self.webhook, self.operator):
            if p:
                p.stop()

    # ---- helpers the tests use -----------------------------------------------------------------
    def wait_for(self, what: str, check, timeout: float = 60) -> object:
        procs = [p for p in (self.webhook, self.operator) if p] + self.cp.processes
        return wait_until(what, check, timeout, processes=procs, interval=0.25)


def install(cp: ControlPlane, workdir: Path, *, record: bool = False,
            node_annotations: dict[str, str] | None = None, values: dict | None = None,
            object_store: ObjectStore | None = None) -> Platform:
    """Install everything the module docstring lists and wait until a RayJob in the example's
    ``vision`` workspace is mutated by taugate through the API server. ``record`` turns the
    operator's recorder on; ``node_annotations`` are added to every example Node (kwok's
    ``kwok.x-k8s.io/node: fake`` hands them to kwok); ``values`` are chart values of the install.
    With ``object_store`` the recorder writes to a new Object Lock bucket of it, as the chart's
    ``operator.evidence.s3`` values say (GOVERNANCE retention, 1 day), with the credentials and
    CA from Secrets the platform team creates."""
    if object_store is not None:
        url = object_store.create_bucket("taugate-evidence") + "/runs"
        values = {**(values or {}), "operator": {"evidence": {"s3": {
            "url": url, "endpoint": object_store.endpoint, "region": REGION, "credentialsSecret": EVIDENCE_S3_SECRET,
            "caBundleSecret": EVIDENCE_CA_SECRET, "retention": {"mode": "GOVERNANCE", "days": 1}}}}}
    workdir.mkdir(parents=True, exist_ok=True)
    # 1. CRDs (server-side: KubeRay's are larger than client-side apply's annotation limit).
    crds = chart_helpers.crds() + upstream_crds()
    cp.apply_objects(crds, "--server-side", "--field-manager=e2e-install")
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
               *[f"crd/{c['metadata']['name']}" for c in crds])
    # 2. The release's objects (not the hook Jobs, not yet the webhook configurations).
    objects = rendered_chart(values)
    cp.kubectl("create", "namespace", NAMESPACE)
    cp.kubectl("create", "namespace", SYSTEM_NAMESPACE)
    release = release_objects(cp, objects)
    cp.apply_objects([o for o in release if o["kind"] not in WEBHOOK_KINDS], "--server-side", "--field-manager=helm")
    plat = Platform(cp, workdir, objects, object_store=object_store)
    if object_store is not None:
        creds = {k: v for k, v in object_store.env().items() if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        cp.apply_objects([
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": EVIDENCE_S3_SECRET, "namespace": NAMESPACE},
             "stringData": creds},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": EVIDENCE_CA_SECRET, "namespace": NAMESPACE},
             "stringData": {"ca.crt": object_store.ca_bundle.read_text()}}], "--server-side",
            "--field-manager=platform-team")
    plat.kubeconfigs = {"operator": cp.token_kubeconfig(NAMESPACE, f"{RELEASE}-operator", "operator"),
                        "webhook": cp.token_kubeconfig(NAMESPACE, f"{RELEASE}-webhook", "webhook")}
    # 3. The serving certificate, as `taugate certs generate` makes it for the chart's Service.
    plat.cert_dir = workdir / "webhook-tls"
    subprocess.run(_taugate("certs", "generate", f"--dir={plat.cert_dir}", f"--service={RELEASE}-webhook",
                            f"--namespace={NAMESPACE}"), check=True, capture_output=True, cwd=REPO)
    plat.webhook_port = free_port()
    # 4. The platform: what the platform team applies (the operator makes the rest).
    platform_objects = [d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d]
    nodes = [d for d in platform_objects if d["kind"] == "Node"]
    for n in nodes:
        n["metadata"].setdefault("annotations", {}).update(node_annotations or {})
    cp.apply_objects([d for d in platform_objects if d["kind"] in ("TauCluster", "TauWorkspace", "ResourceFlavor",
                                                                   "ClusterQueue", "WorkloadPriorityClass",
                                                                   "PriorityClass", "Node")],
                     "--server-side", "--field-manager=platform-team")
    for n in nodes:  # a Node's status is its kubelet's to write: set it through /status as one would
        cp.kubectl("patch", "node", n["metadata"]["name"], "--subresource=status", "--type=merge",
                   "-p", json.dumps({"status": n.get("status") or {}}))
    try:
        _start(plat, platform_objects, record)
    except BaseException:
        plat.stop()
        raise
    return plat


def _start(plat: Platform, platform_objects: list[dict], record: bool) -> None:
    cp = plat.cp
    plat.start_operator(record)
    plat.wait_for("the operator to make the workspace namespaces",
                  lambda: all(cp.kubectl("get", "namespace", ns, check=False).returncode == 0
                              for ns in workspace_namespaces(platform_objects)), 90)
    plat.wait_for("the TauCluster to be Ready", lambda: _cluster_ready(cp), 90)
    plat.start_webhook()
    cp.apply_objects(webhook_configurations(plat.objects, plat.webhook_port, (plat.cert_dir / "ca.crt").read_bytes()),
                     "--server-side", "--field-manager=helm")
    # A configuration takes effect a moment after it is stored: probe with server-side dry runs.
    probe = json.dumps(PROBE_JOB)
    plat.wait_for("the webhook configurations to take effect",
                  lambda: QUEUE_LABEL in (json.loads(cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                                                input=probe).stdout)["metadata"].get("labels") or {}),
                  60)


def workspace_namespaces(platform_objects: list[dict]) -> list[str]:
    return [d["spec"]["target"]["namespace"] for d in platform_objects if d["kind"] == "TauWorkspace"]


def _cluster_ready(cp: ControlPlane) -> bool:
    obj = json.loads(cp.kubectl("get", "clusters.tau.azure.com", "cluster", "-o", "json").stdout)
    return (obj.get("status") or {}).get("phase") == "Ready"
