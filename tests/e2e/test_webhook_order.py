"""Webhook order and reinvocation on the real API server: a second mutating webhook that behaves
like Kueue's (it sets ``suspend`` and reads the queue label), registered to run before and then
after taugate's, gives the same stored object; taugate's reinvocation changes nothing."""

from __future__ import annotations

import base64
import json
import sys

import yaml

from tests.e2e.controlplane import free_port, start_process
from tests.e2e.queue_webhook import SAW
from tests.e2e.workloads import RUN_ID, WORKSPACE, WORKSPACE_QUEUE, admitted_problems, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())


def _configuration(name: str, port: int, ca_pem: bytes) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{"name": "kueue-like.e2e.example", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate",
                                           "caBundle": base64.b64encode(ca_pem).decode()},
                          "rules": [{"apiGroups": ["ray.io"], "apiVersions": ["v1"], "resources": ["rayjobs"],
                                     "operations": ["CREATE"]}],
                          "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": WORKSPACE}},
                          "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded", "timeoutSeconds": 5}]}


def _normalised(obj: dict) -> dict:
    """The stored object without what differs between two creates (names, run-ids, server fields)."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    for k in ("name", "uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        meta.pop(k, None)
    meta["labels"].pop(RUN_ID)
    # the admission record names the object and its run-id, and is signed over both
    record = json.loads(meta["annotations"]["tau.azure.com/admission"])
    meta["annotations"]["tau.azure.com/admission"] = {k: v for k, v in record.items()
                                                      if k not in ("object", "runId", "signature")}
    spec = obj["spec"]["rayClusterSpec"]
    submitter = [obj["spec"]["submitterPodTemplate"]] if "submitterPodTemplate" in obj["spec"] else []
    for t in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]] + submitter:
        t["metadata"]["labels"].pop(RUN_ID)
    obj.pop("status", None)
    return obj


def test_a_kueue_like_webhook_before_or_after_taugates_gives_the_same_stored_object(platform, tmp_path):
    cp = platform.cp
    crt, key = cp.ca.issue("kueue-like", server_hosts=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(crt)
    (tmp_path / "tls.key").write_bytes(key)
    stored, calls = {}, {}
    for position, config_name in (("before", "a-kueue-like"), ("after", "zz-kueue-like")):
        assert (config_name < "taugate") == (position == "before")  # configurations run in name order
        port, log = free_port(), tmp_path / f"{position}.jsonl"
        log.touch()
        proc = start_process(f"kueue-like-{position}", [sys.executable, "-m", "tests.e2e.queue_webhook",
                                                        f"--port={port}",
                                                        f"--cert={tmp_path / 'tls.crt'}",
                                                        f"--key={tmp_path / 'tls.key'}",
                                                        f"--log={log}"], tmp_path, cwd=REPO)
        try:
            cp.apply_objects([_configuration(config_name, port, cp.ca.pem)])
            probe = json.dumps(into_workspace(EXAMPLE, name="order-probe"))
            def annotations(probe: str = probe) -> dict:
                created = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe)
                return json.loads(created.stdout)["metadata"].get("annotations") or {}

            platform.wait_for(f"the {position} webhook to take effect", lambda: SAW in annotations(), 60)
            log.write_text("")
            name = f"order-{position}"
            cp.kubectl("create", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name=name)))
            obj = cp.get_json("rayjob", name, "-n", WORKSPACE)
            calls[position] = [json.loads(line) for line in log.read_text().splitlines()]
            stored[position] = obj
        finally:
            cp.kubectl("delete", "mutatingwebhookconfiguration", config_name, "--ignore-not-found")
            proc.stop()
        assert admitted_problems(obj) == []
        assert obj["metadata"]["annotations"][SAW] == WORKSPACE_QUEUE
    # Before taugate, the first call sees no queue label yet; the API server reinvokes it after
    # taugate's patch added one. After taugate, the one call sees the label at once.
    assert [c["queue"] for c in calls["before"]] == [None, WORKSPACE_QUEUE]
    assert [c["queue"] for c in calls["after"]] == [WORKSPACE_QUEUE]
    assert _normalised(stored["before"]) == _normalised(stored["after"])
