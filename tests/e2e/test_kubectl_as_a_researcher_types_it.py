"""What a researcher sees through kubectl, against the real API server: the project's example
GPU RayJob created every way kubectl creates things, edited every way kubectl edits them, and
the denials and warnings as kubectl prints them."""

from __future__ import annotations

import base64
import json

import yaml

from taugate import record
from tests.e2e.workloads import GPU_CLASS_SELECTOR, QUEUE, RUN_ID, WORKSPACE, admitted_problems, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
ADMISSION = "tau.azure.com/admission"
NINE_GPUS = yaml.safe_load((REPO / "examples" / "rayjob-nine-gpus.yaml").read_text())


def _rayjob(name: str) -> dict:
    return into_workspace(EXAMPLE, name=name)


def _run_ids(obj: dict) -> set[str]:
    spec = obj["spec"]["rayClusterSpec"]
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    templates += [obj["spec"]["submitterPodTemplate"]] if "submitterPodTemplate" in obj["spec"] else []
    return {obj["metadata"]["labels"][RUN_ID]} | {t["metadata"]["labels"][RUN_ID] for t in templates}


def test_kubectl_create_with_generate_name_gets_a_name_a_run_id_and_the_placement(platform):
    cp = platform.cp
    obj = into_workspace(EXAMPLE)
    obj["metadata"]["generateName"] = obj["metadata"].pop("name") + "-"
    out = cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
    created = json.loads(out.stdout)
    assert created["metadata"]["name"].startswith(obj["metadata"]["generateName"])
    stored = cp.get_json("rayjob", created["metadata"]["name"], "-n", WORKSPACE)
    assert admitted_problems(stored) == []
    assert len(_run_ids(stored)) == 1
    workers = stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert workers["nodeSelector"][GPU_CLASS_SELECTOR] == "h100"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in workers["tolerations"]
    head = stored["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert GPU_CLASS_SELECTOR not in (head.get("nodeSelector") or {})


def test_a_server_side_dry_run_shows_the_admitted_object_and_stores_nothing(platform):
    cp = platform.cp
    obj = _rayjob("dry-run")
    shown = json.loads(cp.kubectl("apply", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(obj)).stdout)
    assert admitted_problems(shown) == []
    assert cp.kubectl("get", "rayjob", "dry-run", "-n", WORKSPACE, check=False).returncode != 0
    # The stored object, once created for real, carries the same taugate fields (a new run-id).
    cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    stored = cp.get_json("rayjob", "dry-run", "-n", WORKSPACE)
    shown, stored = _without_run_ids(shown), _without_run_ids(stored)
    assert shown["metadata"]["labels"] == stored["metadata"]["labels"]
    assert shown["spec"] == stored["spec"]


def _without_run_ids(obj: dict) -> dict:
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["labels"].pop(RUN_ID, None)
    spec = obj["spec"]["rayClusterSpec"]
    submitter = [obj["spec"]["submitterPodTemplate"]] if "submitterPodTemplate" in obj["spec"] else []
    for t in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]] + submitter:
        t["metadata"]["labels"].pop(RUN_ID, None)
    return obj


def test_server_side_apply_is_admitted_like_client_side_apply_and_reapplies_without_a_conflict(platform):
    cp = platform.cp
    obj = _rayjob("server-side")
    cp.kubectl("apply", "--server-side", "--field-manager=researcher", "-f", "-", input=json.dumps(obj))
    stored = cp.get_json("rayjob", "server-side", "-n", WORKSPACE)
    assert admitted_problems(stored) == []
    run_id = stored["metadata"]["labels"][RUN_ID]
    # The same apply again: the researcher's manager owns only their fields, taugate's edits are
    # not theirs to conflict with, and the run-id stays.
    obj["metadata"].setdefault("labels", {})["team.example/stage"] = "two"
    cp.kubectl("apply", "--server-side", "--field-manager=researcher", "-f", "-", input=json.dumps(obj))
    again = cp.get_json("rayjob", "server-side", "-n", WORKSPACE)
    assert again["metadata"]["labels"][RUN_ID] == run_id
    assert admitted_problems(again) == []


