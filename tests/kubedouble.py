"""A Kubernetes API double for tests: kmock's ``KubernetesEmulator`` over real HTTP on 127.0.0.1.

What it is
    An in-memory Kubernetes API (kmock 0.8, by kopf's author) served by aiohttp on a random port of
    127.0.0.1, running on its own event loop in a background thread, so synchronous callers (the
    official ``kubernetes`` client, the test body) and asynchronous ones (kopf, the state watcher)
    can all talk to it at once without sharing a loop. Nothing is monkey-patched on the client side:
    clients reach it over HTTP exactly as they would reach a kube-apiserver.

What the harness adds to kmock (kmock's gaps)
    - Core ``Namespace`` paths: kmock's ``kmock._internal.parsing.parse_path`` reads
      ``/api/v1/namespaces/NAME`` as "an object inside namespace NAME", so GET/PATCH/DELETE of a
      Namespace fail. ``install_namespace_path_fix()`` wraps that parser (in this process, for the
      test run; the installed package is not edited) so these paths map to the cluster-scoped
      ``namespaces`` resource. It is installed on import and is idempotent.
    - Discovery: every resource taugate touches is declared (``RESOURCES``): core (namespaces,
      nodes, serviceaccounts, persistentvolumeclaims, configmaps, pods, events), RBAC
      (rolebindings, clusterroles), CustomResourceDefinitions (kopf looks them up), Kueue
      ``kueue.x-k8s.io/v1beta2`` (localqueues, clusterqueues, resourceflavors, workloadpriorityclasses, workloads:
      Kueue v0.17's storage version), ``scheduling.k8s.io/v1`` priorityclasses,
      KubeRay ``ray.io/v1`` (rayjobs, rayclusters), ``batch/v1`` jobs (the
      registered workload kinds, ``taugate.kinds.KINDS``), and ``tau.azure.com/v1alpha1``
      (clusters, workspaces, quotarequests, tauruns, profileplacements), ``wgpolicyk8s.io/v1alpha2`` PolicyReports and
      ClusterPolicyReports (the audit's), each with its kind and scope, and
      ``status`` as a subresource for the custom resources.
    - Shutdown drops open connections at once (watch streams never end by themselves), which
      also makes leaving the ``with`` block a realistic API-server outage for clients.

Known kmock behaviour to design tests around
    No resourceVersion conflicts, no PUT (use PATCH), label/field selectors are ignored (filter
    client-side), ``/status`` is not separated from the main object, create answers 200, object
    metadata gets no uid/resourceVersion/creationTimestamp, and every request gets slower as the
    number of stored objects grows (6 ms empty, ~47 ms at 250 objects): keep fixtures small.

Usage::

    from tests.kubedouble import KubeDouble

    with KubeDouble() as kube:                       # or the ``kube_double`` pytest fixture below
        api = kube.api_client()                      # kubernetes.client.ApiClient
        kube.apply(yaml_objects)                     # create objects through the HTTP API
        with kube.operator(settings, resync_seconds=1):   # the taugate kopf operator, in process
            kube.wait_for(lambda: ...)
        kube.writes()                                # write requests seen so far (for assertions)
        kube.request_log(since)                      # (method, path, query) of every request

``KubeDouble.operator()`` runs ``controllers.operator.run_operator`` on its own event loop in a
thread with test-friendly kopf settings (standalone, no peering, no Kubernetes events posted,
no CRD scanning, short queueing and connect timeouts, 0.05 s debounce, 30 s resync) and stops it
on exit; extra keyword arguments go to ``controllers.operator.OperatorOptions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import kmock
import kubernetes.client
import pytest
from kmock._internal import parsing as _kmock_parsing

from taugate.kinds import KINDS

# ---------------------------------------------------------------------------------------------
# The Namespace path fix (a wrapper around kmock's path parser; the package itself is untouched).

_ORIGINAL_PARSE_PATH = getattr(_kmock_parsing.parse_path, "__wrapped_original__", _kmock_parsing.parse_path)
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def _parse_path_with_namespaces(path: str) -> _kmock_parsing.ParsedPath:
    """kmock's parser, except that ``/api/v1/namespaces[/NAME[/status|/finalize]]`` addresses the
    cluster-scoped ``namespaces`` resource (Kubernetes core API rule: Namespace is cluster-scoped;
    ``/api/v1/namespaces/NAME/<plural>`` still addresses objects inside the namespace)."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 3 and parts[0] == "api" and parts[2] == "namespaces":
        rest = parts[3:]
        if len(rest) == 0:
            return _kmock_parsing.ParsedPath("", parts[1], "namespaces", None, None, None)
        if len(rest) == 1:
            return _kmock_parsing.ParsedPath("", parts[1], "namespaces", None, rest[0], None)
        if len(rest) == 2 and rest[1] in _NAMESPACE_SUBRESOURCES:
            return _kmock_parsing.ParsedPath("", parts[1], "namespaces", None, rest[0], rest[1])
    return _ORIGINAL_PARSE_PATH(path)


