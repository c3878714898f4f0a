"""``taugate serve --in-cluster``: the server reads cluster state from API watches (the
controllers' watch-based provider, wired in by the CLI) instead of a snapshot file; here the API
is kmock's Kubernetes double over HTTP, reached through a kubeconfig."""

from __future__ import annotations

import asyncio

import yaml

from tests.kubedouble import KubeDouble
from tests.server.conftest import EXAMPLE_CLUSTER
from tests.server.https import AdmissionClient, admission_review, apply, check_response, workload_request
from tests.server.process import serving


async def test_serve_in_cluster_becomes_ready_from_watches_and_mutates_with_live_state(tmp_path, cert_dir, rayjob):
    with KubeDouble() as kube:
        kube.apply(yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": kube.url}}],
            "users": [{"name": "taugate", "user": {"token": "t"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "taugate"}}]}))
        async with serving("--in-cluster", "--kubeconfig", str(kubeconfig), "--cert-dir", str(cert_dir),
                           "--port", "0") as (_, port, _):
            client = AdmissionClient(port, cert_dir / "ca.crt")
            try:
                for _ in range(100):  # ready once every kind is listed and the first state built
                    if (await client.get("/readyz")).status == 200:
                        break
                    await asyncio.sleep(0.1)
                assert (await client.get("/readyz")).status == 200
                req = workload_request(rayjob)
                resp = check_response((await client.post("/mutate", admission_review(req))).body, req["uid"])
                assert apply(rayjob, resp)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision-queue"
                # A namespace with no TauWorkspace in the API gets no change.
                other = workload_request(dict(rayjob, metadata={**rayjob["metadata"], "namespace": "scratch"}),
                                         namespace="scratch")
                resp = check_response((await client.post("/mutate", admission_review(other))).body, other["uid"])
                assert resp == {"uid": other["uid"], "allowed": True}
            finally:
                await client.close()
