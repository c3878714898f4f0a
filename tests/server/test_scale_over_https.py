"""A ``scale`` review over HTTPS (``webhook/scale.py`` through ``webhook.server``): the server
reads the stored parent through its state provider in the thread pool, never on the event loop,
and a server fed by a snapshot (no workloads to read) refuses the scale, naming the fix."""

from __future__ import annotations

import threading

from taugate.webhook.providers import SnapshotStateProvider
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import gpu_deployment
from tests.admission.test_scale_is_judged_as_an_update_of_replicas import scale_request, stored
from tests.server.conftest import EXAMPLE_CLUSTER
from tests.server.https import admission_review, check_response


class ReadingProvider(SnapshotStateProvider):
    """The example snapshot, plus ``read_object`` serving one stored object and noting the thread."""

    def __init__(self, obj: dict, settings):
        super().__init__(EXAMPLE_CLUSTER, settings)
        self.obj, self.threads = obj, []

    def read_object(self, res, namespace: str, name: str) -> dict | None:
        self.threads.append(threading.current_thread().name)
        return self.obj if (namespace, name) == (self.obj["metadata"]["namespace"], self.obj["metadata"]["name"]) \
            else None


async def test_a_scale_past_the_profile_is_refused_and_the_parent_is_read_off_the_event_loop(
        start_server, settings, engine, example_state):
    parent = stored(gpu_deployment(replicas=2), example_state, settings, engine)
    provider = ReadingProvider(parent, settings)
    h = await start_server(provider=provider)
    for replicas, allowed in ((3, True), (64, False)):
        req = scale_request(parent, replicas)
        resp = check_response((await h.client.post("/validate", admission_review(req))).body, req["uid"])
        assert resp["allowed"] is allowed, resp
    assert "[workers-match-profile] spec.replicas: asks for 64 workers" in resp["status"]["message"]
    assert len(provider.threads) == 2 and all(t.startswith("taugate-admit") for t in provider.threads)


async def test_a_snapshot_fed_server_refuses_a_scale_it_cannot_judge(gate, settings, engine, example_state):
    parent = stored(gpu_deployment(replicas=2), example_state, settings, engine)
    req = scale_request(parent, 3)
    resp = check_response((await gate.client.post("/validate", admission_review(req))).body, req["uid"])
    assert resp["allowed"] is False and "snapshot" in resp["status"]["message"]
