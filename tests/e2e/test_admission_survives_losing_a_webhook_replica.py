"""Webhook high availability on the real control plane (issue 32, item 3): two ``taugate serve``
replicas with the chart's args and env, each bound on this host's own address
(``controlplane.host_address``: an EndpointSlice refuses loopback), behind the chart's rendered
Service ``taugate-webhook`` with one EndpointSlice per replica (the Service's port name
``https``, each replica's own port), and the chart's rendered webhook configurations applied with
their ``clientConfig.service`` as rendered (plus the caBundle). kube-apiserver runs with
``--enable-aggregator-routing=true``, so it resolves the Service to a random ready endpoint of its
EndpointSlices for each call (k8s.io/apiserver ``pkg/util/proxy`` ``ResolveEndpoint``,
``WebhookRoundTripLoadBalancing``).

No kubelet runs here, so this test stands in for the kubelet and the EndpointSlice controller, for
readiness only: it marks a replica's endpoint ``ready: false`` once that replica's ``/readyz``
stops answering (and ``ready: true`` once it answers again), as the controller does when the
chart's readinessProbe fails or passes. In a cluster that takes up to the probe's
``periodSeconds`` x ``failureThreshold`` (5 s x 3 = 15 s, plus its 2 s timeout); here the
stand-in waits for ``/readyz`` to fail and for the stream of creates to have met the dead replica
once, so the window is short but never empty.

The stream creates the GPU Job of ``policies/gpu-per-pod-fits-node/samples`` (four one-GPU pods)
in the example's ``vision`` workspace, one ``kubectl create`` after the other. Every create is
either admitted with taugate's mutation (queue label, suspend, run-id, GPU class placement) or
refused; none is admitted unmutated. How it is refused depends on the workload route's
(``/mutate``) failurePolicy, and both are run: as the chart renders it by default (``Ignore``),
a call that lands on the dead replica fails open and the API server's own policy
(``taugate-admitted-workloads``) refuses the unmutated GPU Job; with
``webhook.failurePolicyOverrides.mutate: Fail`` the API server refuses it with its webhook-call
error. The API server's own counters say the same (``apiserver_admission_webhook_fail_open_count``,
``apiserver_admission_webhook_rejection_count``): one failed call per refused create.

The routes that are ``Fail`` in every variant, which no API server policy backs, are checked the
same way with what a hostile researcher tries during the loss (``GUARDED``): a ``kubectl scale``
past the profile and a self-approved TauQuotaRequest are refused by the failed call or by
taugate, never stored.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.controlplane import LOOPBACK, ControlPlaneError, Process, free_port, host_address, wait_until
from tests.e2e.platform import (
    NAMESPACE,
    RELEASE,
    SYSTEM_NAMESPACE,
    WEBHOOK_KINDS,
    Platform,
    release_objects,
    rendered_chart,
    webhook_configurations,
)
from tests.e2e.test_every_gpu_kind_is_governed import RESEARCHER_GROUP, SAMPLES
from tests.e2e.workloads import RUN_ID, WORKSPACE, admitted_problems, into_workspace
from tests.install import chart as chart_helpers
from tests.paths import POLICIES

SERVICE = f"{RELEASE}-webhook"
MANAGED_BY = "test-admission-survives-losing-a-webhook-replica"
"""The EndpointSlices' ``endpointslice.kubernetes.io/managed-by``: this test, not the
EndpointSlice controller (which leaves slices it does not manage alone)."""
MADE = "taugate-e2e/webhook-replicas"
"""The label on every Job this module creates (deleted at its end)."""
MUTATE = "mutate.workloads.tau.azure.com"
GPU_JOB = yaml.safe_load((POLICIES / "gpu-per-pod-fits-node" / "samples" /
                          "example_allowed_job_single_gpu.yaml").read_text())
REFUSED_BY_POLICY = ("ValidatingAdmissionPolicy 'taugate-admitted-workloads' with binding "
                     "'taugate-admitted-workloads' denied")
UNAVAILABLE = "taugate's admission webhook may be unavailable"
WEBHOOK_CALL_ERROR = f'failed calling webhook "{MUTATE}"'
CONSECUTIVE = 20
"""Creates in a row that must all be admitted and mutated by the survivor once the dead
replica's endpoint is not ready."""


