"""The operator's reconcile of the API server's own policy (``controllers/admission_policy.py``)
over a recording store: it creates the policy, then the binding; what the API server stored, with
its defaults added (``matchPolicy``, ``objectSelector``, a rule's ``scope``), is left alone, so a
watch event never starts a loop of writes; a hand edit is put back; turned off, it deletes only
objects labelled as taugate's. tests/e2e/test_the_api_server_keeps_taugates_rule_while_taugate_is_down.py
runs it against kube-apiserver."""

from __future__ import annotations

import copy

import jsonpatch

from taugate import admission_policy
from taugate.controllers.admission_policy import reconcile_admission_policy
from taugate.settings import Settings


class RecordingKube:
    """get/create/json_patch/delete on a dict, each write recorded."""

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
    assert reconcile_admission_policy(kube, off) == {"ValidatingAdmissionPolicyBinding": "deleted",
                                                     "ValidatingAdmissionPolicy": "deleted"}
    assert kube.writes == [("delete", "ValidatingAdmissionPolicyBinding"), ("delete", "ValidatingAdmissionPolicy")]
    theirs = admission_policy.policy()
    theirs["metadata"]["labels"] = {}
    kube.objects[("ValidatingAdmissionPolicy", admission_policy.NAME)] = theirs
    assert reconcile_admission_policy(kube, off)["ValidatingAdmissionPolicy"] == "not taugate's"
    assert ("ValidatingAdmissionPolicy", admission_policy.NAME) in kube.objects
