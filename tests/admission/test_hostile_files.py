"""Hostile and unusual inputs to ``taugate admit``: a billion-laughs YAML, an endless file, a
duplicate key, standard input and directories. Each bad input is one line on stderr and exit 2,
fast and small (the real CLI, as a child process, its time and its own peak memory measured)."""

from __future__ import annotations

import io
import json
import sys

import pytest
import yaml

from taugate.cli import main
from taugate.files import MAX_ALIAS_VALUES
from tests.child_process import run_measured
from tests.paths import EXAMPLE_CLUSTER, EXAMPLE_RAYJOB, REPO

BILLION_LAUGHS = """apiVersion: ray.io/v1
kind: RayJob
metadata: {name: lol, namespace: vision}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
spec: *i
"""


def admit_process(*args: str, stdin: bytes | None = None) -> tuple[int, str, float, float]:
    """``taugate admit ARGS`` as a child process: exit code, stderr, seconds, and its own peak RSS
    in MiB (``tests.child_process``: that process's rusage, not every child's of the test run)."""
    done = run_measured([sys.executable, "-m", "taugate.cli", "admit", *args, "--cluster", str(EXAMPLE_CLUSTER)],
                        cwd=REPO, stdin=stdin)
    return done.returncode, done.stderr.decode(), done.seconds, done.peak_mib


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_billion_laughs_yaml_is_refused_at_once_in_one_line(tmp_path):
    f = tmp_path / "lol.yaml"
    f.write_text(BILLION_LAUGHS)
    code, err, seconds, peak = admit_process("-f", str(f))
    assert code == 2
    assert one_line(err) == (f"taugate: {f}: document 1: YAML aliases add more than {MAX_ALIAS_VALUES:,} values "
                             f"(a \"billion laughs\" document); refused")
    assert seconds < 15 and peak < 300, (seconds, peak)


def test_a_few_aliases_as_people_write_them_are_expanded(tmp_path, capsys):
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    text = yaml.safe_dump(obj).replace("shutdownAfterJobFinishes: true", "shutdownAfterJobFinishes: true")
    f = tmp_path / "aliases.yaml"
    f.write_text("x-defaults: &resources {cpu: '1', memory: 4Gi}\n" + text.replace(
        "spec:\n", "spec:\n  entrypointResources: *resources\n", 1))
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies", "-o", "json"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_an_endless_input_is_refused_after_the_size_limit(tmp_path):
    code, err, seconds, peak = admit_process("-f", "/dev/zero")
    assert code == 2
    assert one_line(err) == ("taugate: /dev/zero: larger than 128 MiB; "
                             "taugate reads manifests and snapshots up to that size")
    assert seconds < 15 and peak < 500, (seconds, peak)


def test_a_yaml_self_reference_is_refused(tmp_path, capsys):
    f = tmp_path / "loop.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: x}\ndata: &d\n  self: *d\n")
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert "a YAML alias refers to a mapping or sequence that contains it" in one_line(capsys.readouterr().err)


def test_a_duplicate_key_is_refused_naming_both_lines(tmp_path, capsys):
    f = tmp_path / "dup.yaml"
    f.write_text("apiVersion: ray.io/v1\nkind: RayJob\n"
                 "metadata:\n  name: a\n  namespace: vision\n  name: b\nspec: {}\n")
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"taugate: {f}: invalid YAML at line 6: duplicate key 'name' (also at line 4); kubectl rejects duplicate keys")


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path, capsys):
    f = tmp_path / "merge.yaml"
    f.write_text("base: &b {name: a, namespace: vision}\napiVersion: v1\nkind: ConfigMap\n"
                 "metadata:\n  <<: *b\n  name: b\n")
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-o", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["metadata"]["name"] == "b"


def test_standard_input_is_read_with_dash(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(EXAMPLE_RAYJOB.read_bytes())))
    assert main(["admit", "-f", "-", "--cluster", str(EXAMPLE_CLUSTER), "-o", "patch", "--no-policies"]) == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["file"] == "standard input" and item["kind"] == "RayJob"
    assert {"op": "add", "path": "/spec/suspend", "value": True} in item["patch"]


def test_a_directory_is_read_recursively_like_kubectl(tmp_path, capsys):
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(obj))
    (tmp_path / "a" / "two.yml").write_text(yaml.safe_dump(obj))
    (tmp_path / "a" / "b" / "three.json").write_text(json.dumps(obj))
    (tmp_path / "a" / "notes.txt").write_text("not a manifest")
    assert main(["admit", "-f", str(tmp_path), "--cluster", str(EXAMPLE_CLUSTER), "-o", "patch", "--no-policies"]) == 0
    files = [item["file"] for item in json.loads(capsys.readouterr().out)]
    assert files == [str(tmp_path / "a" / "b" / "three.json"), str(tmp_path / "a" / "two.yml"),
                     str(tmp_path / "one.yaml")]


def test_a_directory_without_manifests_or_a_missing_path_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["admit", "-f", str(tmp_path / "empty"), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert "a directory with no *.yaml, *.yml, *.json file" in one_line(capsys.readouterr().err)
    assert main(["admit", "-f", str(tmp_path / "nope"), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert "no such file or directory" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("data, reason", [(b"\x00\x00\x00", "contains NUL bytes"), (b"\xff\xfe", "not UTF-8")])
def test_binary_input_is_one_line(tmp_path, capsys, data, reason):
    f = tmp_path / "bin.yaml"
    f.write_bytes(data)
    assert main(["admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert reason in one_line(capsys.readouterr().err)
