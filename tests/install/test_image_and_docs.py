"""The image the chart runs and the documents an operator follows agree with the code: the
Dockerfile installs every package and the policy library and runs as the user the chart expects;
the metrics and alerts in docs/metrics.md are the ones the server exports and the chart's
PrometheusRule fires; the runbook's commands name objects and values the chart really has."""

from __future__ import annotations

import re
import shlex
import tomllib

import helm_python
import pytest
import setuptools

from taugate import labels
from taugate.settings import Settings
from tests.install.chart import REPO, VARIANTS, chart, find, objects, one, pod_spec, render

DOCS = {name: (REPO / "docs" / name).read_text() for name in ("install.md", "runbook.md", "metrics.md")}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Metrics the docs and alerts name that no module exports yet, with the part that will export them.
NOT_YET_EXPORTED: dict[str, str] = {}


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_installs_every_package_and_the_policy_library_as_a_non_root_user(default_objects):
    steps = _dockerfile()
    assert steps[0] == ("FROM", "python:3.11-slim")
    copied = {shlex.split(args)[0].rstrip("/") for op, args in steps if op == "COPY"}
    found = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    packages = [(REPO / p.replace(".", "/")).resolve().relative_to(REPO)
                for p in setuptools.find_packages(str(REPO), include=found["include"])]
    folders = {p.parts[0] for p in packages}  # taugate/webhook is a link to webhook/: the image copies both
    assert folders == {"taugate", "webhook", "controllers", "certs"}
    assert folders | {"pyproject.toml", "policies"} <= copied
    for package in packages:
        assert (REPO / package / "__init__.py").is_file()
    ignored = {line.strip().rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert not (copied & ignored), "the Dockerfile copies something .dockerignore leaves out"
    assert any(op == "RUN" and "pip install /tmp/src" in args for op, args in steps)
    # boto3 for an s3:// evidence root, at the versions the tests run (scripts/install-test-deps.sh)
    deps = (REPO / "scripts" / "install-test-deps.sh").read_text()
    boto = next(line for line in deps.splitlines() if "--no-deps boto3" in line).split("--no-deps ")[1]
    assert any(op == "RUN" and f"pip install --no-deps {boto}" in args for op, args in steps)
    # The policy library goes where the settings look for it.
    env = " ".join(args for op, args in steps if op == "ENV")
    policy_dir = re.search(r"TAUGATE_POLICY_DIR=(\S+)", env).group(1)
    assert "policy_dir" in Settings.model_fields
    assert any(op == "COPY" and args.split()[-1].rstrip("/") == policy_dir for op, args in steps)
    # Non-root, numeric (runAsNonRoot can only verify a numeric user), the chart's user.
    user = [args for op, args in steps if op == "USER"][-1]
    uid = int(user.split(":")[0])
    assert uid != 0 and uid == pod_spec(one(default_objects, "Deployment",
                                            "taugate-webhook"))["securityContext"]["runAsUser"]
    assert ("ENTRYPOINT", '["taugate"]') in steps and "taugate" in PYPROJECT["project"]["scripts"]


def _source_metric_names() -> set[str]:
    names = set()
    for part in ("webhook", "certs", "controllers", "taugate"):
        for path in (REPO / part).rglob("*.py"):
            text = path.read_text()
            # prometheus_client's metric classes, and the metric families of a custom collector
            constructed = r'\b(Counter|Gauge|Histogram|Summary)(?:MetricFamily)?\(\s*"(taugate_[a-z_]+)"'
            for kind, name in re.findall(constructed, text):
                names.add(name + "_total" if kind == "Counter" and not name.endswith("_total") else name)
    return names


def _rule_objects() -> list[dict]:
    return one(objects(VARIANTS["high-availability"]), "PrometheusRule")["spec"]["groups"]


def test_every_documented_metric_is_exported_by_the_server():
    documented = set(re.findall(r"`(taugate_[a-z_]+)`", DOCS["metrics.md"]))
    exported = _source_metric_names()
    for required in ("taugate_admission_requests_total", "taugate_admission_duration_seconds",
                     "taugate_state_age_seconds",
                     "taugate_policy_reload_failures_total", "taugate_admission_deadline_exceeded_total",
                     "taugate_certificate_expiry_timestamp_seconds"):
        assert required in documented
    assert documented - exported <= set(NOT_YET_EXPORTED), documented - exported
    assert exported - documented == set(), "exported but not documented in docs/metrics.md"


def test_the_alerts_use_documented_metrics_and_every_alert_is_documented():
    rules = [r for g in _rule_objects() for r in g["rules"]]
    documented_metrics = set(re.findall(r"`(taugate_[a-z_]+)`", DOCS["metrics.md"]))
    for rule in rules:
        used = {m.removesuffix("_bucket") for m in re.findall(r"taugate_[a-z_]+", rule["expr"])}
        assert used <= documented_metrics, rule["alert"]
    alerts_in_doc = set(re.findall(r"^\| `(Taugate[A-Za-z]+)` \|", DOCS["metrics.md"], re.M))
    assert alerts_in_doc == {r["alert"] for r in rules}


def _anchors(markdown: str) -> set[str]:
    """GitHub-style anchors of the headings."""
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", markdown, re.M)}


def test_runbook_links_from_alerts_and_docs_lead_to_real_sections():
    anchors = _anchors(DOCS["runbook.md"])
    links = set(re.findall(r"runbook\.md#([a-z0-9-]+)", DOCS["metrics.md"] + DOCS["install.md"]))
    links |= {r["annotations"]["runbook"].split("#")[1]
              for g in _rule_objects() for r in g["rules"] if "runbook" in r["annotations"]}
    assert links and links <= anchors, links - anchors


def test_the_objects_the_docs_name_are_objects_the_chart_creates(rendered):
    by_kind = {"mutatingwebhookconfiguration": "MutatingWebhookConfiguration",
               "validatingwebhookconfiguration": "ValidatingWebhookConfiguration",
               "cronjob": "CronJob", "deploy": "Deployment", "job": "Job", "certificate": "Certificate"}
    everything = [o for objs in rendered.values() for o in objs]
    named = set(re.findall(r"\b(" + "|".join(by_kind) + r")/([a-z0-9-]+)", "".join(DOCS.values())))
    assert ("cronjob", "taugate-certs") in named and ("mutatingwebhookconfiguration", "taugate") in named
    for kind, name in named:
        assert find(everything, by_kind[kind], name), f"{kind}/{name} named in docs/ is not rendered"


def test_the_runbook_finds_runs_by_the_real_label_keys(default_objects):
    runbook = DOCS["runbook.md"]
    assert f"-l '!{labels.RUN_ID}'" in runbook and f"get ns -l {labels.WORKSPACE}" in runbook
    pods = pod_spec(one(default_objects, "Deployment", "taugate-webhook"))
    assert "app.kubernetes.io/component=webhook" in runbook
    assert one(default_objects, "Deployment",
               "taugate-webhook")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook"
    assert pods["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"


def _set_flags() -> list[str]:
    flags = []
    for text in DOCS.values():
        flags += re.findall(r"--set ([A-Za-z0-9_.\-]+=[^\s`]+)", text)
    return flags


@pytest.mark.parametrize("expression", sorted(set(_set_flags())))
def test_every_set_flag_in_the_docs_is_accepted_by_the_chart(expression):
    values = helm_python.parse_set_string(expression)
    render(values)  # raises on an unknown key (schema) or a value the templates refuse


def test_the_documented_emergency_switch_relaxes_every_webhook():
    switch = "admissionPolicy.enabled=false,webhook.failurePolicy=Ignore"
    assert f"--set {switch}" in DOCS["runbook.md"]
    relaxed = objects(helm_python.parse_set_string(switch))
    policies = {w["failurePolicy"] for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                for w in one(relaxed, kind)["webhooks"]}
    assert policies == {"Ignore"}


def test_the_chart_refuses_to_render_without_an_image_and_says_how_to_build_one():
    """taugate publishes no image, so the chart has no default one to pull: a render (``helm
    install``, ``helm template``) without ``image.repository`` fails with the commands that build
    and push it and the value to set, and an image that is set is used as given."""
    with pytest.raises(helm_python.HelmRenderError) as refused:
        chart().render({}, name="taugate", namespace="taugate-system", is_install=True)
    message = str(refused.value)
    for part in ("image.repository is not set", "taugate publishes no image",
                 "docker build -t REGISTRY/taugate:0.1.0 .", "docker push REGISTRY/taugate:0.1.0",
                 "--set image.repository=REGISTRY/taugate"):
        assert part in message, message
    images = {c["image"] for o in objects({"image": {"repository": "registry.corp/ml/taugate", "tag": "0.1.0-rc1"}})
              if pod_spec(o) for c in pod_spec(o)["containers"]}
    assert images == {"registry.corp/ml/taugate:0.1.0-rc1"}


def test_the_readme_and_install_guide_build_push_and_set_the_image_the_chart_requires():
    readme = (REPO / "README.md").read_text()
    for text in (readme, DOCS["install.md"]):
        assert "docker build -t REGISTRY/taugate:0.1.0 ." in text and "docker push REGISTRY/taugate:0.1.0" in text
        installs = [line for line in text.replace("\\\n", " ").splitlines() if "helm install taugate" in line]
        assert installs and all("--set image.repository=REGISTRY/taugate" in line for line in installs), installs
    notes = (REPO / "charts" / "taugate" / "templates" / "NOTES.txt").read_text()
    assert "taugate.image" in notes
