"""``taugate policy audit`` and ``taugate policy what-if`` (taugate/cli/audit.py): the
PolicyReports of existing workloads, offline, and what a changed policy folder would deny or warn
that the current one does not, from a snapshot or from a live API (the kmock double)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import yaml

from taugate.cli import main
from taugate.policy_report import REPORT_NAME
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.review import admit
from tests.crdschema import crd_errors
from tests.paths import CLUSTER_POLICY_REPORT_CRD, EXAMPLE_CLUSTER, POLICY_REPORT_CRD, REPO
from tests.policies.conftest import IMAGE_CLASSIFIER, POLICIES

NINE_GPUS = REPO / "examples" / "rayjob-nine-gpus.yaml"
GPU_RULES = ("gpu-per-pod-fits-node", "gpu-per-pod-within-profile")


def stored(path, example_state, settings, name: str, enforcement: dict[str, str]) -> dict:
    """The workload in ``path`` as the API server stores it after admission under ``enforcement``."""
    decision = admit(yaml.safe_load(path.read_text()), state=example_state, settings=settings,
                     engine=load_policy_engine(POLICIES, enforcement=enforcement), namespace="vision")
    assert decision.allowed, decision.message
    obj = copy.deepcopy(decision.object)
    obj["metadata"].pop("generateName", None)
    obj["metadata"].update(name=name, uid=f"uid-{name}")
    return obj


@pytest.fixture
def nine_gpu_rayjob(example_state, settings) -> dict:
    """A 9-GPU-per-worker RayJob admitted while the GPU rules were only dry-run."""
    return stored(NINE_GPUS, example_state, settings, "resnet-nine", dict.fromkeys(GPU_RULES, "dryrun"))


@pytest.fixture
def cluster_with(tmp_path):
    """A snapshot file: examples/cluster.yaml plus the given workloads."""
    def write(*workloads: dict):
        path = tmp_path / "cluster-with-workloads.yaml"
        path.write_text(EXAMPLE_CLUSTER.read_text() + "\n---\n" + yaml.safe_dump_all(workloads))
        return str(path)
    return write


def test_the_offline_audit_names_the_violated_policy_for_an_existing_nine_gpu_per_worker_rayjob(
        nine_gpu_rayjob, cluster_with, capsys):
    assert main(["policy", "audit", "--cluster", cluster_with(nine_gpu_rayjob), "-o", "table"]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "gpu-per-pod-fits-node" in x)
    assert line.split("\t")[:5] == ["vision", "fail", "deny", "gpu-per-pod-fits-node", "RayJob/resnet-nine"]
    assert "9 GPUs per pod" in line and "largest h100 node has 8" in line


def test_the_audit_prints_policyreports_valid_against_the_working_groups_crds(nine_gpu_rayjob, tmp_path, capsys):
    f = tmp_path / "rayjob.yaml"
    f.write_text(yaml.safe_dump(nine_gpu_rayjob))
    assert main(["policy", "audit", "--cluster", str(EXAMPLE_CLUSTER), "-f", str(f)]) == 1
    namespaced, cluster = list(yaml.safe_load_all(capsys.readouterr().out))
    assert (namespaced["kind"], namespaced["metadata"]["name"]) == ("PolicyReport", REPORT_NAME)
    assert crd_errors(namespaced, POLICY_REPORT_CRD, "v1alpha2") == []
    assert crd_errors(cluster, CLUSTER_POLICY_REPORT_CRD, "v1alpha2") == []
    assert {r["policy"] for r in namespaced["results"]} >= set(GPU_RULES)


def test_an_audit_with_nothing_failing_exits_0_and_json_is_a_list(example_state, settings, tmp_path, capsys):
    ok = stored(IMAGE_CLASSIFIER, example_state, settings, "classifier", {})
    f = tmp_path / "ok.yaml"
    f.write_text(yaml.safe_dump(ok))
    assert main(["policy", "audit", "--cluster", str(EXAMPLE_CLUSTER), "-f", str(f), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List" and doc["items"][0]["summary"]["fail"] == 0
    assert doc["items"][0]["summary"]["pass"] >= 9


@pytest.mark.parametrize(("args", "problem"), [
    (["--cluster", "missing.yaml"], "missing.yaml"),
    (["--cluster", str(EXAMPLE_CLUSTER), "-f", str(EXAMPLE_CLUSTER)], "no workload of a kind taugate governs"),
    (["--cluster", str(EXAMPLE_CLUSTER), "--policies", "no-such-dir"], "no-such-dir: no such policy folder"),
])
def test_bad_audit_input_is_one_line_naming_the_file_and_exit_2(args, problem, capsys):
    assert main(["policy", "audit", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and "\n" not in err


@pytest.fixture
def proposed(tmp_path):
    """A copy of the policy folder whose enforcement.yaml the test rewrites."""
    target = tmp_path / "proposed"
    shutil.copytree(POLICIES, target)
    return target


def set_enforcement(folder, actions: dict[str, str]) -> None:
    (folder / "enforcement.yaml").write_text(yaml.safe_dump(actions))


def test_what_if_shows_a_rule_moved_from_dry_run_to_deny_would_deny_an_existing_workload(
        nine_gpu_rayjob, cluster_with, proposed, tmp_path, capsys):
    current = tmp_path / "current"
    shutil.copytree(POLICIES, current)
    set_enforcement(current, dict.fromkeys(GPU_RULES, "dryrun"))
    set_enforcement(proposed, {"gpu-per-pod-fits-node": "deny", "gpu-per-pod-within-profile": "warn"})
    code = main(["policy", "what-if", str(proposed), "--current", str(current),
                 "--cluster", cluster_with(nine_gpu_rayjob)])
    out = capsys.readouterr().out
    assert code == 1
    assert "namespace vision:" in out
    assert "gpu-per-pod-fits-node: would deny 1 workload(s) that it does not today" in out
    assert "deny RayJob/resnet-nine" in out and "(today: dryrun)" in out
    assert "gpu-per-pod-within-profile: would warn 1 workload(s)" in out
    assert "summary: 1 new denial(s), 1 new warning(s), 0 new dry-run result(s); 1 would deny once enforced as deny; " \
           "0 result(s) no longer enforced" in out


def test_what_if_of_the_same_policies_changes_nothing_and_exits_0(nine_gpu_rayjob, cluster_with, proposed, capsys):
    assert main(["policy", "what-if", str(proposed), "--cluster", cluster_with(nine_gpu_rayjob)]) == 0
    assert "summary: 0 new denial(s), 0 new warning(s), 0 new dry-run result(s); 0 would deny once enforced as deny; " \
           "0 result(s) no longer enforced" in capsys.readouterr().out


def test_what_if_with_only_new_warnings_exits_0_and_names_what_is_no_longer_enforced(
        nine_gpu_rayjob, cluster_with, proposed, capsys):
    set_enforcement(proposed, {"gpu-per-pod-fits-node": "warn", "gpu-per-pod-within-profile": "dryrun"})
    assert main(["policy", "what-if", str(proposed), "--cluster", cluster_with(nine_gpu_rayjob), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["enforced"] == []  # deny -> warn is weaker, not new
    relieved = {(c["policy"], c["action"], c["before"]) for c in doc["relieved"]}
    assert relieved == {("gpu-per-pod-fits-node", "deny", "warn"), ("gpu-per-pod-within-profile", "deny", "dryrun")}


def test_what_if_reads_the_workloads_of_a_live_cluster(kube_double, nine_gpu_rayjob, proposed, tmp_path, capsys):
    objects = [o for o in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if o]
    kube_double.apply([*objects, nine_gpu_rayjob])
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "double", "cluster": {"server": kube_double.url}}],
        "users": [{"name": "author", "user": {"token": "t"}}],
        "contexts": [{"name": "test", "context": {"cluster": "double", "user": "author"}}]}))
    current = tmp_path / "current"
    shutil.copytree(POLICIES, current)
    set_enforcement(current, dict.fromkeys(GPU_RULES, "dryrun"))
    code = main(["policy", "what-if", str(proposed), "--current", str(current), "--kubeconfig", str(kubeconfig)])
    out = capsys.readouterr().out
    assert code == 1 and "audited 1 workload(s) in 1 namespace(s)" in out
    assert "deny RayJob/resnet-nine" in out


def test_what_if_against_an_unreachable_cluster_is_one_line_and_exit_2(proposed, tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}]}))
    assert main(["policy", "what-if", str(proposed), "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(kubeconfig) in err and "\n" not in err


NEW_RULE = '''# at-most-four-gpus-per-pod: a new platform rule, previewed before it is enforced.
package taugate.policies.at_most_four_gpus_per_pod

import data.taugate.lib

name := "at-most-four-gpus-per-pod"

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	some t in input.object.podTemplates
	t.gpusPerPod > 4
	msg := sprintf("asks for %d GPUs per pod; allowed: at most 4; fix: use more, smaller workers", [t.gpusPerPod])
}
'''


def test_what_if_previews_a_new_rule_on_the_workloads_that_exist(example_state, settings, cluster_with, proposed,
                                                                  capsys):
    eight = stored(IMAGE_CLASSIFIER, example_state, settings, "classifier", {})
    group = eight["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    for key in ("limits", "requests"):
        group["template"]["spec"]["containers"][0]["resources"][key]["nvidia.com/gpu"] = "2"
    (proposed / "at-most-four-gpus-per-pod").mkdir()
    (proposed / "at-most-four-gpus-per-pod" / "policy.rego").write_text(NEW_RULE)
    nine = stored(NINE_GPUS, example_state, settings, "resnet-nine", dict.fromkeys(GPU_RULES, "dryrun"))
    code = main(["policy", "what-if", str(proposed), "--cluster", cluster_with(eight, nine), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    new = [(c["workload"], c["action"], c["before"]) for c in doc["enforced"]
           if c["policy"] == "at-most-four-gpus-per-pod"]
    assert new == [("RayJob/resnet-nine", "deny", "none")]  # the 2-GPU classifier is not touched


def test_what_if_of_a_new_rule_added_as_dryrun_previews_what_it_would_deny(example_state, settings, cluster_with,
                                                                             proposed, capsys):
    """The documented roll-out (policies/README: add the rule as dryrun, then what-if) previews the
    workloads the rule would deny once enforced, and exits 0 since nothing is denied yet."""
    (proposed / "at-most-four-gpus-per-pod").mkdir()
    (proposed / "at-most-four-gpus-per-pod" / "policy.rego").write_text(NEW_RULE)
    set_enforcement(proposed, {"head-without-gpu": "warn", "at-most-four-gpus-per-pod": "dryrun"})
    nine = stored(NINE_GPUS, example_state, settings, "resnet-nine", dict.fromkeys(GPU_RULES, "dryrun"))
    code = main(["policy", "what-if", str(proposed), "--cluster", cluster_with(nine)])
    out = capsys.readouterr().out
    assert code == 0
    assert "at-most-four-gpus-per-pod: would dryrun 1 workload(s) that it does not today" in out
    assert "dryrun RayJob/resnet-nine" in out and "(today: none; would deny once enforced as deny)" in out
    assert "summary: 0 new denial(s), 0 new warning(s), 1 new dry-run result(s); 1 would deny once enforced as deny" \
        in out