def test_kubectl_edit_in_an_editor_keeps_the_run_id_and_the_placement(platform):
    cp = platform.cp
    cp.kubectl("apply", "-f", "-", input=json.dumps(_rayjob("in-editor")))
    run_id = cp.get_json("rayjob", "in-editor", "-n", WORKSPACE)["metadata"]["labels"][RUN_ID]
    # The editor kubectl starts on the object's YAML (here sed, changing the epochs); kubectl
    # sends the whole edited object back through both webhooks.
    editor = "sed -i -e 's/--epochs 10/--epochs 12/'"
    out = cp.kubectl("edit", "rayjob", "in-editor", "-n", WORKSPACE, env={"KUBE_EDITOR": editor, "EDITOR": editor})
    assert "edited" in out.stdout, out.stdout + out.stderr
    edited = cp.get_json("rayjob", "in-editor", "-n", WORKSPACE)
    assert "--epochs 12" in edited["spec"]["entrypoint"]
    assert _run_ids(edited) == {run_id}
    assert admitted_problems(edited) == []


def test_kubectl_label_and_a_full_replace_keep_the_run_id(platform):
    cp = platform.cp
    cp.kubectl("apply", "-f", "-", input=json.dumps(_rayjob("edited")))
    stored = cp.get_json("rayjob", "edited", "-n", WORKSPACE)
    run_id = stored["metadata"]["labels"][RUN_ID]
    cp.kubectl("label", "rayjob", "edited", "-n", WORKSPACE, "team.example/owner=alice")
    labelled = cp.get_json("rayjob", "edited", "-n", WORKSPACE)
    assert labelled["metadata"]["labels"]["team.example/owner"] == "alice"
    assert _run_ids(labelled) == {run_id}
    # `kubectl edit` sends the whole edited object back (a PUT): the same as `kubectl replace`.
    labelled["spec"]["entrypoint"] = labelled["spec"]["entrypoint"] + " --epochs 11"
    cp.kubectl("replace", "-f", "-", input=json.dumps(labelled))
    replaced = cp.get_json("rayjob", "edited", "-n", WORKSPACE)
    assert replaced["spec"]["entrypoint"].endswith("--epochs 11")
    assert _run_ids(replaced) == {run_id}
    assert admitted_problems(replaced) == []


def test_nine_gpus_per_worker_is_refused_with_the_field_what_was_asked_what_is_allowed_and_the_fix(platform):
    cp = platform.cp
    obj = into_workspace(NINE_GPUS, name="nine-gpus")
    out = cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0
    field = 'spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert "admission webhook" in out.stderr and "denied the request" in out.stderr
    assert field in out.stderr
    assert "asks for 9 GPUs per pod" in out.stderr
    assert "allowed: at most 8 GPUs per pod" in out.stderr
    assert "fix:" in out.stderr
    assert cp.kubectl("get", "rayjob", "nine-gpus", "-n", WORKSPACE, check=False).returncode != 0


def test_another_teams_queue_is_refused_naming_the_queues_this_workspace_may_use(platform):
    cp = platform.cp
    obj = _rayjob("other-queue")
    obj["metadata"].setdefault("labels", {})[QUEUE] = "nlp-queue"
    out = cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0
    assert f'metadata.labels["{QUEUE}"]' in out.stderr
    assert "nlp-queue" in out.stderr and "allowed: vision-queue" in out.stderr
    assert "fix:" in out.stderr


def test_another_gpu_class_than_the_profiles_is_refused(platform):
    cp = platform.cp
    obj = _rayjob("other-class")
    worker = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["nodeSelector"] = {GPU_CLASS_SELECTOR: "a100"}
    out = cp.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0
    assert "a100" in out.stderr and "h100" in out.stderr
    assert "spec.rayClusterSpec.workerGroupSpecs[0].template.spec" in out.stderr
    assert "fix:" in out.stderr