@dataclass
class Replica:
    name: str
    host: str
    port: int
    process: Process | None = None

    @property
    def slice(self) -> str:
        return f"{SERVICE}-{self.name}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class Create:
    """One create of the stream: when it ran (monotonic seconds), whether the API server admitted
    it, and what is wrong with it (an admitted object without taugate's mutation, or a refusal
    that is not the expected one)."""

    name: str
    started: float
    ended: float
    admitted: bool
    problems: list[str]
    error: str = ""


@dataclass
class Replicas:
    """The two replicas, their EndpointSlices and the creates made through them."""

    platform: Platform
    a: Replica
    b: Replica
    configurations: list[dict]
    """The chart's webhook configurations as rendered for this run (``service`` clientConfig)."""
    tag: str
    creates: list[Create] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0

    @property
    def mutate_policy(self) -> str:
        mwc = next(o for o in self.configurations if o["kind"] == "MutatingWebhookConfiguration")
        return next(w["failurePolicy"] for w in mwc["webhooks"] if w["name"] == MUTATE)

    # ---- processes ---------------------------------------------------------------------------
    def start(self, r: Replica, *, chart_shutdown_delay: bool = False) -> None:
        r.process = self.platform.start_webhook_replica(r.host, r.port, name=f"taugate-serve-{r.name}",
                                                        chart_shutdown_delay=chart_shutdown_delay)

    def kill(self, r: Replica) -> None:
        """SIGKILL: no shutdown delay, no goodbye, as a node or OOM kill ends the pod."""
        assert r.process is not None
        os.killpg(r.process.popen.pid, signal.SIGKILL)
        r.process.popen.wait(10)

    def wait(self, what: str, check, timeout: float = 60) -> object:
        procs = [p for p in (self.platform.operator, self.a.process, self.b.process) if p and p.alive()]
        return wait_until(what, check, timeout, processes=procs + self.platform.cp.processes, interval=0.2)

    # ---- the stand-in for the kubelet's readiness probe and the EndpointSlice controller -------
    def endpoint_slice(self, r: Replica, ready: bool) -> dict:
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": r.slice, "namespace": NAMESPACE,
                             "labels": {"kubernetes.io/service-name": SERVICE,
                                        "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
                "addressType": "IPv4",
                "ports": [{"name": self.service_port_name, "port": r.port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [r.host],
                               "conditions": {"ready": ready, "serving": ready, "terminating": False}}]}

    @property
    def service_port_name(self) -> str:
        (port,) = chart_helpers.one(self.platform.objects, "Service", SERVICE)["spec"]["ports"]
        return port["name"]

    def mark(self, r: Replica, ready: bool) -> None:
        """Write ``r``'s endpoint as the EndpointSlice controller does after its probe's verdict."""
        self.platform.cp.apply_objects([self.endpoint_slice(r, ready)], "--server-side",
                                       f"--field-manager={MANAGED_BY}")

    def mark_on_probe(self, r: Replica, ready: bool) -> float:
        """Wait until ``r``'s ``/readyz`` answers (``ready``) or stops answering, then mark its
        endpoint so; returns when the mark was stored (monotonic)."""
        self.wait(f"{r.name}'s /readyz to {'answer' if ready else 'stop answering'}",
                  lambda: self.platform.webhook_ready(r.host, r.port) is ready, 60)
        self.mark(r, ready)
        return time.monotonic()

    # ---- what the replicas and the API server count ------------------------------------------
    def admissions(self, r: Replica) -> float:
        return mutate_reviews(self.platform, r.host, r.port)

    def failed_calls(self) -> float:
        """Calls to taugate's workload webhook the API server could not make, from its own
        ``/metrics``: let through (``apiserver_admission_webhook_fail_open_count``, failurePolicy
        Ignore) or refused (``apiserver_admission_webhook_rejection_count`` with
        ``error_type="calling_webhook_error"``, failurePolicy Fail)."""
        import urllib.request

        cp = self.platform.cp
        with urllib.request.urlopen(f"{cp.server}/metrics", context=cp.ssl_context(), timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("name") != MUTATE:
                    continue
                if family.name == "apiserver_admission_webhook_fail_open_count" or (
                        family.name == "apiserver_admission_webhook_rejection_count"
                        and s.labels.get("error_type") == "calling_webhook_error"):
                    total += s.value
        return total

    # ---- creates ------------------------------------------------------------------------------
    def create(self) -> Create:
        """One real create of the GPU Job through the API server, judged as it comes back."""
        with self._lock:
            self._count += 1
            name = f"replicas-{self.tag}-{self._count:04d}"
        obj = into_workspace(GPU_JOB, name=name)
        obj["metadata"]["labels"] = {MADE: "yes"}
        started = time.monotonic()
        out = self.platform.cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj), check=False,
                                       timeout=120)
        ended = time.monotonic()
        if out.returncode == 0:
            c = Create(name, started, ended, True, admitted_problems(json.loads(out.stdout)))
        else:
            c = Create(name, started, ended, False, self.refusal_problems(name, out.stderr), out.stderr.strip())
        with self._lock:
            self.creates.append(c)
        return c

    def refusal_problems(self, name: str, err: str) -> list[str]:
        """What is wrong with a refusal: with the route's failurePolicy Fail it must be the API
        server's webhook-call error; with Ignore the call failed open and the API server's own
        policy must have refused the unmutated GPU Job."""
        if self.mutate_policy == "Fail":
            return [] if WEBHOOK_CALL_ERROR in err else [f"not the webhook-call error: {err}"]
        want = (REFUSED_BY_POLICY, UNAVAILABLE, f"taugate has not admitted Job {name} in workspace namespace "
                f"{WORKSPACE}: it asks for GPUs but has no {RUN_ID} label")
        return [f"refused, but not as failing open then the policy says ({w!r}): {err}" for w in want if w not in err]

    def since(self, t: float) -> list[Create]:
        with self._lock:
            return [c for c in self.creates if c.started >= t]


