from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from taugate.certs import store
from taugate.certs.serving import ServingTLS
from taugate.webhook import lifecycle
from taugate.webhook import server as srv
from taugate.webhook.providers import SnapshotStateProvider
from tests.paths import DATA, EXAMPLE_CLUSTER, EXAMPLE_RAYJOB, K8S_API, REPO  # noqa: F401  (imported by the tests here)
from tests.server.https import AdmissionClient

K8S_DOCS = DATA / "admission" / "kubernetes-docs"
"""AdmissionReviews shaped like the Kubernetes documentation's examples (project-written)."""
APISERVER_REQUESTS = DATA / "admission" / "apiserver-requests"
"""AdmissionRequests of non-workload kinds, in kube-apiserver's shape (project-written)."""
K8S_API_TESTDATA = K8S_API / "testdata" / "HEAD"
"""k8s.io/api's round-trip fixtures: every field of each type set (``admission.k8s.io.v1.AdmissionReview.json``)."""


@pytest.fixture
def cert_dir(tmp_path) -> Path:
    d = tmp_path / "tls"
    store.generate(d, service="taugate-webhook", namespace="taugate-system")
    return d


@pytest.fixture
def rayjob() -> dict:
    """The example RayJob in workspace namespace ``vision`` as a pipeline sends it: generateName
    (as ``kubectl create`` and client libraries allow), no labels map, 4 GPU workers."""
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    assert obj["metadata"]["namespace"] == "vision" and "labels" not in obj["metadata"]
    obj["metadata"]["generateName"] = obj["metadata"].pop("name") + "-"
    return obj


class Harness:
    """A running admission server over real HTTPS and a client that trusts only its CA."""

    def __init__(self, server: srv.AdmissionServer, running: lifecycle.RunningServer, tls: ServingTLS,
                 client: AdmissionClient):
        self.server, self.running, self.tls, self.client = server, running, tls, client
        self.post, self.get = client.post, client.get

    async def metrics(self) -> str:
        r = await self.get("/metrics")
        assert r.status == 200
        return r.text


@pytest_asyncio.fixture
async def start_server(cert_dir, settings, engine):
    """``await start_server(**AdmissionServer kwargs)`` -> Harness; everything is stopped after the test."""
    started: list[Harness] = []

    async def start(*, provider=None, settings_=None, engine_=engine, **kw) -> Harness:
        provider = provider or SnapshotStateProvider(EXAMPLE_CLUSTER, settings_ or settings)
        server = srv.AdmissionServer(provider, settings_ or settings, engine_, **kw)
        tls = ServingTLS(cert_dir)
        running = await lifecycle.start(server, tls, host="127.0.0.1", port=0)
        h = Harness(server, running, tls, AdmissionClient(running.port, cert_dir / "ca.crt"))
        started.append(h)
        return h

    yield start
    for h in started:
        await h.client.close()
        await h.running.stop()
        h.tls.close()


@pytest_asyncio.fixture
async def gate(start_server) -> Harness:
    """The server as ``taugate serve --cluster examples/cluster.yaml`` runs it, bundled policies loaded."""
    return await start_server()