def test_a_warn_mode_policy_is_printed_by_kubectl_as_a_warning_and_the_object_is_stored(platform):
    cp = platform.cp
    obj = _rayjob("gpu-head")
    head = obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["requests"]["nvidia.com/gpu"] = "1"
    head["resources"]["limits"]["nvidia.com/gpu"] = "1"
    out = cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
    assert "Warning:" in out.stderr and "head-without-gpu" in out.stderr, out.stderr
    assert "the Ray head asks for 1 GPU" in out.stderr
    assert cp.get_json("rayjob", "gpu-head", "-n", WORKSPACE)["metadata"]["labels"][RUN_ID]


def test_a_researchers_raycluster_claiming_a_rayjob_owner_is_queued_as_top_level(platform):
    """An ownerReference a researcher writes makes no child: only the owning controller's
    creates do (webhook.trustedControllers)."""
    cp = platform.cp
    researcher = cp.user_kubeconfig("mallory", ("vision-researchers",))
    parent = cp.get_json("rayjob", "edited", "-n", WORKSPACE) if cp.kubectl(
        "get", "rayjob", "edited", "-n", WORKSPACE, check=False).returncode == 0 else None
    if parent is None:
        cp.kubectl("apply", "-f", "-", input=json.dumps(_rayjob("edited")))
        parent = cp.get_json("rayjob", "edited", "-n", WORKSPACE)
    spec = json.loads(json.dumps(parent["spec"]["rayClusterSpec"]))
    for t in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]:
        t["metadata"]["labels"].pop(RUN_ID)
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
          "metadata": {"name": "claims-a-parent", "namespace": WORKSPACE,
                       "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "edited",
                                            "uid": parent["metadata"]["uid"], "controller": True}]},
          "spec": spec}
    created = json.loads(cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(rc),
                                    kubeconfig=researcher).stdout)
    assert created["metadata"]["labels"][QUEUE] == "vision-queue"
    assert created["spec"]["suspend"] is True
    assert created["metadata"]["labels"]["tau.azure.com/workspace"] == WORKSPACE


def _admission_key(cp) -> bytes:
    """The chart's generated admission key, as the webhook and the operator read it."""
    secret = cp.get_json("secret", "taugate-admission-key", "-n", "taugate-system")
    return base64.b64decode(secret["data"]["key"])


def test_a_forged_admission_record_is_replaced_and_an_edited_one_restored_with_taugates_signed_record(platform):
    cp = platform.cp
    researcher = cp.user_kubeconfig("mallory", ("vision-researchers",))
    obj = _rayjob("forges-its-record")
    claim = {"workspace": "nlp", "profile": "a100-4gpu", "signature": "hmac-sha256:" + "0" * 64}
    obj["metadata"].setdefault("annotations", {})[ADMISSION] = json.dumps(claim)
    cp.kubectl("create", "-f", "-", input=json.dumps(obj), kubeconfig=researcher)
    stored = cp.get_json("rayjob", "forges-its-record", "-n", WORKSPACE)
    rec = json.loads(stored["metadata"]["annotations"][ADMISSION])
    assert rec["workspace"] == WORKSPACE and rec["object"]["name"] == "forges-its-record"
    assert record.verify(rec, stored, _admission_key(cp)).trusted
    # An UPDATE that rewrites the record gets taugate's back.
    cp.kubectl("annotate", "rayjob", "forges-its-record", "-n", WORKSPACE, "--overwrite",
               f"{ADMISSION}={json.dumps(claim)}", kubeconfig=researcher)
    again = cp.get_json("rayjob", "forges-its-record", "-n", WORKSPACE)
    assert json.loads(again["metadata"]["annotations"][ADMISSION]) == rec
