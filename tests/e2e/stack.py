"""The whole stack a run goes through, as local processes on the real control plane: Kueue, the
KubeRay operator and kwok, built from their Go modules by ``tests/e2e/build.sh`` (versions pinned in
``tests/e2e/gomod/{kueue,kuberay,kwok}/go.mod``), beside taugate installed by ``platform.install``
with its recorder on.

``start(cp, workdir)``:

1. every Kueue CRD from ``config/components/crd/bases`` with the conversion webhook Kueue's
   kustomization adds (``config/components/crd/patches/webhook_in_*.yaml``), and the CRDs of the
   workload kinds Kueue's integrations watch (``workload_crds``): KubeRay's RayJob/RayCluster/
   RayService (the operator sets up all three controllers), JobSet, LeaderWorkerSet, Kubeflow's
   PyTorchJob and Kubeflow Trainer's TrainJob with its (Cluster)TrainingRuntimes, read from their
   pinned modules (``tests/e2e/gomod/{jobset,lws,kubeflow,trainer}``). Their
   controllers do not run here: Kueue only needs the APIs to queue, suspend and admit the
   objects, and the tests check what is stored, what Kueue did and which pods exist (Deployments'
   and StatefulSets' pods come from kube-controller-manager, which runs);
2. Kueue (``cmd/kueue``) with a ``--config`` as its manifests have it, but out of a cluster:
   ``internalCertManagement.enable: false`` and its webhook server on 127.0.0.1 with a certificate
   of the control plane's CA, leader election off, the integrations of ``KUEUE_FRAMEWORKS``
   (batch/job, Ray's three, JobSet, PyTorchJob, TrainJob, LeaderWorkerSet, pod, deployment,
   statefulset) and,
   as the pod integration requires, a ``managedJobsNamespaceSelector`` that leaves out kube-system
   and kueue-system. Kueue reads its metrics certificate from the fixed
   path ``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``): it runs in its own mount namespace
   with an overlay on ``/etc`` that holds one, so the machine's ``/etc`` is not touched. Its
   visibility API server (feature ``VisibilityOnDemand``) reads ``/visibility/tls.crt`` and is
   served through an APIService, which this control plane does not aggregate: the gate is off;
3. Kueue's webhook configurations from ``config/components/webhook/manifests.yaml`` with the
   patches of its kustomization (the pod, deployment and statefulset webhooks' namespace
   selectors), the webhooks of those integrations and of Kueue's own kinds, with only
   ``clientConfig`` rewritten to ``url`` + ``caBundle`` (as ``platform.webhook_configurations``
   does for taugate's); the start waits until they act (``KUEUE_PROBES``);
4. the KubeRay operator (module root ``main.go``) and kwok (``cmd/kwok``) with the stages of its
   module's ``kustomize/stage``: Nodes initialised and heartbeaten with Leases
   (``node/fast``, ``node/heartbeat-with-lease``), pods made Running and Ready, pods owned by a Job
   Succeeded, deleted pods removed (``pod/fast``; each container status names an ``imageID``, as
   a kubelet's does once the image is pulled: ``kwok_image_id``), and every container's log
   simulated: kwok's server, which the Nodes advertise as their kubelet, serves ``KWOK_POD_LOG``
   to ``kubectl logs``;
5. an S3-compatible object store (``objectstore.ObjectStore``: versitygw, built from its Go module)
   and taugate (``platform.install``) with the recorder on, writing evidence to an Object Lock
   bucket of it as the chart's ``operator.evidence.s3`` values say, and every example Node
   annotated ``kwok.x-k8s.io/node: fake``;
6. what the platform team has beside ``examples/cluster.yaml`` in a real cluster (``platform_extras``):
   a PersistentVolume for each workspace's data PVC (the CSI driver's job: no
   pod of a run schedules while ``/data`` is unbound), and the Node that fails its GPU check
   cordoned (kube-scheduler knows nothing of Node Problem Detector conditions and binds pods
   to such a node; a remediation controller or the on-call cordons it).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from taugate.kinds.rayjob import SUBMITTER_CONTAINER
from tests import upstream
from tests.e2e.controlplane import (
    LOOPBACK,
    ControlPlane,
    ControlPlaneError,
    Process,
    free_port,
    start_process,
    wait_until,
)
from tests.e2e.objectstore import ObjectStore
from tests.e2e.platform import Platform, install, workload_crds
from tests.paths import EXAMPLE_CLUSTER, KUEUE, KUEUE_CRDS

KUEUE_NAMESPACE = "kueue-system"
KUEUE_WEBHOOK_PATHS = {
    "batch/job": "-batch-v1-job",
    "ray.io/rayjob": "-ray-io-v1-rayjob",
    "ray.io/raycluster": "-ray-io-v1-raycluster",
    "ray.io/rayservice": "-ray-io-v1-rayservice",
    "jobset.x-k8s.io/jobset": "-jobset-x-k8s-io-v1alpha2-jobset",
    "kubeflow.org/pytorchjob": "-kubeflow-org-v1-pytorchjob",
    "trainer.kubeflow.org/trainjob": "-trainer-kubeflow-org-v1alpha1-trainjob",
    "leaderworkerset.x-k8s.io/leaderworkerset": "-leaderworkerset-x-k8s-io-v1-leaderworkerset",
    "pod": "--v1-pod",
    "deployment": "-apps-v1-deployment",
    "statefulset": "-apps-v1-statefulset",
}
"""Each Kueue integration the stack turns on (its ``FrameworkName``, ``pkg/controller/jobs/<kind>``)
and the part of its webhooks' paths in ``config/components/webhook/manifests.yaml``
(``/mutate<part>``, ``/validate<part>``)."""
KUEUE_FRAMEWORKS = tuple(KUEUE_WEBHOOK_PATHS)
# Kueue's own kinds (ClusterQueue, Workload, ...) have webhooks too.
_KUEUE_WEBHOOK_PATH_PARTS = (*KUEUE_WEBHOOK_PATHS.values(), "-kueue-x-k8s-io-")
MANAGED_JOBS_NAMESPACE_SELECTOR = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", KUEUE_NAMESPACE]}]}
"""Kueue's ``managedJobsNamespaceSelector`` (the one its ``controller_manager_config.yaml`` suggests):
required with the pod integration (``pkg/config/validation.go``, ``validatePodIntegrationOptions``);
Pods, Deployments and StatefulSets elsewhere are never managed by Kueue."""
KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease", "pod/fast")
COMPONENTS = ("etcd", "kubernetes", "kueue", "kuberay", "kwok", "versitygw")
USERS = {"kueue": "system:serviceaccount:kueue-system:kueue-controller-manager",
         "kuberay-operator": "system:serviceaccount:ray-system:kuberay-operator", "kwok": "e2e-kwok"}
"""The user each controller authenticates as (a client certificate in ``system:masters``): the
names their own installs give their ServiceAccounts, which the chart's
``webhook.trustedControllers`` trusts to create children (a RayJob's RayCluster and submitter
Job); the audit log tells their requests apart by it."""
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        # What Kueue and KubeRay write to the objects taugate's webhooks see, with the request
        # and the webhooks' patch annotations (patch.webhook.admission.k8s.io needs Request).
        {"level": "Request", "users": [USERS["kueue"], USERS["kuberay-operator"]],
         "verbs": ["create", "update", "patch"],
         "resources": [{"group": "ray.io", "resources": ["rayjobs", "rayclusters"]},
                       {"group": "batch", "resources": ["jobs"]}]},
        {"level": "None"},
    ]}
"""The API server's audit policy in the whole stack (``ControlPlane.start(audit_policy=...)``)."""


