"""`taugate policy eval` and the benchmark script."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.policies.conftest import EXAMPLE_CLUSTER, POLICIES, REPO
from tests.policies.test_engine import image_classifier
from tests.policies.test_policy_library import taugate


def test_policy_eval_shows_the_input_and_each_policy_result(tmp_path, capsys):
    obj = tmp_path / "rayjob.yaml"
    obj.write_text(yaml.safe_dump(image_classifier(16, 4)))
    code = taugate(["policy", "eval", "-f", str(obj), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision",
                    "--policies", str(POLICIES)])
    out = capsys.readouterr().out
    assert code == 1
    assert "input document:" in out and '"totalGpus": 64' in out
    assert "  requests-required: pass" in out
    assert ("  gpu-total-fits-queue: deny: spec.rayClusterSpec.workerGroupSpecs[0].replicas: "
            "the workload asks for 64 GPUs") in out
    assert "  gpu-healthy-capacity: warn:" in out
    assert "decision: denied" in out


def test_policy_eval_json_output_and_an_allowed_object(tmp_path, capsys):
    obj = tmp_path / "rayjob.yaml"
    obj.write_text(yaml.safe_dump(image_classifier()))
    code = taugate(["policy", "eval", "-f", str(obj), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision",
                    "--policies", str(POLICIES), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["allowed"] is True
    assert doc["input"]["profile"]["name"] == "h100-1gpu"
    assert set(doc["results"]) >= {"gpu-total-fits-queue", "head-without-gpu"}
    assert all(v == [] for v in doc["results"].values())


def test_policy_eval_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    assert taugate(["policy", "eval", "-f", str(missing), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{missing}: no such file"
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: RayJob\n  spec: [\n")
    assert taugate(["policy", "eval", "-f", str(bad), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert capsys.readouterr().err.startswith(f"{bad}: invalid YAML at line")


def test_the_benchmark_reports_median_and_p99():
    run = subprocess.run([sys.executable, str(REPO / "bench" / "policy_eval.py"), "--iterations", "300", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["policies"] == len(list(POLICIES.glob("*/policy.rego")))
    allowed = report["cases"]["rayjob 4 workers x 1 GPU (allowed)"]
    denied = report["cases"]["rayjob 16 workers x 4 GPUs (denied)"]
    assert allowed["allowed"] is True and allowed["results"] == 0
    assert denied["allowed"] is False and denied["results"] == 2
    for case in (allowed, denied):
        assert 0 < case["median_ms"] <= case["p99_ms"]


def test_policy_eval_refuses_a_kind_taugate_does_not_evaluate_with_exit_2(tmp_path, capsys):
    obj = tmp_path / "configmap.yaml"
    obj.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "settings", "namespace": "vision"}, "data": {"a": "b"}}))
    code = taugate(["policy", "eval", "-f", str(obj), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(POLICIES)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"{obj}: ConfigMap (v1) is not a kind taugate evaluates")
    assert all(k in err for k in ("RayJob (ray.io/v1)", "RayCluster (ray.io/v1)", "Job (batch/v1)"))


def test_policy_eval_of_a_file_without_an_object_is_one_line_and_exit_2(tmp_path, capsys):
    cases = {"empty.yaml": "empty file", "separators.yaml": "no Kubernetes object in the file",
             "array.json": "no Kubernetes object in the file", "object.json": "has no apiVersion and kind"}
    contents = {"empty.yaml": "", "separators.yaml": "---\n---\n", "array.json": "[]", "object.json": "{}"}
    for name, expected in cases.items():
        f = tmp_path / name
        f.write_text(contents[name])
        code = taugate(["policy", "eval", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--policies", str(POLICIES)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, (name, err)
        assert err.startswith(f"{f}: ") and expected in err, (name, err)


def test_a_denial_never_exits_0_when_the_reader_stops_early(tmp_path):
    # `taugate policy eval ... | head` closed the pipe mid-output and the denial exited 0; now any
    # command whose reader goes away exits 141, as a Unix tool killed by SIGPIPE does.
    obj = image_classifier(16, 4)  # 64 GPUs: denied by gpu-total-fits-queue
    obj["metadata"]["annotations"] = {f"example.com/note-{i}": "x" * 200 for i in range(1500)}
    path = tmp_path / "rayjob.yaml"
    path.write_text(yaml.safe_dump(obj))
    run = subprocess.Popen([sys.executable, "-m", "taugate.cli", "policy", "eval", "-f", str(path),
                            "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision", "--policies", str(POLICIES)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert run.stdout.readline() == b"input document:\n"
    run.stdout.close()  # the output (> 300 kB) is far larger than a pipe's buffer
    err = run.stderr.read()
    assert run.wait(timeout=60) == 141, err
    assert err == b""