class Stream:
    """Creates one after the other in a thread until ``stop()``."""

    def __init__(self, replicas: Replicas):
        self.replicas = replicas
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="creates", daemon=True)

    def _run(self) -> None:
        try:
            while not self.done.is_set():
                self.replicas.create()
        except BaseException as e:  # handed to the test by stop()
            self.failure = e

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(180)
        if self.failure is not None and exc[0] is None:
            raise self.failure

    def check(self) -> None:
        if self.failure is not None:
            raise ControlPlaneError(f"the stream of creates failed: {self.failure!r}")


VARIANTS = {"as-rendered": None, "mutate-fail": {"webhook": {"failurePolicyOverrides": {"mutate": "Fail"}}}}
"""The chart values each run renders its webhook configurations with: the defaults (the workload
route ``Ignore``), and the workload route ``Fail`` (docs/install.md, the failure policy table)."""


@pytest.fixture(scope="module", params=list(VARIANTS))
def replicas(platform, request):
    """Replicas ``a`` and ``b`` on this host's address, the chart's Service with one ready
    EndpointSlice each, and the chart's webhook configurations (rendered with
    ``VARIANTS[request.param]``) pointing at the Service. Afterwards the replicas stop and the
    platform's configurations (url of its own webhook) are put back."""
    cp, plat = platform.cp, platform
    host = host_address()
    values = VARIANTS[request.param]
    rendered = rendered_chart(values) if values else plat.objects
    ca = (plat.cert_dir / "ca.crt").read_bytes()
    reps = Replicas(plat, Replica("a", host, free_port(host)), Replica("b", host, free_port(host)),
                    webhook_configurations([o for o in rendered if o["kind"] in WEBHOOK_KINDS], None, ca),
                    request.param)
    try:
        plat.wait_for("the operator to install the API server's policy", lambda: cp.kubectl(
            "get", "validatingadmissionpolicybinding", "taugate-admitted-workloads", check=False).returncode == 0, 60)
        reps.start(reps.a)
        reps.start(reps.b)
        service = [o for o in release_objects(cp, plat.objects) if o["kind"] == "Service" and
                   o["metadata"]["name"] == SERVICE]
        cp.apply_objects(service, "--server-side", "--field-manager=helm")
        cp.apply_objects([reps.endpoint_slice(r, True) for r in (reps.a, reps.b)], "--server-side",
                         f"--field-manager={MANAGED_BY}")
        cp.apply_objects(reps.configurations, "--server-side", "--field-manager=helm", "--force-conflicts")
        yield reps
    finally:
        for r in (reps.a, reps.b):
            if r.process:
                r.process.stop()
        cp.apply_objects(webhook_configurations(plat.objects, plat.webhook_port, ca), "--server-side",
                         "--field-manager=helm", "--force-conflicts")
        cp.kubectl("delete", "endpointslice", reps.a.slice, reps.b.slice, "-n", NAMESPACE, "--ignore-not-found")
        cp.kubectl("delete", "job", "-n", WORKSPACE, "-l", MADE, "--ignore-not-found", "--wait=false", timeout=120)

        def platform_webhook_answers() -> bool:  # the url configurations act again
            before = mutate_reviews(plat, LOOPBACK, plat.webhook_port)
            cp.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(into_workspace(GPU_JOB, name="back")))
            return mutate_reviews(plat, LOOPBACK, plat.webhook_port) > before
        plat.wait_for("the platform's own webhook to be called again", platform_webhook_answers, 60)


