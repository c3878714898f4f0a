"""A run-id is a label anyone can copy: the recorder binds a run to its first root object's uid and
follows children and pods only through their controller ownerReference chain, and it keeps an
admission record as evidence only when the record verifies (``controllers/recorder/run/membership.py``,
``taugate.record``). Each attack below would otherwise write into another run's evidence."""

from __future__ import annotations

import json
from pathlib import Path

from taugate.controllers.recorder.evidence.records import EVIDENCE_FILE, verify_record
from tests.recorder import objects as o
from tests.recorder.test_recorder_lifecycle import RUN, SETTINGS, pods_of, taurun, wait_state

LATER = "2026-11-29T10:05:00Z"


def _evidence(config) -> dict:
    return json.loads((Path(config.evidence_root) / RUN / EVIDENCE_FILE).read_text())


def test_a_second_rayjob_that_copies_the_run_id_does_not_join_the_run(kube, config):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        # Another team's RayJob, created later with the same run-id (its own record is valid for
        # itself), whose worker is OOM-killed on another node.
        copycat = o.rayjob(name="copycat", uid="b1f2c3d4-0000-4000-8000-00000000bb02", workers=1, created=LATER)
        oom = o.pod(copycat, "worker", 0, node="gpu-node-2", phase="Running", last_terminated=o.oom())
        kube.apply([o.node("gpu-node-2"), copycat, o.raycluster(copycat), oom])
        # The run's own pods come after, so once they show, the copycat's were seen too.
        kube.apply([o.raycluster(rj), *pods_of(rj)])
        wait_state(kube, "Scheduled", "True")
        status = taurun(kube)
        assert status["spec"]["object"]["uid"] == rj["metadata"]["uid"]
        assert status["status"].get("failures", []) == [] and status["status"]["nodes"] == ["gpu-node-1"]
    doc = _evidence(config)
    assert doc["object"]["name"] == "train-resnet" and doc["failures"] == []
    assert verify_record(Path(config.evidence_root) / RUN).ok


def test_the_run_stays_bound_to_its_object_after_a_restart_and_the_objects_deletion(kube, config):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
    kube.delete("ray.io/v1", "RayJob", rj["metadata"]["name"], o.NS)
    # Created while the operator was down, older-looking than nothing: after the restart the
    # evidence, not the index, says which object the run is.
    copycat = o.rayjob(name="copycat", uid="b1f2c3d4-0000-4000-8000-00000000bb02", workers=1, created=LATER)
    kube.apply([copycat])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        # deleted before it finished: the run ends Failed/Deleted (run_values.RunView.owner_deleted)
        wait_state(kube, "Failed", "True", "Deleted")
        assert taurun(kube)["spec"]["object"]["uid"] == rj["metadata"]["uid"]
    assert _evidence(config)["object"]["uid"] == rj["metadata"]["uid"]


def test_a_pod_that_only_copies_the_run_id_label_joins_nothing(kube, config):
    rj = o.rayjob(workers=1)
    stray = o.pod(rj, "worker", 7, node="gpu-node-2", phase="Running", last_terminated=o.oom())
    stray["metadata"].update(name="not-a-ray-pod", uid="pod-stray")
    del stray["metadata"]["ownerReferences"]  # a bare pod (kubectl run) with the run's label
    kube.apply([o.node("gpu-node-1"), o.node("gpu-node-2"), rj, o.workload(rj, "admitted"), stray,
                o.raycluster(rj), *pods_of(rj)])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Scheduled", "True")
        assert taurun(kube)["status"]["nodes"] == ["gpu-node-1"]
        assert taurun(kube)["status"].get("failures", []) == []
    assert _evidence(config)["failures"] == []


def test_a_forged_admission_record_is_kept_only_as_an_untrusted_claim(kube, config):
    forged = o.admission_record(workspace="other-team", profile="h100-8x-premium")  # unsigned
    rj = o.rayjob(workers=1, record=forged)
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        assert taurun(kube)["spec"]["workspace"] == "team-a" and taurun(kube)["spec"]["profile"] == "a100-4x"
    doc = _evidence(config)
    assert doc["admission"]["trusted"] is False and "not signed" in doc["admission"]["untrusted"]
    assert "other-team" in doc["admission"]["claimed"] and "policyDigest" not in doc["admission"]
    assert doc["workspace"] == "team-a" and doc["profile"] == "a100-4x"  # the labels the webhook pins