_PROBE_META = {"namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "none"}}
_PROBE_POD_SPEC = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
KUEUE_PROBES = (
    ("a queued Job is suspended on create",
     {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kueue-probe", **_PROBE_META},
      "spec": {"template": {"spec": _PROBE_POD_SPEC}}},
     lambda o: (o.get("spec") or {}).get("suspend") is True),
    ("a queued bare Pod gets the kueue.x-k8s.io/admission scheduling gate",
     {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kueue-probe", **_PROBE_META}, "spec": _PROBE_POD_SPEC},
     lambda o: {"name": "kueue.x-k8s.io/admission"} in ((o.get("spec") or {}).get("schedulingGates") or [])),
    ("a queued JobSet is suspended on create",
     {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "kueue-probe", **_PROBE_META},
      "spec": {"replicatedJobs": [{"name": "r", "replicas": 1,
                                   "template": {"spec": {"template": {"spec": _PROBE_POD_SPEC}}}}]}},
     lambda o: (o.get("spec") or {}).get("suspend") is True),
)
"""``(what, object, acted)``: server-side dry runs that show Kueue's webhooks acting, the Job's
(``pkg/controller/jobs/job``), the pod integration's (``pkg/controller/jobs/pod/pod_webhook.go``,
``Default``: the ``kueue.x-k8s.io/admission`` gate) and JobSet's (``pkg/controller/jobs/jobset``)."""


def kueue_crds(port: int, ca_pem: bytes) -> list[dict]:
    """Every Kueue CRD as its module ships it, with the conversion webhook of
    ``config/components/crd/patches/webhook_in_<plural>.yaml`` (those its kustomization lists) pointed at
    ``https://127.0.0.1:port/convert`` trusting ``ca_pem``."""
    crd_dir = KUEUE / "config" / "components" / "crd"
    # Only the patches its kustomization applies: Kueue serves no conversion for ResourceFlavor.
    enabled = {p["path"] for p in yaml.safe_load((crd_dir / "kustomization.yaml").read_text()).get("patches") or []}
    out = []
    for f in sorted(KUEUE_CRDS.glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.safe_load(f.read_text())
        plural = crd["spec"]["names"]["plural"]
        rel = f"patches/webhook_in_{plural}.yaml"
        patch = crd_dir / rel
        if rel in enabled:
            conv = copy.deepcopy(yaml.safe_load(patch.read_text())["spec"]["conversion"])
            conv["webhook"]["clientConfig"] = {"url": f"https://{LOOPBACK}:{port}/convert",
                                               "caBundle": base64.b64encode(ca_pem).decode()}
            crd["spec"]["conversion"] = conv
        out.append(crd)
    return out


def kueue_webhook_configurations(port: int, ca_pem: bytes) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations from its module's
    ``config/components/webhook/manifests.yaml``, named as its release names them
    (``kueue-`` prefix), keeping the webhooks of ``KUEUE_FRAMEWORKS`` and of Kueue's own kinds,
    each ``clientConfig`` rewritten to ``https://127.0.0.1:port<path>`` + ``caBundle``."""
    webhook_dir = KUEUE / "config" / "components" / "webhook"
    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    patches = _kustomization_patches(webhook_dir / "kustomization.yaml")
    out = []
    for d in docs:
        d = copy.deepcopy(d)
        for patch in patches.get((d["kind"], d["metadata"]["name"]), []):
            for wh in d["webhooks"]:
                wh.update(next((p for p in patch["webhooks"] if p["name"] == wh["name"]), {}))
        d["metadata"]["name"] = "kueue-" + d["metadata"]["name"]
        kept = []
        for wh in d["webhooks"]:
            path = wh["clientConfig"]["service"]["path"]
            if not any(part in path for part in _KUEUE_WEBHOOK_PATH_PARTS):
                continue
            wh["clientConfig"] = {"url": f"https://{LOOPBACK}:{port}{path}",
                                  "caBundle": base64.b64encode(ca_pem).decode()}
            kept.append(wh)
        d["webhooks"] = kept
        out.append(d)
    return out


def _kustomization_patches(kustomization: Path) -> dict[tuple[str, str], list[dict]]:
    """The inline patches of a kustomization by the (kind, name) they patch: Kueue's webhook
    kustomization gives the pod, deployment and statefulset webhooks a ``namespaceSelector`` that
    leaves out kube-system and kueue-system (``name``-keyed entries of ``webhooks``, merged as
    kustomize's strategic merge does)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for entry in yaml.safe_load(kustomization.read_text()).get("patches") or []:
        patch = yaml.safe_load(entry["patch"])
        out.setdefault((patch["kind"], patch["metadata"]["name"]), []).append(patch)
    return out


LONG_RUNNING_CONTAINER = "train-until-deleted"
"""The first container's name of a Job pod kwok leaves Running (``kwok_stages``)."""


KWOK_IMAGE_DIGEST = "sha256:" + hashlib.sha256(b"kwok pulls no image").hexdigest()
"""The digest every container status names in its ``imageID`` on the stack (``kwok_stages``)."""


def kwok_image_id(image: str) -> str:
    """The ``imageID`` kwok reports for a container of ``image`` (``kwok_stages``)."""
    return f"{image}@{KWOK_IMAGE_DIGEST}"


def _with_image_ids(template: str, image: str) -> str:
    """A pod stage's status template whose container statuses also name the ``imageID``, as a
    kubelet reports the digest it ran once the image is pulled (kwok's own templates leave it out)."""
    line = f"- image: {{{{ {image} | Quote }}}}\n"
    if line not in template:
        raise ControlPlaneError(f"kwok's pod stage template changed: no {line!r} to add the imageID after")
    digest = f'  imageID: {{{{ printf "%s@%s" {image} "{KWOK_IMAGE_DIGEST}" | Quote }}}}\n'
    return template.replace(line, line + digest)


def kwok_stages() -> str:
    """The kwok Stage documents of ``KWOK_STAGES`` from the pinned kwok module, as one YAML
    stream; ``pod-complete`` leaves KubeRay's submitter pod (container ``ray-job-submitter``)
    Running, as ``ray job submit`` runs while the Ray job does, and a pod whose first container is
    ``LONG_RUNNING_CONTAINER``; ``pod-ready`` and ``pod-complete`` report each container's
    ``imageID`` (``kwok_image_id``), which the recorder keeps as the digest the run ran."""
    root = upstream.module_dir("kwok") / "kustomize" / "stage"
    docs = []
    for rel in KWOK_STAGES:
        p = root / rel
        files = sorted(p.glob("*.yaml")) if p.is_dir() else [p]
        for f in files:
            if f.name == "kustomization.yaml":
                continue
            docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    if not docs:
        raise ControlPlaneError(f"no kwok stages under {root}")
    for d in docs:
        images = {"pod-ready": ".image", "pod-complete": "$item.image"}.get(d["metadata"]["name"])
        if images:
            d["spec"]["next"]["statusTemplate"] = _with_image_ids(d["spec"]["next"]["statusTemplate"], images)
        if d["metadata"]["name"] == "pod-complete":
            # KubeRay's submitter runs `ray job submit` and follows the Ray job until it ends: it
            # does not complete while the RayJob runs (kwok's stage completes every Job's pod).
            # A Job pod whose first container is LONG_RUNNING_CONTAINER trains until deleted: its
            # DRA claim stays allocated while a test looks at it.
            d["spec"]["selector"]["matchExpressions"].append(
                {"key": ".spec.containers.[0].name", "operator": "NotIn",
                 "values": [SUBMITTER_CONTAINER, LONG_RUNNING_CONTAINER]})
    return yaml.safe_dump_all(docs)


KWOK_POD_LOG = "".join(f"epoch {i}/3 loss={1.0 / i:.3f} (kwok's simulated container log)\n" for i in range(1, 4))
"""What ``kubectl logs`` of any container of a kwok pod of the stack returns (no progress line:
the recorder's log pattern finds no training step in it)."""


def cri_log(text: str, at: str = "2026-01-01T00:00:00.000000000Z") -> str:
    """``text`` as a container runtime writes a log file (the CRI format kubelet and kwok read:
    ``<RFC 3339 time> <stream> F <line>``, ``k8s.io/cri-client/pkg/logs``), one full line each."""
    return "".join(f"{at} stdout F {line}\n" for line in text.splitlines())


def kwok_cluster_logs(log_file: Path) -> dict:
    """kwok's ``ClusterLogs`` (``kwok.x-k8s.io/v1alpha1``, ``pkg/apis/v1alpha1/cluster_logs_types.go``):
    every container of every pod (no selector, no container names) logs ``log_file``, as kwok's
    ``containerLogs`` handler serves it (``pkg/kwok/server/debugging_logs.go``)."""
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "simulated-logs"},
            "spec": {"logs": [{"logsFile": str(log_file), "previousLogsFile": str(log_file)}]}}


