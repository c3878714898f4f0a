"""Every command README.md shows is run by a test. The quick start and the quoted denial are run
here, as written, and must print what the README says; each command of the commands table must be
a subcommand whose help names every flag the row shows; every other command is run by the test
``ELSEWHERE`` names for it, whose source must hold the command. A command added to the README
without one of these fails ``test_every_readme_command_is_accounted_for``."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.install.chart import REPO

README = (REPO / "README.md").read_text()
COMMAND_WORDS = ("taugate", "kubectl", "helm", "python", "python3", "pip", "bash", "docker")

ELSEWHERE = {
    # command as the README shows it: (the file that runs it, a text that file holds where it does)
    "pip install -e .": ("scripts/install-test-deps.sh", "pip install -q -e '.[test]'"),
    "bash scripts/install-test-deps.sh": (".ci/run", "bash scripts/install-test-deps.sh"),
    "python3 -m pytest": (".ci/run", "python3 -m pytest"),
    "docker build -t REGISTRY/taugate:0.1.0 .": ("tests/install/test_image_and_docs.py", "Dockerfile"),
    "docker push REGISTRY/taugate:0.1.0": ("tests/e2e/test_helm_installs_upgrades_rolls_back_and_uninstalls.py",
                                            "REGISTRY"),
    "helm install taugate charts/taugate -n taugate-system --create-namespace --set image.repository=REGISTRY/taugate":
        ("tests/e2e/test_helm_installs_upgrades_rolls_back_and_uninstalls.py", 'startswith("helm install taugate ")'),
    "helm install": ("tests/e2e/test_helm_installs_upgrades_rolls_back_and_uninstalls.py", 'helm("install"'),
    "helm test": ("tests/e2e/test_helm_installs_upgrades_rolls_back_and_uninstalls.py", 'helm("test"'),
    "helm uninstall": ("tests/e2e/test_helm_installs_upgrades_rolls_back_and_uninstalls.py", 'helm("uninstall"'),
    "kubectl apply": ("tests/e2e/test_our_examples_apply_as_written.py", 'kubectl("apply", "-f"'),
    "kubectl get tauruns": ("tests/e2e/test_the_whole_run.py", '"get", "tauruns"'),
    "kubectl get policyreports -n <workspace>": ("tests/e2e/test_policy_reports.py", '"get", "policyreports", "-n"'),
    "kubectl tau status RUN": ("tests/e2e/test_the_whole_run.py", '"tau", "status"'),
    "kubectl tau status": ("tests/e2e/test_the_whole_run.py", '"tau", "status"'),
    "taugate admit --cluster live": ("tests/e2e/test_admit_against_the_live_cluster.py", '"--cluster", "live"'),
    # the plugin is not on the Go module proxy: its objects, recorded from its source, are replayed
    "kubectl ray job submit": ("tests/e2e/test_kuberay_kubectl_plugin.py", "rayjob-submit.yaml"),
    "kubectl ray create cluster": ("tests/e2e/test_kuberay_kubectl_plugin.py", "raycluster-create.yaml"),
    "python -m tests.e2e.up": ("tests/e2e/test_up_starts_the_platform_to_look_around_with.py", '"tests.e2e.up"'),
    "python bench/e2e.py": ("tests/e2e/test_bench_e2e.py", "from bench import e2e"),
    "python bench/fleet.py": ("tests/e2e/test_bench_fleet.py", "from bench import fleet"),
    "python bench/api_policy.py": ("tests/e2e/test_bench_api_policy.py", "from bench import api_policy"),
    "python bench/run.py": ("tests/install/test_every_readme_command_is_run_by_a_test.py", '"bench/run.py", "--help"'),
    "taugate serve": ("tests/server/process.py", '"serve"'),
    "taugate admit": ("tests/install/test_every_readme_command_is_run_by_a_test.py", "QUICK_START"),
}


def readme_commands() -> list[str]:
    """The commands of README.md: each line of a code block starting with a command word (``$ ``
    prompts dropped, ``&&`` chains split), and each inline code span that is one."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", README, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            found += [p.strip() for p in line.split("&&") if p.strip().split(" ")[0] in COMMAND_WORDS]
    prose = re.sub(r"^```.*?^```", "", README, flags=re.M | re.S)
    found += [s for s in re.findall(r"`([^`\n]+ [^`\n]+)`", prose) if s.split(" ")[0] in COMMAND_WORDS]
    return list(dict.fromkeys(c.replace("\\|", "|") for c in found))


def table_commands() -> list[str]:
    """The first cell's commands of each row of the README's commands table."""
    table = README.split("## Commands", 1)[1].split("\n\n## ", 1)[0]
    return [c.replace("\\|", "|") for row in re.findall(r"^\| (`taugate .*?) \| ", table, re.M)
            for c in re.findall(r"`(taugate [^`]+)`", row)]


QUICK_START = "taugate admit -f examples/rayjob-image-classifier.yaml --cluster examples/cluster.yaml"


def _run(command: str) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    return subprocess.run([sys.executable, "-m", "taugate.cli", *words[1:]], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_every_readme_command_is_accounted_for():
    quoted = {QUICK_START, "taugate admit -f examples/rayjob-nine-gpus.yaml --cluster examples/cluster.yaml"}
    left = [c for c in readme_commands() if c not in ELSEWHERE and c not in quoted and c not in table_commands()]
    assert left == []


@pytest.mark.parametrize("command", sorted(ELSEWHERE))
def test_the_test_named_for_a_command_runs_it(command):
    path, fragment = ELSEWHERE[command]
    assert fragment in (REPO / path).read_text(), f"{path} does not hold {fragment!r}"


def test_the_quick_start_admits_the_example_rayjob_into_its_workspace_queue():
    out = _run(QUICK_START)
    assert out.returncode == 0, out.stderr
    admitted = yaml.safe_load(out.stdout)
    assert admitted["kind"] == "RayJob"
    assert admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision-queue"
    assert admitted["spec"]["suspend"] is True


def test_the_quoted_denial_is_what_taugate_prints():
    quoted = README.split("```\n$ taugate admit -f examples/rayjob-nine-gpus.yaml", 1)[1].split("```", 1)[0]
    out = _run("taugate admit -f examples/rayjob-nine-gpus.yaml --cluster examples/cluster.yaml")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines() == quoted.strip().splitlines()[1:]


@pytest.mark.parametrize("command", table_commands())
def test_each_command_of_the_table_has_the_flags_the_table_shows(command):
    words = [w for w in re.split(r"[\s\[\]|]+", command) if w]
    sub = [w for w in words[1:] if re.fullmatch(r"[a-z][a-z-]+", w)]
    # the subcommand words: `policy test`, `certs generate`, `evidence show`; then its flags
    path = []
    for w in sub:
        probe = subprocess.run([sys.executable, "-m", "taugate.cli", *path, w, "--help"], capture_output=True,
                               text=True, timeout=60)
        if probe.returncode != 0:
            break
        path.append(w)
    assert path, f"{command}: no subcommand of taugate"
    help_text = subprocess.run([sys.executable, "-m", "taugate.cli", *path, "--help"], capture_output=True,
                               text=True, timeout=60, check=True).stdout
    flags = [w for w in words if w.startswith("-") and w != "-"]
    assert [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text)] == []


def test_the_benchmark_the_readme_names_parses_its_options():
    out = subprocess.run([sys.executable, "bench/run.py", "--help"], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.returncode == 0 and "--quick" in out.stdout