def mutate_reviews(plat: Platform, host: str, port: int) -> float:
    """Reviews of ``/mutate`` the webhook server at ``host``:``port`` answered, from its
    ``/metrics`` (``taugate_admission_duration_seconds``)."""
    _, body = plat.webhook_get(host, port, "/metrics")
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "taugate_admission_duration_seconds_count" and s.labels.get("webhook") == "/mutate":
                return s.value
    raise AssertionError(f"no taugate_admission_duration_seconds for /mutate at {host}:{port}")


def _called_both(reps: Replicas) -> tuple[int, dict[str, float]]:
    """Create until the API server has called both replicas; returns the creates it took and
    each replica's count of ``/mutate`` reviews before."""
    before = {r.name: reps.admissions(r) for r in (reps.a, reps.b)}
    made = []

    def both_grew() -> bool:
        c = reps.create()
        made.append(c)
        assert c.admitted and not c.problems, c
        return all(reps.admissions(r) > before[r.name] for r in (reps.a, reps.b))
    reps.wait("the API server to call both replicas", both_grew, 120)
    return len(made), before


def test_with_both_endpoints_ready_the_api_server_calls_both_replicas_and_each_mutates(replicas):
    reps = replicas
    stored = reps.platform.cp.get_json("mutatingwebhookconfiguration", RELEASE)
    assert {w["name"]: w["clientConfig"].get("service") for w in stored["webhooks"]}[MUTATE] == {
        "name": SERVICE, "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    made, before = _called_both(reps)
    after = {r.name: reps.admissions(r) for r in (reps.a, reps.b)}
    print(f"both replicas called within {made} creates: /mutate reviews {before} -> {after}")
    assert all(c.admitted and not c.problems for c in reps.creates), reps.creates


def test_a_killed_replica_refuses_creates_until_its_endpoint_is_not_ready_and_none_is_admitted_unmutated(replicas):
    reps = replicas
    cp = reps.platform.cp
    failed_calls = reps.failed_calls()
    with Stream(reps) as stream:
        t0 = time.monotonic()
        reps.wait("a few creates", lambda: stream.check() or len(reps.since(t0)) >= 4, 120)
        killed = time.monotonic()
        reps.kill(reps.b)
        # The stand-in's probe: /readyz stops answering; it marks the endpoint not ready once the
        # stream has met the dead replica (a kubelet would after 3 failed probes 5 s apart).
        reps.wait("a create to meet the dead replica", lambda: stream.check() or any(
            not c.admitted for c in reps.since(killed)), 120)
        marked = reps.mark_on_probe(reps.b, False)
        survivor_at_mark = reps.admissions(reps.a)

        def consecutive_admitted() -> bool:
            stream.check()
            after = reps.since(marked)
            return len(after) >= CONSECUTIVE and all(c.admitted for c in after[-CONSECUTIVE:])
        reps.wait(f"{CONSECUTIVE} creates in a row admitted after the mark", consecutive_admitted, 300)
    survivor_after = reps.admissions(reps.a)

    during = [c for c in reps.creates if c.ended >= killed]
    refused = [c for c in during if not c.admitted]
    last_refused = max(c.ended for c in refused)
    window = [c for c in during if c.started <= last_refused]
    print(f"[/mutate failurePolicy {reps.mutate_policy}] replica b killed: {len(refused)} of {len(window)} creates "
          f"refused in a window of "
          f"{last_refused - killed:.2f} s (kill to the end of the last refused create); endpoint marked not "
          f"ready {marked - killed:.2f} s after the kill; {len([c for c in refused if c.started >= marked])} "
          f"refused after the mark; then {len(reps.since(marked))} creates, the last {CONSECUTIVE} in a row "
          f"admitted; the chart's readinessProbe window in a cluster: 5 s x 3 = 15 s")
    print("refusal:", refused[0].error)
    # (b) every create was admitted with taugate's mutation or refused as the failurePolicy says.
    assert [c for c in reps.creates if c.problems] == []
    assert refused
    # Each refusal is one call the API server could not make, to the dead endpoint, and nothing else.
    assert reps.failed_calls() - failed_calls == len(refused)
    # A new connection to the dead replica is refused; a call in flight on a kept-alive connection
    # to it when it was killed is reset (both name its endpoint).
    dead = (f"dial tcp {reps.b.endpoint}: connect: connection refused",
            f"->{reps.b.endpoint}: read: connection reset by peer")
    if reps.mutate_policy == "Ignore":  # the API server logs the call it let through
        log = next(p for p in cp.processes if p.name == "kube-apiserver").log.read_text(errors="replace")
        assert f"Failed calling webhook, failing open {MUTATE}" in log and any(d in log for d in dead)
    else:
        assert all(any(d in c.error for d in dead) for c in refused), (reps.b.endpoint, refused)
    # None admitted unmutated, as the API server stores them.
    unmutated = cp.kubectl("get", "jobs", "-n", WORKSPACE, "-l", f"{MADE},!{RUN_ID}", "-o", "name").stdout.split()
    assert unmutated == []
    # (c) after the mark, the survivor answers every create.
    after = reps.since(marked)
    assert all(c.admitted for c in after[-CONSECUTIVE:])
    assert survivor_after - survivor_at_mark >= CONSECUTIVE


def test_the_restarted_replica_marked_ready_is_called_again(replicas):
    reps = replicas
    if reps.b.process is not None and reps.b.process.alive():  # run alone: lose it first
        reps.kill(reps.b)
        reps.mark_on_probe(reps.b, False)
    reps.start(reps.b)
    reps.mark_on_probe(reps.b, True)
    made, before = _called_both(reps)
    print(f"replica b restarted and marked ready: both called again within {made} creates")


def test_a_replica_stopped_with_sigterm_drains_for_the_charts_shutdown_delay_and_no_create_is_refused(replicas):
    """A rolling update or a drained node ends a replica with SIGTERM: with the chart's
    ``--shutdown-delay`` it reports not ready at once and answers every call for that long, so
    its endpoint leaves before it closes and no create is refused."""
    reps = replicas
    (container,) = chart_helpers.one(reps.platform.objects, "Deployment", SERVICE)["spec"]["template"]["spec"][
        "containers"]
    delay = next(float(a.split("=", 1)[1]) for a in container["args"] if a.startswith("--shutdown-delay="))
    assert delay > 0
    if reps.b.process is not None and reps.b.process.alive():
        reps.kill(reps.b)
        reps.mark_on_probe(reps.b, False)
    reps.start(reps.b, chart_shutdown_delay=True)
    reps.mark_on_probe(reps.b, True)
    _called_both(reps)
    failed_calls = reps.failed_calls()
    with Stream(reps) as stream:
        t0 = time.monotonic()
        reps.wait("a few creates", lambda: stream.check() or len(reps.since(t0)) >= 4, 120)
        assert reps.b.process is not None
        stopping = time.monotonic()
        os.killpg(reps.b.process.popen.pid, signal.SIGTERM)
        marked = reps.mark_on_probe(reps.b, False)  # /readyz is 503 while it drains
        assert reps.b.process.popen.wait(60) == 0
        exited = time.monotonic()
        reps.wait(f"{CONSECUTIVE} creates after replica b exited",
                  lambda: stream.check() or len(reps.since(exited)) >= CONSECUTIVE, 300)
    during = [c for c in reps.creates if c.ended >= stopping]
    print(f"replica b stopped with SIGTERM (--shutdown-delay={delay:g}): endpoint marked not ready "
          f"{marked - stopping:.2f} s after, exited {exited - stopping:.2f} s after; {len(during)} creates "
          f"from the SIGTERM on, {len([c for c in during if c.started < exited])} of them before it exited")
    assert marked - stopping < delay, "the stand-in marked the endpoint after the drain ended"
    assert exited - stopping >= delay
    assert [c for c in during if c.started < exited], "no create ran while replica b drained"
    assert [c for c in during if not c.admitted or c.problems] == []
    assert reps.failed_calls() == failed_calls


GUARDED = {
    # what a hostile researcher tries: (the route that judges it, taugate's own refusal)
    "scale": ("validate.workloads.tau.azure.com", "[workers-match-profile]"),
    "self-approval": ("validate.resources.tau.azure.com", "only platform admins may approve"),
}
"""Requests judged only by routes whose failurePolicy is ``Fail`` in every variant (no API server
policy behind them): ``kubectl scale`` of a GPU Deployment past its profile (the ``scale``
subresource, ``/validate``) and a requester approving their own TauQuotaRequest
(``/mutate-tau`` then ``/validate-tau``)."""


def test_while_a_replica_is_dead_the_fail_routes_refuse_and_nothing_they_guard_gets_through(replicas):
    """During the outage a call that meets the dead replica is refused by the API server
    (failurePolicy Fail: the route fails closed), one that meets the survivor by taugate; neither
    the scale nor the approval is ever stored, and once the endpoint is marked not ready every
    attempt gets taugate's own refusal."""
    reps = replicas
    cp = reps.platform.cp
    tag = reps.tag
    deployment, request = f"replicas-{tag}", f"replicas-{tag}"
    role = f"replicas-requester-{tag}"
    researcher = cp.user_kubeconfig("alice", (RESEARCHER_GROUP,))
    requester = cp.user_kubeconfig("bob", (RESEARCHER_GROUP,))
    obj = SAMPLES["Deployment"]()
    obj["metadata"]["name"] = deployment
    obj["metadata"].setdefault("labels", {})[MADE] = "yes"
    quota = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
             "metadata": {"name": request, "namespace": SYSTEM_NAMESPACE},
             "spec": {"workspace": "vision", "resource": "h100", "requested": 16, "reason": "sweep"}}
    rbac = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role, "namespace": SYSTEM_NAMESPACE},
             "rules": [{"apiGroups": ["tau.azure.com"], "resources": ["quotarequests"],
                        "verbs": ["get", "list", "create", "update", "patch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": role, "namespace": SYSTEM_NAMESPACE},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}]
    attempts = {
        "scale": ("scale", f"deployment.apps/{deployment}", "--replicas=5", "-n", WORKSPACE, researcher),
        "self-approval": ("annotate", f"quotarequests.tau.azure.com/{request}", "tau.azure.com/approved=true",
                          "-n", SYSTEM_NAMESPACE, requester),
    }
    outcomes: list[tuple[str, float, str]] = []  # (what, started, "taugate" | "call-error")

    def attempt(what: str) -> str:
        *args, kubeconfig = attempts[what]
        started = time.monotonic()
        out = cp.kubectl(*args, kubeconfig=kubeconfig, check=False, timeout=120)
        route, refusal = GUARDED[what]
        assert out.returncode != 0, f"{what} got through: {out.stdout}"
        if refusal in out.stderr:
            verdict = "taugate"
        else:
            assert f'failed calling webhook "{route}"' in out.stderr or (
                what == "self-approval" and 'failed calling webhook "mutate.resources.tau.azure.com"' in out.stderr), \
                f"{what} refused, but neither by taugate nor by the failed call of a Fail route: {out.stderr}"
            assert reps.b.endpoint in out.stderr, f"a call error not to the dead replica: {out.stderr}"
            verdict = "call-error"
        outcomes.append((what, started, verdict))
        return verdict

    try:
        cp.apply_objects(rbac)
        cp.kubectl("create", "-f", "-", input=json.dumps(obj), kubeconfig=researcher)
        cp.apply_objects([quota])
        if reps.b.process is None or not reps.b.process.alive():  # the test run alone or after another
            reps.start(reps.b)
            reps.mark_on_probe(reps.b, True)
        for what in GUARDED:  # both replicas live: taugate refuses
            assert attempt(what) == "taugate"
        killed = time.monotonic()
        reps.kill(reps.b)

        def both_met_the_dead_replica() -> bool:
            for what in GUARDED:
                attempt(what)
            return all(any(w == what and t >= killed and v == "call-error" for w, t, v in outcomes)
                       for what in GUARDED)
        reps.wait("a call of each Fail route to meet the dead replica", both_met_the_dead_replica, 180)
        marked = reps.mark_on_probe(reps.b, False)

        def consecutive_by_taugate() -> bool:  # the API server's endpoints follow the slice shortly
            for what in GUARDED:
                attempt(what)
            after = [v for _, t, v in outcomes if t >= marked]
            return len(after) >= CONSECUTIVE and set(after[-CONSECUTIVE:]) == {"taugate"}
        reps.wait(f"{CONSECUTIVE} attempts in a row refused by the survivor after the mark", consecutive_by_taugate,
                  300)
        during = [o for o in outcomes if o[1] >= killed]
        print(f"[replica b killed] {len(during)} attempts: {len([o for o in during if o[2] == 'call-error'])} "
              f"refused by the failed call (fail closed), "
              f"{len([o for o in during if o[1] >= marked and o[2] == 'call-error'])} of them after the mark; "
              f"every other one by taugate")
        assert cp.get_json("deployment.apps", deployment, "-n", WORKSPACE)["spec"]["replicas"] == 1
        stored = cp.get_json("quotarequests.tau.azure.com", request, "-n", SYSTEM_NAMESPACE)
        assert "tau.azure.com/approved" not in (stored["metadata"].get("annotations") or {})
    finally:
        cp.kubectl("delete", "deployment.apps", deployment, "-n", WORKSPACE, "--ignore-not-found", "--wait=false")
        cp.kubectl("delete", "quotarequests.tau.azure.com", request, "-n", SYSTEM_NAMESPACE, "--ignore-not-found")
        cp.kubectl("delete", "rolebinding,role", role, "-n", SYSTEM_NAMESPACE, "--ignore-not-found")
