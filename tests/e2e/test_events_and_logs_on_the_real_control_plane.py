"""Logs and Events as an operator of the platform reads them, on the real control plane: the chart's
``taugate serve`` and ``taugate operator`` (JSON logs at INFO, the chart's defaults), kubectl as a
researcher.

- An UPDATE taugate undoes (``kubectl label rayjob/x tau.azure.com/run-id-``) prints the Warning,
  and the workload gets an Event (``kubectl get events``, ``kubectl describe``) from ``taugate``;
  the webhook logs it once, and a denied create once, although the API server called two webhooks.

The operator's log rate with heartbeating kwok nodes is measured on the whole stack
(``test_operator_logs_scale_with_events.py``).
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.workloads import WORKSPACE, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
NINE_GPUS = yaml.safe_load((REPO / "examples" / "rayjob-nine-gpus.yaml").read_text())
RUN_ID = "tau.azure.com/run-id"


def _json_lines(path, start: int = 0) -> list[dict]:
    """The JSON log records written to ``path`` from byte ``start`` on (other lines are the
    commands' own start-up prints)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def researcher(platform):
    kubeconfig = platform.cp.user_kubeconfig("alice", ("vision-researchers",))

    def kubectl(*args: str, **kw):
        return platform.cp.kubectl(*args, kubeconfig=kubeconfig, **kw)
    return kubectl


def test_a_label_taugate_restores_prints_the_warning_and_leaves_an_event_on_the_workload(platform, researcher):
    researcher("create", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="events-demo")))
    out = researcher("label", "-n", WORKSPACE, "rayjob/events-demo", f"{RUN_ID}-", check=False)
    assert out.returncode == 0 and "labeled" in out.stdout, out
    assert f'Warning: taugate restored metadata.labels["{RUN_ID}"]=' in out.stderr, out.stderr

    def restored_event():
        got = platform.cp.get_json("events", "-n", WORKSPACE, "--field-selector",
                                   "involvedObject.name=events-demo,reason=Restored")
        return got["items"]
    [event] = platform.wait_for("taugate's Restored Event on rayjob/events-demo", restored_event, 30)
    uid = platform.cp.get_json("rayjob", "events-demo", "-n", WORKSPACE)["metadata"]["uid"]
    assert event["type"] == "Warning" and event["reportingComponent"] == "taugate"
    assert event["involvedObject"]["uid"] == uid and event["involvedObject"]["kind"] == "RayJob"
    assert event["message"].startswith(f'update by alice: taugate restored metadata.labels["{RUN_ID}"]=')
    described = researcher("describe", "-n", WORKSPACE, "rayjob/events-demo").stdout
    events_section = described.split("Events:", 1)[1]
    assert "Warning  Restored" in events_section and "taugate" in events_section, events_section
    print(f"\nkubectl describe rayjob/events-demo, Events:{events_section}")

    warned = [r for r in _json_lines(platform.webhook.log)
              if r.get("decision") == "warned" and r.get("object", {}).get("name") == "events-demo"]
    assert len(warned) == 1, warned
    [line] = warned
    assert (line["level"], line["logger"], line["path"], line["operation"], line["user"]) == (
        "INFO", "taugate.webhook.decisions", "/mutate", "UPDATE", "alice")
    assert line["object"] == {"kind": "RayJob", "namespace": WORKSPACE, "name": "events-demo"}
    assert line["policies"] == ["taugate"]


def test_a_denied_create_is_logged_once_by_the_webhook_that_denied_it(platform, researcher):
    out = researcher("create", "-f", "-", input=json.dumps(into_workspace(NINE_GPUS, name="nine-logged")),
                     check=False)
    assert out.returncode != 0 and "denied the request" in out.stderr, out
    denied = [r for r in _json_lines(platform.webhook.log)
              if r.get("decision") == "denied" and r.get("object", {}).get("name") == "nine-logged"]
    assert len(denied) == 1, denied
    [line] = denied
    assert (line["operation"], line["user"], line["object"]["kind"]) == ("CREATE", "alice", "RayJob")
    assert line["policies"] and all(isinstance(p, str) for p in line["policies"])
    assert any('limits["nvidia.com/gpu"]' in p for p in line["problems"]), line["problems"]
