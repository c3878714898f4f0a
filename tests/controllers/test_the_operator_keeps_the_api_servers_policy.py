"""The operator's reconcile of the API server's own policy (``controllers/admission_policy.py``)
over a recording store: it creates the policy, then the binding; what the API server stored, with
its defaults added (``matchPolicy``, ``objectSelector``, a rule's ``scope``), is left alone, so a
watch event never starts a loop of writes; a hand edit is put back; turned off, it deletes only
objects labelled as taugate's. The TauCluster's reconcile writes the policy's parameter (a
TauProfilePlacement) before the status the webhook admits by, puts a hand edit of it back and
deletes it with the TauCluster.
tests/e2e/test_the_api_server_keeps_taugates_rule_while_taugate_is_down.py runs it against kube-apiserver."""

from __future__ import annotations

import copy

import jsonpatch
import yaml

from taugate import admission_policy, labels
from taugate.controllers.admission_policy import keep_parameters, reconcile_admission_policy
from taugate.controllers.resources import TAU_PROFILE_PLACEMENTS
from taugate.controllers.taugrid.cluster import reconcile_cluster
from taugate.models import TauCluster
from taugate.profiles import profile_set_hash
from taugate.settings import Settings
from tests.controllers.memstore import MemKube, MemStore
from tests.paths import EXAMPLE_CLUSTER


def _cluster() -> dict:
    return next(d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d and d["kind"] == "TauCluster")