@dataclass
class Stack:
    """Kueue, KubeRay, kwok and taugate on ``cp``; ``platform`` is taugate's install."""

    cp: ControlPlane
    workdir: Path
    kueue_port: int = 0
    kwok_port: int = 0
    processes: list[Process] = field(default_factory=list)
    platform: Platform | None = None

    def process(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)

    def stop(self) -> None:
        if self.platform:
            self.platform.stop()
        for p in reversed(self.processes):
            p.stop()

    def wait_for(self, what: str, check, timeout: float = 120) -> object:
        procs = list(self.processes) + self.cp.processes
        if self.platform:
            procs += [p for p in (self.platform.webhook, self.platform.operator) if p]
        return wait_until(what, check, timeout, processes=procs, interval=0.5)

    def kubeconfig(self, component: str) -> Path:
        """The kubeconfig ``component`` runs with: user ``USERS[component]``, group ``system:masters``."""
        return self.cp.user_kubeconfig(USERS[component], ("system:masters",))

    # ---- Kueue ---------------------------------------------------------------------------------
    def start_kueue(self) -> Process:
        cp = self.cp
        certs = self.workdir / "kueue-certs"
        certs.mkdir(parents=True, exist_ok=True)
        crt, key = cp.ca.issue("kueue-webhook", server_hosts=(LOOPBACK, "localhost"))
        (certs / "tls.crt").write_bytes(crt)
        (certs / "tls.key").write_bytes(key)
        # /etc/kueue/metrics/certs, seen only by Kueue through an overlay on /etc.
        upper, work = self.workdir / "kueue-etc" / "upper", self.workdir / "kueue-etc" / "work"
        metrics = upper / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        (metrics / "tls.crt").write_bytes(crt)
        (metrics / "tls.key").write_bytes(key)
        self.kueue_port = free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{free_port()}"},
            "metrics": {"bindAddress": f"{LOOPBACK}:{free_port()}"},
            "webhook": {"host": LOOPBACK, "port": self.kueue_port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            "managedJobsNamespaceSelector": MANAGED_JOBS_NAMESPACE_SELECTOR,
            "resources": KUEUE_DRA_RESOURCES,
        }
        cfg = self.workdir / "kueue-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        cp.kubectl("create", "namespace", KUEUE_NAMESPACE)
        crds = kueue_crds(self.kueue_port, cp.ca.pem) + workload_crds()
        cp.apply_objects(crds, "--server-side", "--force-conflicts", "--field-manager=e2e-stack")
        # Kueue sets up an integration whose API is not served yet only later (it polls): wait.
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   *[f"crd/{c['metadata']['name']}" for c in crds])
        kueue = cp.binary("kueue")
        script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={shlex.quote(str(upper))},"
                  f"workdir={shlex.quote(str(work))} /etc && "
                  f"exec {shlex.quote(kueue)} --config={shlex.quote(str(cfg))} "
                  f"--feature-gates=VisibilityOnDemand=false,{KUEUE_DRA_GATES} --zap-log-level=2")
        p = start_process("kueue", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script], self.workdir,
                          env={"KUBECONFIG": str(self.kubeconfig("kueue"))})
        self.processes.append(p)
        cp.apply_objects(kueue_webhook_configurations(self.kueue_port, cp.ca.pem), "--server-side",
                         "--field-manager=e2e-stack")
        # Kueue's webhooks act on what carries a queue label: the configurations act when they do.
        for what, probe, acted in KUEUE_PROBES:
            self.wait_for(f"Kueue's webhooks to act ({what})",
                          lambda probe=probe, acted=acted: acted(json.loads(cp.kubectl(
                              "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe),
                              check=False).stdout or "{}")), 120)
        return p

    # ---- KubeRay -------------------------------------------------------------------------------
    def start_kuberay(self) -> Process:
        p = start_process("kuberay-operator", [
            self.cp.binary("kuberay-operator"), f"--metrics-addr={LOOPBACK}:{free_port()}",
            f"--health-probe-bind-address={LOOPBACK}:{free_port()}", "--enable-leader-election=false",
            "--log-stdout-encoder=console"], self.workdir, env={"KUBECONFIG": str(self.kubeconfig("kuberay-operator"))})
        self.processes.append(p)
        return p

    # ---- kwok ----------------------------------------------------------------------------------
    def start_kwok(self, *, node_leases: bool = True) -> Process:
        """kwok with the stages of ``kwok_stages`` and its kubelet-like server on a free port that
        its Nodes advertise (``status.daemonEndpoints.kubeletEndpoint.Port``, InternalIP
        loopback): the API server proxies ``kubectl logs`` of a kwok pod there, and kwok serves
        every container's log from ``KWOK_POD_LOG`` (``kwok_cluster_logs``). ``node_leases`` off:
        kwok renews no node Lease (``--node-lease-duration-seconds=0``), for a control plane
        without the node-lifecycle controller (``bench/fleet.py``: one kwok process cannot renew
        thousands of Leases every 10 s on a shared 2-core machine, and the controller then marks
        its Nodes Unknown and back, a flapping no real fleet of kubelets shows)."""
        stages = self.workdir / "kwok-stages.yaml"
        log_file = self.workdir / "kwok-pod.log"
        log_file.write_text(cri_log(KWOK_POD_LOG))
        stages.write_text(kwok_stages() + "---\n" + yaml.safe_dump(kwok_cluster_logs(log_file)))
        port = self.kwok_port = free_port()
        p = start_process("kwok", [
            self.cp.binary("kwok"), f"--kubeconfig={self.kubeconfig('kwok')}", f"--config={stages}",
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address={LOOPBACK}:{port}", f"--node-port={port}", f"--node-ip={LOOPBACK}",
            "--cidr=10.244.0.0/16", *([] if node_leases else ["--node-lease-duration-seconds=0"])], self.workdir)
        self.processes.append(p)
        return p

    def advertise_kwok_kubelet(self) -> None:
        """Report on each kwok Node, through ``/status`` as its kubelet would, the address and port
        of its kubelet (kwok's server): the example Nodes come with a Ready status, so kwok's
        ``node-initialize`` stage, which writes them, does not run on them, and its heartbeat
        keeps what it finds. Both the InternalIP (which the API server dials,
        ``--kubelet-preferred-address-types=InternalIP``) and a Hostname, as a kubelet reports
        them: whenever a Node's Ready condition is not True (the node-lifecycle controller marks
        it Unknown when kwok renews its Lease late on a loaded machine), kwok runs
        ``node-initialize`` again, whose template writes ``addresses:`` with only the types
        missing; kwok has no ``--node-name``, so a missing Hostname renders ``addresses: null``
        and the strategic merge patch deletes every address (``kubectl logs`` then fails with
        "no preferred addresses found")."""
        for node in self.cp.get_json("nodes")["items"]:
            name, annotations = node["metadata"]["name"], node["metadata"].get("annotations") or {}
            if all(annotations.get(k) == v for k, v in KWOK_NODE_ANNOTATION.items()):
                status = {"addresses": [{"type": "InternalIP", "address": LOOPBACK},
                                        {"type": "Hostname", "address": name}],
                          "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kwok_port}}}
                self.cp.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                                "-p", json.dumps({"status": status}))