_parse_path_with_namespaces.__wrapped_original__ = _ORIGINAL_PARSE_PATH  # type: ignore[attr-defined]


def install_namespace_path_fix() -> None:
    """Wrap ``kmock._internal.parsing.parse_path`` (idempotent; kmock's request parser looks the
    function up on the module at every request, so the wrapper takes effect immediately)."""
    _kmock_parsing.parse_path = _parse_path_with_namespaces


install_namespace_path_fix()

# ---------------------------------------------------------------------------------------------
# Discovery: the resources taugate and its tests use, as (group/version/plural, kind, namespaced).

DRA_RESOURCES: tuple[tuple[str, str, bool], ...] = (
    ("resource.k8s.io/v1/deviceclasses", "DeviceClass", False),  # Dynamic Resource Allocation (taugate.devices)
    ("resource.k8s.io/v1/resourceclaimtemplates", "ResourceClaimTemplate", True),
    ("resource.k8s.io/v1/resourceclaims", "ResourceClaim", True),
)
"""What a cluster that serves resource.k8s.io/v1 (Kubernetes 1.34 and later) serves of it."""
RESOURCES: tuple[tuple[str, str, bool], ...] = tuple(dict.fromkeys((  # once each (a Pod is also a workload kind)
    ("v1/namespaces", "Namespace", False),
    ("v1/nodes", "Node", False),
    ("v1/serviceaccounts", "ServiceAccount", True),
    ("v1/persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("v1/configmaps", "ConfigMap", True),
    ("v1/pods", "Pod", True),
    ("v1/events", "Event", True),
    ("apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition", False),
    ("rbac.authorization.k8s.io/v1/rolebindings", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1/clusterroles", "ClusterRole", False),
    ("kueue.x-k8s.io/v1beta2/localqueues", "LocalQueue", True),
    ("kueue.x-k8s.io/v1beta2/clusterqueues", "ClusterQueue", False),
    ("kueue.x-k8s.io/v1beta2/resourceflavors", "ResourceFlavor", False),
    ("kueue.x-k8s.io/v1beta2/workloadpriorityclasses", "WorkloadPriorityClass", False),
    ("kueue.x-k8s.io/v1beta2/workloads", "Workload", True),
    ("scheduling.k8s.io/v1/priorityclasses", "PriorityClass", False),  # examples/cluster.yaml's pod priority
    ("apps/v1/replicasets", "ReplicaSet", True),  # the recorder follows a Deployment's pods through them
    *((f"{k.api_version}/{k.resource}", k.kind, True) for k in KINDS),  # the workload kinds (taugate.kinds)
    ("tau.azure.com/v1alpha1/clusters", "TauCluster", False),
    ("tau.azure.com/v1alpha1/workspaces", "TauWorkspace", True),
    ("tau.azure.com/v1alpha1/quotarequests", "TauQuotaRequest", True),
    ("tau.azure.com/v1alpha1/tauruns", "TauRun", True),
    ("tau.azure.com/v1alpha1/profileplacements", "TauProfilePlacement", False),  # the API server policy's parameter
    ("wgpolicyk8s.io/v1alpha2/policyreports", "PolicyReport", True),  # the audit's reports
    ("wgpolicyk8s.io/v1alpha2/clusterpolicyreports", "ClusterPolicyReport", False),
    *DRA_RESOURCES,
)))
_VERBS = ("list", "watch", "get", "create", "patch", "delete")

# plural by (apiVersion, kind), for apply()/delete() of plain manifests.
_PLURALS: dict[tuple[str, str], tuple[str, bool]] = {}
for _key, _kind, _namespaced in RESOURCES:
    _gv, _plural = _key.rsplit("/", 1)
    _PLURALS[(_gv, _kind)] = (_plural, _namespaced)


def _path(api_version: str, plural: str, namespaced: bool, namespace: str | None, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        base += f"/namespaces/{namespace or 'default'}"
    base += f"/{plural}"
    return base + (f"/{name}" if name else "")


class KubeDouble:
    """kmock's Kubernetes emulator on 127.0.0.1 in a background thread (context manager).

    ``url``: the API server URL; ``configuration``: a ``kubernetes.client.Configuration`` for it;
    ``emulator``: the kmock handler (its request log and object store; touch it only through
    ``call()`` since it lives on another thread's event loop).
    """

    def __init__(self, resources: Iterable[tuple[str, str, bool]] = RESOURCES) -> None:
        self._resources = tuple(resources)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.emulator: kmock.KubernetesEmulator | None = None
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> KubeDouble:
        self._thread = threading.Thread(target=self._run, name="kmock-apiserver", daemon=True)
        self._thread.start()
        if not self._started.wait(10) or self._error is not None:
            raise RuntimeError(f"the kmock API double did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to __enter__
            self._error = e
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator, host="127.0.0.1") as server:
            for key, kind, namespaced in self._resources:
                sub = () if not key.startswith("tau.azure.com/") else ("status",)
                emulator.resources[key] = kmock.ResourceInfo(
                    kind=kind, namespaced=namespaced, singular=kind.lower(), verbs=_VERBS, subresources=sub)
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._started.set()
            await self._stop.wait()
            # Drop open connections (watch streams never end by themselves) so that clients see
            # the API server go away at once, as in an outage, and shutdown does not wait on them.
            runner = getattr(server.server, "runner", None)
            if runner is not None and runner.server is not None:
                await runner.server.shutdown(0.05)  # (0 would mean "no timeout" to aiohttp)

    # -- clients ---------------------------------------------------------------------------
    @property
    def configuration(self) -> kubernetes.client.Configuration:
        """A fresh client Configuration pointing at the double (plain HTTP, no auth)."""
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        cfg.verify_ssl = False
        return cfg

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new official ``kubernetes.client.ApiClient`` for the double (close it when done)."""
        return kubernetes.client.ApiClient(self.configuration)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the emulator's event loop thread and return its result."""
        assert self._loop is not None

        async def _call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(_call(), self._loop).result(10)

    # -- object helpers through the HTTP API -----------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        with self.api_client() as api:
            headers = {"Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = content_type
            resp = api.call_api(method, self.url + path, header_params=headers, body=body)
            data = resp.read()
            if resp.status >= 400:
                raise kubernetes.client.ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
            import json
            return json.loads(data) if data else None

    def apply(self, objects: Iterable[dict]) -> None:
        """Create each object through the HTTP API (POST), as ``kubectl create`` would."""
        for obj in objects:
            plural, namespaced = _PLURALS[(obj["apiVersion"], obj["kind"])]
            ns = (obj.get("metadata") or {}).get("namespace")
            self._request("POST", _path(obj["apiVersion"], plural, namespaced, ns), copy.deepcopy(obj))

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The stored object, or None when it does not exist (HTTP GET)."""
        plural, namespaced = _PLURALS[(api_version, kind)]
        try:
            return self._request("GET", _path(api_version, plural, namespaced, namespace, name))
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict]:
        """Every stored object of a kind (HTTP GET of the collection)."""
        plural, namespaced = _PLURALS[(api_version, kind)]
        path = _path(api_version, plural, namespaced and namespace is not None, namespace)
        return list((self._request("GET", path) or {}).get("items") or [])

    def patch(self, api_version: str, kind: str, name: str, patch: dict, namespace: str | None = None) -> dict:
        """JSON merge patch (RFC 7386) of one object (HTTP PATCH)."""
        plural, namespaced = _PLURALS[(api_version, kind)]
        return self._request("PATCH", _path(api_version, plural, namespaced, namespace, name), patch,
                             "application/merge-patch+json")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete one object (HTTP DELETE); with finalizers it is only marked for deletion."""
        plural, namespaced = _PLURALS[(api_version, kind)]
        self._request("DELETE", _path(api_version, plural, namespaced, namespace, name))

    # -- request log -------------------------------------------------------------------------
    def request_count(self) -> int:
        """How many requests the double has served so far."""
        assert self.emulator is not None
        return self.call(lambda: len(list(self.emulator)))

    def request_log(self, since: int = 0) -> list[tuple[str, str, dict]]:
        """(method, path, query parameters) of every request from request ``since`` on."""
        assert self.emulator is not None
        return self.call(lambda: [(str(getattr(r.method, "value", r.method)).upper(), r.url.path, dict(r.params))
                                  for i, r in enumerate(self.emulator) if i >= since])

    def writes(self, since: int = 0) -> list[tuple[str, str]]:
        """(method, path) of every write request (POST, PATCH, PUT, DELETE) from request ``since``."""
        assert self.emulator is not None

        def _collect() -> list[tuple[str, str]]:
            out = []
            for i, r in enumerate(self.emulator):
                method = str(getattr(r.method, "value", r.method)).upper()
                if i >= since and method in {"POST", "PATCH", "PUT", "DELETE"}:
                    out.append((method, r.url.path))
            return out

        return self.call(_collect)

    # -- waiting -------------------------------------------------------------------------------
    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
                 message: str = "condition") -> Any:
        """Poll ``predicate`` until it returns a truthy value (returned); AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {message}; last value: {last!r}")

    # -- the operator, in process ----------------------------------------------------------------
    @contextlib.contextmanager
    def operator(self, settings: Any = None, **options: Any) -> Iterator[OperatorThread]:
        """Run the taugate kopf operator against the double in a thread (stopped on exit).

        ``options`` go to ``controllers.operator.OperatorOptions`` (e.g. ``resync_seconds``,
        ``debounce_seconds``); kopf runs standalone (no peering) without posting events and
        without CRD scanning.
        """
        runner = OperatorThread(self.configuration, settings, options)
        runner.start()
        try:
            yield runner
        finally:
            runner.stop()


class OperatorThread:
    """``controllers.operator.run_operator`` on its own event loop in a daemon thread."""

    def __init__(self, configuration: kubernetes.client.Configuration, settings: Any, options: dict) -> None:
        from taugate.controllers.operator import OperatorOptions
        from taugate.settings import Settings

        self.configuration = configuration
        self.settings = settings or Settings()
        defaults = dict(resync_seconds=30.0, debounce_seconds=0.05, test_mode=True)
        defaults.update(options)
        self.options = OperatorOptions(**defaults)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taugate-operator", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        from taugate.controllers.operator import run_operator
        try:
            asyncio.run(run_operator(self.configuration, self.settings, self.options,
                                     stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as e:  # surfaced by start()/stop()
            self.error = e
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("the taugate operator did not become ready within 15 s")
        if self.error is not None:
            raise RuntimeError(f"the taugate operator failed to start: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        if self._thread.is_alive():
            raise RuntimeError("the taugate operator did not stop within 15 s")


@pytest.fixture
def kube_double() -> Iterator[KubeDouble]:
    """A fresh API double per test (import it into a conftest: ``from tests.kubedouble import kube_double``)."""
    with KubeDouble() as kd:
        yield kd