class RecordingKube:
    """get/create/json_patch/delete on a dict, each write recorded (the parameter's by the
    ``MemKube`` of tests/controllers/memstore.py, which the TauCluster's reconcile also needs)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.writes: list[tuple[str, str]] = []

    def get(self, res, name, namespace=None):
        found = self.objects.get((res.kind, name))
        return copy.deepcopy(found) if found is not None else None

    def create(self, res, obj, *, exist_ok=True):
        self.writes.append(("create", res.kind))
        self.objects[(res.kind, obj["metadata"]["name"])] = copy.deepcopy(obj)
        return obj

    def json_patch(self, res, name, ops, namespace=None):
        self.writes.append(("patch", res.kind))
        stored = self.objects[(res.kind, name)]
        self.objects[(res.kind, name)] = jsonpatch.apply_patch(stored, ops)
        return self.objects[(res.kind, name)]

    def delete(self, res, name, namespace=None):
        self.writes.append(("delete", res.kind))
        return self.objects.pop((res.kind, name), None) is not None


class OrderedKube(MemKube):
    """A ``MemKube`` that keeps the order of its writes: (verb, kind, subresource)."""

    def __init__(self, store: MemStore) -> None:
        super().__init__(store)
        self.order: list[tuple[str, str, str | None]] = []

    def _write(self, action):
        self.order.append((action.verb, action.resource.kind, action.subresource))
        super()._write(action)


def _with_server_defaults(kube: RecordingKube) -> None:
    policy = kube.objects[("ValidatingAdmissionPolicy", admission_policy.NAME)]
    policy["metadata"]["resourceVersion"] = "7"
    policy["spec"]["matchConstraints"]["matchPolicy"] = "Equivalent"
    policy["spec"]["matchConstraints"]["objectSelector"] = {}
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        rule["scope"] = "*"


def test_it_installs_leaves_the_stored_policy_alone_and_puts_a_hand_edit_back():
    kube, settings = RecordingKube(), Settings()
    assert reconcile_admission_policy(kube, settings) == {"ValidatingAdmissionPolicy": "created",
                                                          "ValidatingAdmissionPolicyBinding": "created"}
    assert kube.writes == [("create", "ValidatingAdmissionPolicy"), ("create", "ValidatingAdmissionPolicyBinding")]
    _with_server_defaults(kube)
    kube.writes.clear()
    assert set(reconcile_admission_policy(kube, settings).values()) == {"unchanged"} and kube.writes == []
    stored = kube.objects[("ValidatingAdmissionPolicy", admission_policy.NAME)]
    stored["spec"]["validations"].pop()  # a hand edit dropping a rule
    assert reconcile_admission_policy(kube, settings)["ValidatingAdmissionPolicy"] == "updated"
    assert kube.objects[("ValidatingAdmissionPolicy", admission_policy.NAME)]["spec"]["validations"] == \
        admission_policy.policy(settings)["spec"]["validations"]


def test_turned_off_it_deletes_the_binding_first_and_only_what_is_taugates():
    kube = RecordingKube()
    reconcile_admission_policy(kube, Settings())
    kube.writes.clear()
    off = Settings(admission_policy=False)
    kube.create(TAU_PROFILE_PLACEMENTS, admission_policy.parameters(TauCluster.model_validate(_cluster())))
    kube.writes.clear()
    assert reconcile_admission_policy(kube, off) == {"ValidatingAdmissionPolicyBinding": "deleted",
                                                     "ValidatingAdmissionPolicy": "deleted",
                                                     "TauProfilePlacement": "deleted"}
    assert kube.writes == [("delete", "ValidatingAdmissionPolicyBinding"), ("delete", "ValidatingAdmissionPolicy"),
                           ("delete", "TauProfilePlacement")]
    theirs = admission_policy.policy()
    theirs["metadata"]["labels"] = {}
    kube.objects[("ValidatingAdmissionPolicy", admission_policy.NAME)] = theirs
    assert reconcile_admission_policy(kube, off)["ValidatingAdmissionPolicy"] == "not taugate's"
    assert ("ValidatingAdmissionPolicy", admission_policy.NAME) in kube.objects


def test_the_parameter_holds_each_profiles_placement_and_what_the_profiles_tolerate_and_name():
    cluster = _cluster()
    spec = admission_policy.parameters(TauCluster.model_validate(cluster))["spec"]
    assert set(spec["profiles"]) == {p["name"] for p in cluster["spec"]["workloadProfiles"]}
    profiles = cluster["spec"]["workloadProfiles"]
    for p in profiles:
        gpu_class = {"gpuClass": p["gpuClass"]} if p.get("gpuClass") else {}
        want = {"nodeSelector": p.get("nodeSelector") or {}, **gpu_class}
        assert spec["profiles"][p["name"]] == want, p["name"]
    keys = {t["key"] for p in profiles for t in p.get("tolerations") or [] if t.get("key")}
    assert keys and spec["tolerationKeys"] == sorted(keys)
    assert spec["gpuClasses"] == sorted({p["gpuClass"] for p in profiles if p.get("gpuClass")})
    assert spec["profileSetHash"] == profile_set_hash(TauCluster.model_validate(cluster).spec.workload_profiles)


def test_a_profile_name_given_twice_is_left_out_of_the_parameter():
    cluster = _cluster()
    cluster["spec"]["workloadProfiles"].append(copy.deepcopy(cluster["spec"]["workloadProfiles"][0]))
    profiles = admission_policy.parameters(TauCluster.model_validate(cluster))["spec"]["profiles"]
    assert cluster["spec"]["workloadProfiles"][0]["name"] not in profiles
    assert cluster["spec"]["workloadProfiles"][1]["name"] in profiles


def _placement(kube) -> dict | None:
    return kube.store.get("TauProfilePlacement", admission_policy.NAME)


def test_the_cluster_reconcile_writes_the_parameter_before_the_status_the_webhook_admits_by(example_objects, settings):
    kube = OrderedKube(MemStore(example_objects))
    reconcile_cluster(kube, settings)
    assert kube.order.index(("create", "TauProfilePlacement", None)) < kube.order.index(
        ("patch", "TauCluster", "status"))
    cluster = TauCluster.model_validate(kube.store.get("TauCluster", "cluster"))
    assert _placement(kube)["spec"] == admission_policy.parameters(cluster)["spec"]
    assert _placement(kube)["metadata"]["labels"] == {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    # A profile added: the parameter has it before the status says the new profile set.
    spec = kube.store.objects[("TauCluster", None, "cluster")]["spec"]
    spec["workloadProfiles"].append({**copy.deepcopy(spec["workloadProfiles"][0]), "name": "added"})
    kube.order.clear()
    reconcile_cluster(kube, settings)
    assert kube.order[0] == ("patch", "TauProfilePlacement", None) and ("patch", "TauCluster", "status") in kube.order
    assert "added" in _placement(kube)["spec"]["profiles"]


def test_a_hand_edit_of_the_parameter_is_put_back_and_an_unchanged_one_is_not_written(example_objects, settings):
    kube = OrderedKube(MemStore(example_objects))
    cluster = TauCluster.model_validate(_cluster())
    assert keep_parameters(kube, settings, cluster) == "created"
    assert keep_parameters(kube, settings, cluster) == "unchanged"
    want = copy.deepcopy(_placement(kube)["spec"])
    edited = kube.store.objects[("TauProfilePlacement", None, admission_policy.NAME)]["spec"]
    edited["profiles"]["mine"] = {}  # a profile of one's own, placed anywhere
    edited["profiles"]["h100-1gpu"]["nodeSelector"] = {}
    edited["tolerationKeys"] = []
    assert keep_parameters(kube, settings, cluster) == "updated"
    assert _placement(kube)["spec"] == want
    assert keep_parameters(kube, Settings(admission_policy=False), cluster) == "off"


def test_an_invalid_taucluster_leaves_the_parameter_as_it_was_and_a_deleted_one_deletes_it(example_objects, settings):
    kube = OrderedKube(MemStore(example_objects))
    reconcile_cluster(kube, settings)
    before = copy.deepcopy(_placement(kube))
    kube.store.objects[("TauCluster", None, "cluster")]["spec"]["workloadProfiles"][0]["mode"] = "sometimes"
    kube.order.clear()
    plan = reconcile_cluster(kube, settings)
    assert plan.status["phase"] == "Degraded" and _placement(kube) == before
    assert [w for w in kube.order if w[1] == "TauProfilePlacement"] == []
    # No TauCluster: the webhook refuses every GPU workload, and so does the policy, without its parameter.
    del kube.store.objects[("TauCluster", None, "cluster")]
    assert reconcile_cluster(kube, settings) is None and _placement(kube) is None
