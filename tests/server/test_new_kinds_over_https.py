"""The workload kinds issue 17 adds, over real HTTPS: each kind's runnable upstream sample
(``tests.workload_samples``) through ``/mutate`` and ``/validate`` as kube-apiserver calls them,
every JSONPatch applied with ``jsonpatch``: admitted, queued, one run-id everywhere, still valid
under the kind's real CRD; a sample as written is denied with its field paths."""

from __future__ import annotations

import copy

from taugate import labels
from taugate.kinds import kind_of
from tests import workload_samples as ws
from tests.admission.test_new_kinds_admission import CASES
from tests.crdschema import crd_errors
from tests.paths import LAMMPS_TRAINJOB, LWS_VLLM_GPU
from tests.server.https import admission_review, apply, check_response, workload_request
from tests.upstream_manifests import KUEUE


async def _admit(gate, obj):
    request = workload_request(obj)
    mutated = check_response((await gate.post("/mutate", admission_review(request))).body, request["uid"])
    out = apply(obj, mutated)
    validated = check_response((await gate.post("/validate", admission_review({**request, "object": out}))).body,
                               request["uid"])
    return validated, out


async def test_every_new_kinds_runnable_sample_is_admitted_queued_and_labelled_over_https(gate):
    for name, case in sorted(CASES.items()):
        obj = case.sample()
        resp, out = await _admit(gate, obj)
        assert resp["allowed"], (name, resp)
        assert crd_errors(out, case.crd, case.version) == [], name
        run_id = out["metadata"]["labels"][labels.RUN_ID]
        assert out["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue", name
        assert {t[labels.RUN_ID] for t in ws.template_labels(out)} == {run_id}, name
        path = kind_of(out).suspend_path
        assert path is None or ws.at(out, path) is True, name


async def test_the_jobset_kep_sample_as_written_is_denied_over_https_with_field_paths(gate):
    resp, _ = await _admit(gate, ws.load(ws.JOBSET_FINE_TUNE))
    assert not resp["allowed"] and resp["status"]["code"] == 403
    assert "spec.replicatedJobs[1].replicas: asks for 3 workers" in resp["status"]["message"]


async def test_the_trainers_own_trainjob_sample_is_denied_over_https_naming_resources_per_node(gate):
    resp, _ = await _admit(gate, ws.load(LAMMPS_TRAINJOB))  # numNodes, but its size per node left to the runtime
    assert not resp["allowed"] and resp["status"]["code"] == 403
    assert "spec.trainer.resourcesPerNode: is not set" in resp["status"]["message"]


async def test_a_trainjob_over_https_carries_its_run_id_and_placement_in_taugates_runtime_patch(gate, settings):
    resp, out = await _admit(gate, CASES["TrainJob"].sample())
    assert resp["allowed"], resp
    [patch] = out["spec"]["runtimePatches"]
    assert patch["manager"] == "tau.azure.com/taugate"
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][labels.RUN_ID] == out["metadata"]["labels"][labels.RUN_ID]
    assert pod["spec"]["nodeSelector"][settings.gpu_class_label] == "h100"


async def test_a_leaderworkerset_over_https_is_queued_without_suspend_and_its_pods_held_by_kueue(gate):
    resp, out = await _admit(gate, ws.one_group(ws.load(LWS_VLLM_GPU)))
    assert resp["allowed"], resp
    assert "suspend" not in out["spec"]
    for t in kind_of(out).pod_templates(out):
        assert t.template["metadata"]["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == \
            "leaderworkerset.x-k8s.io/leaderworkerset"


async def test_kueues_unsuspend_of_a_jobset_over_https_is_allowed_without_a_patch(gate):
    _, created = await _admit(gate, CASES["JobSet"].sample())
    stored = {**created, "metadata": {**created["metadata"], "uid": "5f1c0e9a-1b2c-4d3e-8f90-a1b2c3d4e5f6"}}
    start = copy.deepcopy(stored)
    start["spec"]["suspend"] = False  # Kueue's RunWithPodSetsInfo: unsuspend, merge the flavor's node labels
    for rjob in start["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"].setdefault("nodeSelector", {})["example.com/flavor"] = "h100"
    request = workload_request(start, operation="UPDATE", old=stored, username=KUEUE)
    mutated = check_response((await gate.post("/mutate", admission_review(request))).body, request["uid"])
    assert mutated["allowed"] and "patch" not in mutated
    validated = check_response((await gate.post("/validate", admission_review(request))).body, request["uid"])
    assert validated["allowed"], validated