def test_a_record_copied_from_another_object_is_not_trusted(kube, config):
    other = o.rayjob(name="someone-else")
    stolen = json.loads(other["metadata"]["annotations"]["tau.azure.com/admission"])
    rj = o.rayjob(workers=1, record=stolen)
    kube.apply([o.node("gpu-node-1"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
    adm = _evidence(config)["admission"]
    assert adm["trusted"] is False and "made for RayJob 'someone-else'" in adm["untrusted"]


# ---- a run belongs to its namespace (issue 27) -------------------------------------------------------

OTHER_NS = "team-b"
OWN_RUN = "0a1b2c3d4e5f60718293a4b6"


def _in_other_namespace(obj: dict) -> dict:
    obj["metadata"]["namespace"] = OTHER_NS
    return obj


def test_a_run_id_copied_into_another_namespace_moves_nothing_and_records_nothing_there(kube, config):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1"), o.node("gpu-node-2"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
        # team-b's RayJob with team-a's run-id, and a pod of it that is OOM-killed
        copycat = _in_other_namespace(o.rayjob(name="copycat", uid="b1f2c3d4-0000-4000-8000-00000000bb02",
                                               workers=1, created=LATER))
        oom = _in_other_namespace(o.pod(copycat, "worker", 0, node="gpu-node-2", phase="Running",
                                        last_terminated=o.oom()))
        kube.apply([copycat, _in_other_namespace(o.raycluster(copycat)), oom])
        kube.apply([o.raycluster(rj), *pods_of(rj)])
        wait_state(kube, "Scheduled", "True")
        status = taurun(kube)
        assert status["metadata"]["namespace"] == o.NS
        assert status["spec"]["object"]["uid"] == rj["metadata"]["uid"]
        assert status["status"].get("failures", []) == [] and status["status"]["nodes"] == ["gpu-node-1"]
        assert kube.get("tau.azure.com/v1alpha1", "TauRun", RUN, OTHER_NS) is None
    doc = _evidence(config)
    assert doc["namespace"] == o.NS and doc["object"]["uid"] == rj["metadata"]["uid"] and doc["failures"] == []
    assert verify_record(Path(config.evidence_root) / RUN).ok


def test_a_copied_run_id_in_another_namespace_stays_out_across_a_restart(kube, config):
    rj = o.rayjob(workers=1)
    kube.apply([o.node("gpu-node-1"), o.node("gpu-node-2"), rj, o.workload(rj, "admitted")])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        wait_state(kube, "Admitted", "True")
    recorded = _evidence(config)
    # While the operator is down, team-a's RayJob goes and team-b copies its run-id: after the
    # restart the rebuilt indices hold only team-b's objects under that run-id.
    kube.delete("ray.io/v1", "RayJob", rj["metadata"]["name"], o.NS)
    copycat = _in_other_namespace(o.rayjob(name="copycat", uid="b1f2c3d4-0000-4000-8000-00000000bb02", workers=1,
                                           created=LATER))
    kube.apply([copycat, _in_other_namespace(o.workload(copycat, "admitted")),
                _in_other_namespace(o.pod(copycat, "worker", 0, node="gpu-node-2", phase="Running",
                                          last_terminated=o.oom()))])
    with kube.operator(SETTINGS, recorder=config, resync_seconds=60):
        # team-b's own run, made after the start: the recorder reconciles runs in the order they
        # were marked, so once its TauRun is written the copy (marked at the start) was handled.
        own = _in_other_namespace(o.rayjob(name="own", run_id=OWN_RUN, uid="b1f2c3d4-0000-4000-8000-00000000bb03",
                                           workers=1, created=LATER))
        kube.apply([own])
        kube.wait_for(lambda: kube.get("tau.azure.com/v1alpha1", "TauRun", OWN_RUN, OTHER_NS), timeout=8.0,
                      message="team-b's own run to be recorded")
        assert kube.get("tau.azure.com/v1alpha1", "TauRun", RUN, OTHER_NS) is None
        assert taurun(kube)["spec"]["object"]["uid"] == rj["metadata"]["uid"]
    doc = _evidence(config)
    assert doc["namespace"] == o.NS and doc["object"]["uid"] == rj["metadata"]["uid"] and doc["failures"] == []
    assert doc == recorded  # nothing of team-b's was written into team-a's run