def start(cp: ControlPlane, workdir: Path) -> Stack:
    """Start everything the module docstring lists; on failure stop what was started and raise
    ``ControlPlaneError`` naming the component."""
    workdir.mkdir(parents=True, exist_ok=True)
    stack = Stack(cp, workdir)
    try:
        stack.start_kueue()
        stack.start_kuberay()
        stack.start_kwok()
        store = ObjectStore(Path(cp.binary("versitygw")), workdir / "object-store").start()
        assert store.process is not None
        stack.processes.append(store.process)
        stack.platform = install(cp, workdir / "taugate", record=True, node_annotations=KWOK_NODE_ANNOTATION,
                                 object_store=store,
                                 values={"gpu": {"draWorkloads": "queue"}})
        cp.apply_objects(platform_extras() + dra_objects(), "--server-side", "--field-manager=platform-team")
        stack.advertise_kwok_kubelet()
        for node in unhealthy_gpu_nodes():
            cp.kubectl("cordon", node)
        stack.wait_for("kwok to hold every example Node Ready", lambda: _nodes_ready(cp), 120)
    except BaseException:
        stack.stop()
        raise
    return stack


def _example() -> list[dict]:
    return [d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d]


def platform_extras() -> list[dict]:
    """A PersistentVolume bound to each TauWorkspace's data PVC (``<workspace>-data``, the size,
    storage class and ReadWriteMany of ``spec.dataVolume``). (The profiles' WorkloadPriorityClass
    is in ``examples/cluster.yaml``: without it the profiles are not Ready.)"""
    out: list[dict] = []
    for d in _example():
        if d["kind"] != "TauWorkspace" or not d["spec"].get("dataVolume"):
            continue
        ns, vol = d["spec"]["target"]["namespace"], d["spec"]["dataVolume"]
        out.append({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{ns}-data"},
                    "spec": {"capacity": {"storage": vol["size"]}, "accessModes": ["ReadWriteMany"],
                             "storageClassName": vol["storageClassName"], "persistentVolumeReclaimPolicy": "Retain",
                             "claimRef": {"namespace": ns, "name": f"{ns}-data"},
                             "csi": {"driver": "file.csi.azure.com", "volumeHandle": f"{ns}-data"}}})
    return out


