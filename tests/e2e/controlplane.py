"""A real Kubernetes control plane as local processes, started the way envtest starts one
(controller-runtime ``pkg/internal/testing/controlplane``), plus kube-controller-manager and
kube-scheduler: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built
from Go modules by ``tests/e2e/build.sh`` (versions pinned in ``tests/e2e/gomod/*/go.mod``).

Every process is started in its own session with ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with
the test process even when that is killed outright, and ``stop()`` ends each process group (TERM,
then KILL after 10 s). Logs go to ``<workdir>/<name>.log``; a start that fails shows their tail.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.pki import CA, write_service_account_keys

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build.sh"
SERVICE_CIDR = "10.0.0.0/24"
LOOPBACK = "127.0.0.1"
_SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


class ControlPlaneError(RuntimeError):
    """A component could not be built, started or reached; the message says which and why."""


def _host_addresses() -> list[str]:
    """This host's IPv4 addresses that an EndpointSlice may hold (not loopback, link-local,
    multicast or unspecified: ``ValidateEndpointIP`` of k8s.io/kubernetes
    ``pkg/apis/core/validation``), one per interface (its primary address, ``SIOCGIFADDR``), in
    interface order, each checked by a connection to a listener bound on it."""
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, name.encode()[:15].ljust(40, b"\0"))
            except OSError:  # no IPv4 address on this interface
                continue
            ip = ipaddress.IPv4Address(raw[20:24])
            if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
                out.append(str(ip))
    return [a for a in out if _reachable(a)]


def _reachable(address: str) -> bool:
    try:
        with socket.create_server((address, 0)) as srv, socket.create_connection(srv.getsockname(), timeout=2):
            return True
    except OSError:
        return False


def host_address() -> str:
    """A non-loopback IPv4 address of this host that its own processes reach (``_host_addresses``):
    where a server listens when the API server must reach it through an EndpointSlice, which
    refuses loopback addresses. Raises ``ControlPlaneError`` when the host has none."""
    found = _host_addresses()
    if not found:
        raise ControlPlaneError("this host has no IPv4 address but loopback (checked every interface: "
                                f"{[n for _, n in socket.if_nameindex()]}): an EndpointSlice refuses 127.0.0.0/8 "
                                "and link-local addresses, so the API server cannot be routed to a local "
                                "server through a Service; give an interface an address (e.g. a dummy "
                                "interface: ip link add e2e0 type dummy; ip addr add 192.0.2.2/24 dev e2e0; "
                                "ip link set e2e0 up)")
    return found[0]


# Webhooks and the API server talk over this host's own addresses only; never through a proxy
# from the environment.
_LOCAL = ",".join([LOOPBACK, "localhost", *_host_addresses()])
_NO_PROXY = {"NO_PROXY": _LOCAL, "no_proxy": _LOCAL}


def build(*components: str) -> dict[str, Path]:
    """Run ``tests/e2e/build.sh`` for ``components`` (cached by version: seconds when warm) and
    return ``{component: bin directory}``. Raises ``ControlPlaneError`` with the build's output
    when it fails (no Go, a module the proxy refuses, a compile error)."""
    proc = subprocess.run(["bash", str(BUILD), *components], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD} {' '.join(components)} failed (exit {proc.returncode}):\n"
                                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    dirs = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^([\w.-]+): (?:cached in|built in \d+ s into) (\S+)$", line)
        if m:
            dirs[m.group(1)] = Path(m.group(2))
    missing = [c for c in components if c not in dirs]
    if missing:
        raise ControlPlaneError(f"{BUILD} did not report a bin directory for {missing}:\n{proc.stdout}")
    return dirs


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` (127.0.0.1) that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Process:
    """One started component: its ``Popen`` and log file."""

    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """TERM the process group, KILL it after ``timeout`` seconds; idempotent."""
        if self.popen.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.popen.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def start_process(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> Process:
    """Start ``argv`` with its output in ``workdir/<name>.log``, in its own process group, killed
    if the test process dies."""
    log = workdir / f"{name}.log"
    with open(log, "ab") as fh:  # the child keeps its own descriptor
        popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_die_with_parent,
                                 env={**os.environ, **_NO_PROXY, **(env or {})}, cwd=cwd)
    return Process(name, popen, log)


def wait_until(what: str, check, timeout: float, *, processes: Iterable[Process] = (), interval: float = 0.2) -> Any:
    """Call ``check()`` until it returns a truthy value and return that; raise ``ControlPlaneError``
    naming ``what`` after ``timeout`` seconds, or at once when one of ``processes`` has exited
    (with its log's tail)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        for p in processes:
            if not p.alive():
                raise ControlPlaneError(f"{p.name} exited (code {p.popen.returncode}) while waiting for {what}; "
                                        f"last lines of {p.log}:\n{p.tail()}")
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # a probe that is not answering yet
            last = e
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.log}:\n{p.tail(12)}" for p in processes)
            raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what} "
                                    f"(last error: {last!r})\n{logs}")
        time.sleep(interval)


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, *, user: str, cert: tuple[bytes, bytes] | None = None,
                     token: str | None = None) -> Path:
    """A kubeconfig for ``server`` trusting ``ca_pem``, authenticating with a client certificate
    ``(cert_pem, key_pem)`` or a bearer ``token``."""
    import base64

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    creds: dict[str, str] = {}
    if cert:
        creds = {"client-certificate-data": b64(cert[0]), "client-key-data": b64(cert[1])}
    if token:
        creds = {"token": token}
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
           "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
           "users": [{"name": user, "user": creds}],
           "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}]}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager and kube-scheduler) on free loopback ports.

    ``start()`` returns once ``/readyz`` answers ok and the ``default`` ServiceAccount exists in
    ``default`` (the controller-manager works); ``stop()`` ends every process. ``kubeconfig`` is the
    admin's (client certificate, group ``system:masters``).
    """

    bin_dirs: dict[str, Path]
    workdir: Path
    processes: list[Process] = field(default_factory=list)
    ca: CA = field(default_factory=CA)
    port: int = 0
    kubeconfig: Path = Path()

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def binary(self, name: str) -> str:
        for d in self.bin_dirs.values():
            if (d / name).is_file():
                return str(d / name)
        raise ControlPlaneError(f"no {name} binary in {sorted(map(str, self.bin_dirs.values()))}")

    def start(self, *, controller_manager: bool = True, scheduler: bool = True,
              node_lifecycle: bool = False, audit_policy: dict | None = None) -> ControlPlane:
        """Start every component (see the class docstring). ``node_lifecycle`` turns on the
        controller-manager's node-lifecycle-controller: only for Nodes that something heartbeats
        (kwok in ``tests/e2e/stack.py``); without a kubelet it taints every Node unreachable after
        its 40 s grace period. ``audit_policy`` (an ``audit.k8s.io/v1`` Policy) turns on the API
        server's audit log, one JSON event a line in ``audit_log``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = self.workdir / "pki"
        certs.mkdir(exist_ok=True)
        (certs / "ca.crt").write_bytes(self.ca.pem)
        crt, key = self.ca.issue("kube-apiserver", server_hosts=(LOOPBACK, "localhost", "10.0.0.1", "kubernetes",
                                                                 "kubernetes.default", "kubernetes.default.svc"))
        (certs / "apiserver.crt").write_bytes(crt)
        (certs / "apiserver.key").write_bytes(key)
        sa_key, sa_pub = write_service_account_keys(certs)
        admin = self.ca.issue("e2e-admin", organizations=("system:masters",), client=True)
        (certs / "admin.crt").write_bytes(admin[0])
        (certs / "admin.key").write_bytes(admin[1])

        etcd_port, etcd_peer, self.port = free_port(), free_port(), free_port()
        etcd = start_process("etcd", [
            self.binary("etcd"), f"--data-dir={self.workdir / 'etcd'}", "--name=e2e",
            f"--listen-client-urls=http://{LOOPBACK}:{etcd_port}",
                                      f"--advertise-client-urls=http://{LOOPBACK}:{etcd_port}",
            f"--listen-peer-urls=http://{LOOPBACK}:{etcd_peer}",
                                      f"--initial-advertise-peer-urls=http://{LOOPBACK}:{etcd_peer}",
            f"--initial-cluster=e2e=http://{LOOPBACK}:{etcd_peer}", "--unsafe-no-fsync=true", "--log-level=warn",
            "--quota-backend-bytes=2147483648"], self.workdir)
        self.processes.append(etcd)
        wait_until("etcd /health", lambda: _http_ok(f"http://{LOOPBACK}:{etcd_port}/health"), 60, processes=[etcd])

        audit = []
        if audit_policy is not None:
            (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(audit_policy))
            audit = [f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
                     "--audit-log-format=json", "--audit-log-mode=blocking"]
        apiserver = start_process("kube-apiserver", [
            self.binary("kube-apiserver"), *audit, f"--etcd-servers=http://{LOOPBACK}:{etcd_port}",
            f"--advertise-address={LOOPBACK}", f"--bind-address={LOOPBACK}", f"--secure-port={self.port}",
            f"--cert-dir={certs}", f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}", f"--client-ca-file={certs / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true", "--authorization-mode=RBAC",
            f"--service-account-issuer=https://{LOOPBACK}:{self.port}", f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}", "--endpoint-reconciler-type=none", "--profiling=false",
            # kubectl logs/exec reach a Node's kubelet (kwok's server) at its InternalIP: the
            # Hostname kwok also reports is the Node's name, which resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP",
            # A webhook's (or an APIService's) clientConfig.service is resolved to a random ready
            # endpoint of the Service's EndpointSlices (k8s.io/apiserver pkg/util/proxy
            # ResolveEndpoint), not to its ClusterIP, which nothing routes here without
            # kube-proxy (cmd/kube-apiserver/app/server.go, buildServiceResolver). The other
            # webhooks of this tier are called by url.
            "--enable-aggregator-routing=true", "--v=1"], self.workdir)
        self.processes.append(apiserver)
        ctx = self.ssl_context(certs)
        wait_until("kube-apiserver /readyz", lambda: _http_ok(f"{self.server}/readyz", ctx), 120,
                   processes=[etcd, apiserver])
        self.kubeconfig = write_kubeconfig(self.workdir / "admin.kubeconfig", self.server, self.ca.pem,
                                           user="e2e-admin", cert=admin)
        if controller_manager:
            self.processes.append(start_process("kube-controller-manager", [
                self.binary("kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false", f"--bind-address={LOOPBACK}", "--secure-port=0",
                f"--service-account-private-key-file={sa_key}", f"--root-ca-file={certs / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--controllers=*" if node_lifecycle else "--controllers=*,-node-lifecycle-controller",
                "--concurrent-gc-syncs=5", "--v=1"], self.workdir))
            wait_until("the default ServiceAccount (controller-manager)",
                       lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default",
                                            check=False).returncode == 0,
                       90, processes=self.processes, interval=0.5)
        if scheduler:
            # As kubeadm runs it: user system:kube-scheduler (it writes the ResourceClaims of DRA extended
            # resources, KEP-5004); system:masters stands for the system:kube-scheduler role binding.
            sched = self.user_kubeconfig("system:kube-scheduler", ("system:masters",))
            self.processes.append(start_process("kube-scheduler", [
                self.binary("kube-scheduler"), f"--kubeconfig={sched}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false", f"--bind-address={LOOPBACK}", "--secure-port=0", "--v=1"], self.workdir))
        return self

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (written when started with ``audit_policy``)."""
        return self.workdir / "audit.log"

    def audit_events(self) -> list[dict]:
        """Every event of the audit log so far, in order."""
        if not self.audit_log.is_file():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    def ssl_context(self, certs: Path | None = None) -> ssl.SSLContext:
        """A client TLS context that trusts the CA and presents the admin certificate."""
        certs = certs or self.workdir / "pki"
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        ctx.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
        return ctx

    def stop(self) -> None:
        """Stop every process, the last started first."""
        for p in reversed(self.processes):
            p.stop()

    def check_alive(self) -> None:
        """Raise ``ControlPlaneError`` with its log's tail if a component has exited."""
        for p in self.processes:
            if not p.alive():
                raise ControlPlaneError(f"{p.name} has exited (code {p.popen.returncode}); last lines:\n{p.tail()}")

    def kubectl(self, *args: str, input: str | bytes | None = None, kubeconfig: Path | None = None,
                check: bool = True, timeout: float = 60,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run the built kubectl as a user types it (text in and out; ``env`` adds variables such
        as ``KUBE_EDITOR``). ``check`` raises ``ControlPlaneError`` with stderr on a non-zero exit."""
        if isinstance(input, bytes):
            input = input.decode()
        proc = subprocess.run([self.binary("kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **_NO_PROXY, **(env or {})})
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def get_json(self, *args: str, kubeconfig: Path | None = None) -> dict:
        """``kubectl get ARGS -o json`` as a dict."""
        return json.loads(self.kubectl("get", *args, "-o", "json", kubeconfig=kubeconfig).stdout)

    def apply_objects(self, objects: Iterable[dict], *args: str) -> subprocess.CompletedProcess:
        """``kubectl apply -f -`` of ``objects`` (a List)."""
        return self.kubectl("apply", "-f", "-", *args,
                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))

    def token_kubeconfig(self, namespace: str, service_account: str, name: str | None = None) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/service_account`` with a
        bound token from the TokenRequest API (``kubectl create token``), as a pod would."""
        token = self.kubectl("create", "token", service_account, "-n", namespace, "--duration=12h").stdout.strip()
        return write_kubeconfig(self.workdir / f"{name or service_account}.kubeconfig", self.server, self.ca.pem,
                                user=f"system:serviceaccount:{namespace}:{service_account}", token=token)

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for a human user ``user`` in ``groups`` (a client certificate)."""
        crt = self.ca.issue(user, organizations=groups, client=True)
        # No ':' in the file name: KUBECONFIG is a ':'-separated list of files.
        name = user.replace(":", "_")
        return write_kubeconfig(self.workdir / f"user-{name}.kubeconfig", self.server, self.ca.pem, user=user, cert=crt)


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False
