"""TauGrid compatibility: objects shaped like TauGrid's samples load in taugate unchanged, and the
profiles of TauGrid's Kind smoke example resolve against its Kueue objects (``tests/data/taugrid``,
written by the project after TauGrid's public samples: TauGrid is not on the Go module proxy)."""

from __future__ import annotations

import yaml

from taugate.models import TauCluster, TauQuotaRequest, TauWorkspace
from taugate.settings import Settings
from taugate.snapshot import build_state
from tests.paths import TAUGRID

CONFIG_SAMPLES = TAUGRID / "samples"
SMOKE = TAUGRID / "kind-smoke"


def _docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_taugrids_sample_objects_load_and_round_trip_without_losing_a_field():
    for path, model in ((CONFIG_SAMPLES / "taucluster.yaml", TauCluster),
                        (CONFIG_SAMPLES / "tauworkspace.yaml", TauWorkspace),
                        (CONFIG_SAMPLES / "tauquotarequest.yaml", TauQuotaRequest)):
        doc = _docs(path)[0]
        obj = model.model_validate(doc)
        wire = obj.wire()
        for key, value in doc["spec"].items():
            assert wire["spec"][key] == value, (path.name, key)


def test_taugrids_kind_smoke_profiles_resolve_ready_against_its_kueue_objects():
    cluster = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster", "metadata": {"name": "cluster"},
               **_docs(SMOKE / "taucluster-profiles.yaml")[0]}
    state = build_state([cluster, *_docs(SMOKE / "kind-kueue-lanes.yaml")], Settings())
    assert state.profile_set_problem is None
    assert set(state.profiles) == {"kind-cpu-job", "kind-cpu-ray"}
    for p in state.profiles.values():
        assert p.is_ready(), p.conditions
        assert p.cluster_queues == ["kind-cpu-cq"] and p.resource_flavors == ["kind-cpu"]


def test_a_workspace_without_a_target_namespace_targets_its_own_name():
    ws = TauWorkspace.model_validate({"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace",
                                      "metadata": {"name": "aurora", "namespace": "tau-platform"}, "spec": {}})
    assert ws.target_namespace == "aurora"
    assert ws.local_queue("jobqueue") == "jobqueue"