DRA_DRIVER = "gpu.nvidia.com"
"""The driver and DeviceClass name of NVIDIA's DRA driver (k8s-dra-driver-gpu) for whole GPUs."""
KUEUE_DRA_GATES = "DynamicResourceAllocation=true,DRAExtendedResources=true"
"""Kueue's DRA support (kueue v0.17 ``pkg/features/kube_features.go``: alpha, off by default)."""
KUEUE_DRA_RESOURCES = {
    # Claim templates of gpu.nvidia.com count as nvidia.com/gpu (kueue v0.17 pkg/dra/mapper.go), so the
    # ClusterQueues' GPU quota covers DRA GPUs too.
    "deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": [DRA_DRIVER]}],
    # The DeviceClass's implicit extended resource (KEP-5004) counts as nvidia.com/gpu as well: Kueue's
    # DRAExtendedResources maps only a DeviceClass's explicit spec.extendedResourceName
    # (pkg/dra/extended_resources.go), so a resource transformation does it (configuration_types.go).
    "transformations": [{"input": f"deviceclass.resource.kubernetes.io/{DRA_DRIVER}", "strategy": "Replace",
                         "outputs": {"nvidia.com/gpu": "1"}}],
}
"""What Kueue is configured with for DRA GPUs (docs/gpu-paths.md shows the same)."""
GPUS_PER_SLICE = 8


