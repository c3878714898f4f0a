"""Bad input never crashes admission: a malformed object is denied naming the field, a bad
snapshot or file is one line naming it with exit 2, and nothing half-written is admitted."""

from __future__ import annotations

import copy

import pytest
import yaml

from taugate.cli import main
from taugate.kinds import rayjob
from taugate.snapshot import SnapshotError, load_snapshot
from taugate.webhook.review import ReviewError, admit, mutate, parse_review, request_for, validate
from tests.admission.conftest import EXAMPLE_CLUSTER
from tests.deep_values import SHAPES, deep_json, field, with_deep
from tests.paths import EXAMPLE_RAYJOB

WORKER = ("spec", "rayClusterSpec", "workerGroupSpecs", 0)


def _set(obj, path, value):
    *head, last = path
    for p in head:
        obj = obj[p]
    obj[last] = value


C0 = WORKER + ("template", "spec", "containers", 0)
TEMPLATE = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec"
MALFORMED = [
    pytest.param(("metadata", "labels"), "x", "metadata.labels", id="labels-a-string"),
    pytest.param(("metadata", "labels"), {"a": 1}, "metadata.labels.a", id="label-value-a-number"),
    pytest.param(("metadata", "annotations"), ["a"], "metadata.annotations", id="annotations-an-array"),
    pytest.param(("metadata", "name"), 12345, "metadata.name", id="name-a-number"),
    pytest.param(("metadata",), ["a"], "metadata", id="metadata-an-array"),
    pytest.param(("metadata",), "x", "metadata", id="metadata-a-string"),
    pytest.param(("spec",), "hello", "spec", id="spec-a-string"),
    pytest.param(("spec", "suspend"), "yes", "spec.suspend", id="suspend-a-string"),
    pytest.param(WORKER + ("replicas",), "four", "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
                 id="replicas-four"),
    pytest.param(WORKER + ("replicas",), -3, "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
                 id="replicas-negative"),
    pytest.param(WORKER + ("numOfHosts",), "two", "spec.rayClusterSpec.workerGroupSpecs[0].numOfHosts", id="hosts"),
    pytest.param(WORKER + ("rayStartParams",), "x", "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams",
                 id="params"),
    pytest.param(WORKER + ("template",), "x", "spec.rayClusterSpec.workerGroupSpecs[0].template", id="template"),
    pytest.param(WORKER + ("template", "metadata"), "x", "spec.rayClusterSpec.workerGroupSpecs[0].template.metadata",
                 id="template-metadata"),
    pytest.param(WORKER + ("template", "spec", "nodeSelector"), "h100",
                 "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.nodeSelector", id="node-selector"),
    pytest.param(WORKER + ("template", "spec", "containers"), ["ray-worker"],
                 "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]", id="containers-strings"),
    pytest.param(C0 + ("resources", "requests", "cpu"), "lots",
                 "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.requests.cpu",
                 id="cpu-lots"),
    pytest.param(C0 + ("resources", "requests", "memory"), -1,
                 "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.requests.memory",
                 id="memory-negative"),
    pytest.param(C0 + ("resources", "limits", "cpu"), True,
                 "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits.cpu",
                 id="cpu-true"),
    # Found by fuzzing: these reached the policies (or arithmetic) and answered 500.
    pytest.param(WORKER + ("template", "spec", "affinity"),
                 {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                     "values": "h100"}]}]}}},
        f"{TEMPLATE}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        f".matchExpressions[0].values", id="affinity-values-a-string"),
    pytest.param(WORKER + ("template", "spec", "affinity"),
                 {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": "gpu"}}},
        f"{TEMPLATE}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        id="affinity-terms-a-string"),
    pytest.param(WORKER + ("template", "spec", "affinity"),
                 {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": "high", "preference": {"matchExpressions": []}}]}},
        f"{TEMPLATE}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        id="affinity-weight-a-string"),
    pytest.param(WORKER + ("template", "spec", "tolerations"), "gpu", f"{TEMPLATE}.tolerations",
                 id="tolerations-a-string"),
    pytest.param(WORKER + ("template", "spec", "tolerations"), [{"key": 5, "operator": "Exists"}],
                 f"{TEMPLATE}.tolerations[0].key", id="toleration-key-a-number"),
    pytest.param(WORKER + ("template", "spec", "tolerations"), [{"key": "a", "effect": ["NoSchedule"]}],
                 f"{TEMPLATE}.tolerations[0].effect", id="toleration-effect-an-array"),
    pytest.param(WORKER + ("template", "spec", "tolerations"), [{"key": "a", "tolerationSeconds": 2**63}],
                 f"{TEMPLATE}.tolerations[0].tolerationSeconds", id="toleration-seconds-2-63"),
    pytest.param(WORKER + ("replicas",), 2**63, "spec.rayClusterSpec.workerGroupSpecs[0].replicas", id="replicas-2-63"),
    pytest.param(WORKER + ("replicas",), 2**31, "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
                 id="replicas-above-int32"),
    pytest.param(WORKER + ("maxReplicas",), 2**31, "spec.rayClusterSpec.workerGroupSpecs[0].maxReplicas",
                 id="max-replicas-above-int32"),
    pytest.param(WORKER + ("numOfHosts",), 2**31, "spec.rayClusterSpec.workerGroupSpecs[0].numOfHosts",
                 id="hosts-above-int32"),
]


@pytest.mark.parametrize("path, value, field", MALFORMED)
def test_a_malformed_workload_is_denied_by_both_webhooks_naming_the_field(classifier, state, settings, path, value,
                                                                          field):
    obj = copy.deepcopy(classifier)
    _set(obj, path, value)
    for decide in (mutate, validate):
        d = decide(request_for(obj, namespace="vision"), state, settings)
        assert not d.allowed, decide.__name__
        assert field in [v.field for v in d.violations], [v.render() for v in d.violations]
        assert all(v.policy == "object-shape" for v in d.violations)


@pytest.mark.parametrize("gpus", ["NaN", "sNaN", "Infinity", "1e30", "1e999999999", "-1", True, "lots"])
def test_gpu_counts_that_are_not_usable_numbers_are_denied_without_a_crash(classifier, state, settings, engine, gpus):
    res = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = gpus
    d = admit(classifier, state=state, settings=settings, engine=engine, namespace="vision")
    assert not d.allowed
    assert any("nvidia.com/gpu" in v.field for v in d.violations), d.message
    assert "True" not in d.message


@pytest.mark.parametrize("refs", [
    -1, "owner", [{"apiVersion": "ray.io/v1", "kind": ["RayJob"], "name": "p", "uid": "u", "controller": True}],
    [{"apiVersion": 5, "kind": "RayJob", "name": "p", "uid": "u", "controller": True}],
    [{"apiVersion": "v1", "kind": {"a": 1}, "name": "p", "uid": "u", "controller": True}],
], ids=["a-number", "a-string", "kind-an-array", "apiVersion-a-number", "kind-an-object"])
def test_owner_references_of_the_wrong_shape_never_make_a_child_or_a_crash(classifier, state, settings, engine, refs):
    classifier["metadata"]["ownerReferences"] = refs
    for decide in (mutate, validate):
        d = decide(request_for(classifier, namespace="vision"), state, settings, engine)
        assert d.code != 500, d.message
    patched = mutate(request_for(classifier, namespace="vision"), state, settings, engine)
    assert patched.allowed and any(op["path"] == "/spec/suspend" for op in patched.patch), \
        "not a child: queued like any top-level workload"


def test_an_object_whose_own_kind_is_not_a_string_is_decided_by_the_request_kind(classifier, state, settings, engine):
    request = request_for(classifier, namespace="vision")
    request["object"]["kind"] = ["RayJob"]  # the API server sends request.kind; the object may say anything
    for decide in (mutate, validate):
        d = decide(request, state, settings, engine)
        assert d.code != 500, d.message


@pytest.mark.parametrize("num_gpus", ["1e999999999", "1e5000", "1e30", "many"])
def test_a_ray_num_gpus_too_large_to_be_a_count_is_denied_at_once_never_expanded(classifier, state, settings,
                                                                                  engine, num_gpus):
    worker = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker["rayStartParams"] = {"num-gpus": num_gpus}
    [template] = [t for t in rayjob.KIND.pod_templates(classifier) if t.role == "worker"]
    assert template.ray_num_gpus is None  # read from the exponent: 10**999999999 is never built
    d = validate(request_for(classifier, namespace="vision"), state, settings, engine)
    assert not d.allowed and d.code != 500, d.message
    [v] = [v for v in d.violations if v.policy == "ray-num-gpus"]
    assert v.field == "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.num-gpus"
    assert "not a usable number" in v.message and num_gpus in v.message


def test_a_rayjob_without_a_spec_or_cluster_is_denied(classifier, state, settings):
    for spec in (None, {"entrypoint": "python x.py"}):
        obj = copy.deepcopy(classifier)
        if spec is None:
            del obj["spec"]
        else:
            obj["spec"] = spec
        d = mutate(request_for(obj, namespace="vision"), state, settings)
        assert not d.allowed and d.violations[0].field in ("spec", "spec.rayClusterSpec")


def test_suspend_false_on_create_is_set_to_true_as_kueue_does(classifier, state, settings):
    classifier["spec"]["suspend"] = False
    d = admit(classifier, state=state, settings=settings, namespace="vision")
    assert d.allowed and d.object["spec"]["suspend"] is True


@pytest.mark.parametrize("request_patch, reason", [
    ({"object": None}, r"request.object: is missing; a CREATE review carries the object"),
    ({"namespace": 5}, r"request.namespace: is a number \(5\); it must be a string"),
    ({"operation": "UPDATE", "oldObject": None}, r"request.oldObject: is missing; an UPDATE review carries the old"),
    ({"kind": {"group": "ray.io", "version": "v1", "kind": 7}}, r"request.kind.kind: is a number \(7\); it must be a "
                                                                 r"string"),
    ({"operation": "PATCH"}, r"request.operation: is a string \('PATCH'\); input should be 'CREATE', 'UPDATE'"),
])
def test_a_review_missing_what_its_operation_needs_is_rejected_with_the_reason(classifier, request_patch, reason):
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {**request_for(classifier, namespace="vision"), **request_patch}}
    with pytest.raises(ReviewError, match=reason):
        parse_review(review)
    with pytest.raises(ReviewError, match="an array"):
        parse_review(b"[1]")


def _snapshot(tmp_path, mutate_docs):
    docs = list(yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()))
    docs = mutate_docs(docs) or docs
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    return f


@pytest.mark.parametrize("change, expected", [
    (lambda d: [x for x in d if x["kind"] != "TauCluster"], "no TauCluster"),
    (lambda d: d + [{**d[0], "metadata": {"name": "other"}}], "singleton named 'cluster'"),
    (lambda d: d + [d[0]], "a second TauCluster"),
    (lambda d: [x if x["kind"] != "Node" else {**x, "metadata": "node"} for x in d], "metadata"),
    (lambda d: [x if x["kind"] != "Node" else {**x, "status": {**x["status"], "conditions": ["Ready"]}} for x in d],
     "conditions"),
    (lambda d: [x if x["kind"] != "LocalQueue" else {**x, "spec": "x"} for x in d], "LocalQueue"),
    (lambda d: [x if x["kind"] != "ClusterQueue" else {**x, "status": {"flavorsUsage": "x"}} for x in d],
     "flavorsUsage"),
    (lambda d: [x if x["kind"] != "ClusterQueue" else {**x, "spec": {"resourceGroups": "x"}} for x in d],
     "resourceGroups"),
])
def test_a_broken_snapshot_is_one_error_naming_the_file_and_the_object(tmp_path, change, expected):
    f = _snapshot(tmp_path, change)
    with pytest.raises(SnapshotError) as e:
        load_snapshot(f)
    assert str(f) in str(e.value) and expected in str(e.value)
    assert "\n" not in str(e.value)


def test_an_empty_file_or_a_list_of_numbers_is_a_one_line_error(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    numbers = tmp_path / "numbers.json"
    numbers.write_text('{"kind": "List", "items": [1, 2]}')
    for f in (empty, numbers):
        assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies"]) == 2
        assert main(["admit", "-f", str(EXAMPLE_CLUSTER), "--cluster", str(f), "--no-policies"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(str(f) in line for line in err)


def test_numbers_beyond_64_bits_and_non_string_keys_are_handled(tmp_path, capsys, classifier):
    classifier["metadata"]["namespace"] = "vision"
    big = copy.deepcopy(classifier)
    big["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 10**25
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump(big))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies"]) == 2
    assert ("spec.rayClusterSpec.workerGroupSpecs[0].replicas: 10000000000000000000000000 "
            "is outside the 64-bit integer range") in capsys.readouterr().err
    keys = copy.deepcopy(classifier)
    keys["metadata"]["labels"] = {1: "one", 2.5: "half", None: "none"}
    f.write_text(yaml.safe_dump(keys))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies"]) == 0


def test_a_namespace_flag_that_contradicts_the_object_is_refused(tmp_path, capsys, classifier):
    classifier["metadata"]["namespace"] = "vision"
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(classifier))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-n", "nlp", "--no-policies"]) == 2
    assert "does not match -n 'nlp'" in capsys.readouterr().err


def test_a_profile_made_for_the_shape_but_not_ready_is_named_with_its_reason(tmp_path, classifier, settings):
    def ghost(docs):
        docs[0]["spec"]["workloadProfiles"][0]["defaultLocalQueue"] = "ghost-queue"
    state = load_snapshot(_snapshot(tmp_path, ghost), settings)
    d = mutate(request_for(classifier, namespace="vision"), state, settings)
    assert not d.allowed
    msg = d.violations[0].message
    assert "'h100-1gpu', which is not Ready" in msg and "ghost-queue" in msg and "fix:" in msg


def test_a_profile_whose_workload_priority_class_is_missing_is_named_with_the_class_to_create(tmp_path, classifier,
                                                                                             settings):
    # Kueue builds no Workload for a job naming a missing WorkloadPriorityClass (kueue v0.17
    # jobframework ExtractPriority): without this denial the RayJob would sit suspended forever.
    def no_priority_class(docs):
        docs[:] = [d for d in docs if d["kind"] != "WorkloadPriorityClass"]
    state = load_snapshot(_snapshot(tmp_path, no_priority_class), settings)
    d = mutate(request_for(classifier, namespace="vision"), state, settings)
    assert not d.allowed
    msg = d.violations[0].message
    assert "'h100-1gpu', which is not Ready (WorkloadPriorityClass 'tau-train-default'" in msg
    assert "Kueue creates no Workload for a job that names it" in msg and "cpu-small" in msg


def test_a_denial_under_the_workspace_default_profile_says_why_that_profile_applies(classifier, state, settings,
                                                                                    engine):
    res = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "2"
    d = admit(classifier, state=state, settings=settings, engine=engine, namespace="vision")
    assert not d.allowed and "h100-8gpu" in d.message
    assert any("matches 2 GPU(s) per pod, so the workspace default h100-8gpu" in w for w in d.warnings)


def test_a_denial_lists_at_most_20_problems_and_counts_the_rest(classifier, state, settings, engine):
    obj = copy.deepcopy(classifier)
    obj["metadata"]["labels"] = {f"example.com/l{i}": i for i in range(1245)}  # 1,245 labels that are not strings
    decision = admit(obj, state=state, settings=settings, engine=engine, namespace="vision")
    assert not decision.allowed and len(decision.violations) == 1245
    lines = decision.message.splitlines()
    assert len(lines) == 1 + 20 + 1, lines[:3]
    assert lines[1].startswith('- [object-shape] metadata.labels["example.com/l0"]: is a number')
    assert lines[-1] == "... and 1225 more problem(s)"


def test_a_problem_line_quoting_a_huge_value_is_cut_with_its_length():
    from taugate.webhook.decision import Decision, Violation

    decision = Decision.deny([Violation("object-shape", "metadata.labels." + "x" * 5000, "is 7, not a string")])
    headline, line = decision.message.splitlines()
    assert len(line) <= 1000
    assert line.endswith(f"... ({len('- [object-shape] metadata.labels.') + 5000 + 20} characters in all)")


@pytest.mark.parametrize("parallelism", [2**31, 2**63])
def test_a_job_parallelism_above_int32_is_a_shape_error(state, settings, parallelism):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "vision"},
           "spec": {"parallelism": parallelism, "template": {"spec": {"restartPolicy": "Never",
                                                                      "containers": [{"name": "c", "image": "i"}]}}}}
    for decide in (mutate, validate):
        d = decide(request_for(job, namespace="vision"), state, settings)
        assert not d.allowed and [v.field for v in d.violations] == ["spec.parallelism"], d.message
        assert "0 to 2147483647 (int32)" in d.message


@pytest.mark.parametrize("num_gpus", ["-1", "-5", "1m", "0.5", " 1", "1e0"])
def test_a_ray_num_gpus_that_is_not_a_whole_number_is_denied_naming_the_field(classifier, state, settings, engine,
                                                                              num_gpus):
    worker = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker["rayStartParams"] = {"num-gpus": num_gpus}
    d = admit(classifier, state=state, settings=settings, engine=engine, namespace="vision")
    assert not d.allowed and d.code == 403, d.message
    [v] = [v for v in d.violations if v.policy == "ray-num-gpus"]
    assert v.field == "spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.num-gpus"
    assert "not a usable number" in v.message and "a whole number" in v.message


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("levels", [130, 250])
def test_an_object_nested_past_100_levels_is_denied_naming_the_path_never_a_500(classifier, state, settings, engine,
                                                                                levels):
    template = classifier["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    template["spec"]["affinity"] = {"podAffinity": _nested(levels)}
    d = admit(classifier, state=state, settings=settings, engine=engine, namespace="vision")
    assert not d.allowed and d.code == 403, d.message
    [v] = d.violations
    assert v.policy == "object-shape" and v.field.startswith(f"{TEMPLATE}.affinity.podAffinity.a.a.a")
    assert "nests more than 100 levels deep" in v.message


def test_a_deep_object_given_to_admit_is_one_line_naming_the_path(tmp_path, capsys, classifier):
    classifier["spec"]["x"] = _nested(150)
    f = tmp_path / "deep.json"
    import json

    f.write_text(json.dumps(classifier))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "spec.x.a.a" in err and "nests more than 100 levels deep" in err, err


@pytest.mark.parametrize("path, value, field", [p for p in MALFORMED if p.id in (
    "affinity-values-a-string", "affinity-weight-a-string", "toleration-key-a-number", "replicas-above-int32")])
def test_the_cli_denies_a_malformed_workload_naming_the_field(tmp_path, capsys, classifier, path, value, field):
    obj = copy.deepcopy(classifier)
    obj["metadata"]["namespace"] = "vision"
    _set(obj, path, value)
    f = tmp_path / "obj.yaml"
    f.write_text(yaml.safe_dump(obj))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"[object-shape] {field}: " in err, err


@pytest.mark.parametrize("path", SHAPES)
@pytest.mark.parametrize("levels", [150, 1000])
def test_a_deeply_nested_value_given_to_admit_is_one_line_naming_its_field(tmp_path, capsys, levels, path):
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    f = tmp_path / "deep.json"
    f.write_bytes(deep_json(with_deep(obj, path), levels))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(f) in err and "Traceback" not in err, err
    assert f"{field(path)}.a.a" in err and "nests more than 100 levels deep" in err, err[:400]


def test_a_yaml_manifest_nested_1000_levels_is_one_line_naming_the_file(tmp_path, capsys):
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    f = tmp_path / "deep.yaml"  # flow-style YAML: libyaml stops at its own nesting limit
    f.write_bytes(b"# a comment, so this is read as YAML\n" + deep_json(with_deep(obj, SHAPES[0].values[0])))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(f) in err and "nesting depth" in err, err