def dra_objects() -> list[dict]:
    """The DRA objects NVIDIA's DRA driver would publish for the example's H100 Nodes: the DeviceClass
    ``gpu.nvidia.com`` and, per H100 Node, a ResourceSlice of 8 GPUs in a pool named after the Node
    (kube-scheduler allocates claims from ResourceSlices; no kubelet plugin is needed to schedule)."""
    out: list[dict] = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_DRIVER},
                        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]}}]
    for d in _example():
        labels = d["metadata"].get("labels") or {}
        if d["kind"] != "Node" or labels.get("tau.azure.com/gpu-class") != "h100":
            continue
        node = d["metadata"]["name"]
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{DRA_DRIVER}"},
                    "spec": {"driver": DRA_DRIVER, "nodeName": node,
                             "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                             "devices": [{"name": f"gpu-{i}", "attributes": {
                                 "type": {"string": "gpu"},
                                 "productName": {"string": labels.get("nvidia.com/gpu.product", "")}}}
                                 for i in range(GPUS_PER_SLICE)]}})
    return out


def unhealthy_gpu_nodes() -> list[str]:
    """The example Nodes with a GPU condition (``Gpu*``) that is True."""
    return [d["metadata"]["name"] for d in _example() if d["kind"] == "Node" and any(
        c["type"].startswith("Gpu") and c["status"] == "True" for c in (d.get("status") or {}).get("conditions") or [])]


def _nodes_ready(cp: ControlPlane) -> bool:
    nodes = cp.get_json("nodes")["items"]
    return bool(nodes) and all(any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in n["status"].get("conditions") or []) for n in nodes)
