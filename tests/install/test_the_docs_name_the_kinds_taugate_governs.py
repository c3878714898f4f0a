"""The texts a user reads first name every kind taugate governs, from the registry
(``taugate.kinds``) and the webhook's routes, so a new kind cannot be left out of them: the
README's opening, docs/kinds.md's table, the chart's NOTES (as Helm renders them) and
``taugate admit --help`` (which points at docs/kinds.md rather than listing kinds)."""

from __future__ import annotations

import re
import subprocess
import sys

from taugate.kinds import KINDS
from taugate.webhook.routes import ROUTES
from tests.install.chart import REPO, render

README = (REPO / "README.md").read_text()
KINDS_DOC = (REPO / "docs" / "kinds.md").read_text()


def test_the_readme_opening_names_every_governed_kind():
    opening = README.split("\n\n", 2)[1]
    missing = [k.kind for k in KINDS if not re.search(rf"\b{k.kind}\b", opening)]
    assert missing == []


def test_the_kinds_doc_has_a_row_for_every_governed_kind_at_its_api_version():
    rows = re.findall(r"^\| (\w+) \(`([^`]+)`\)", KINDS_DOC, re.M)
    assert {(k.kind, k.api_version) for k in KINDS} <= set(rows)


def test_the_charts_notes_name_every_resource_the_mutating_webhook_intercepts():
    notes = render()["taugate/templates/NOTES.txt"]
    (mutate,) = [r for r in ROUTES if r.path == "/mutate"]
    resources = {res for rule in mutate.rules for res in rule.resources}
    intercepts = notes.split("They intercept ", 1)[1].split("\n", 1)[0]
    assert set(intercepts.split(", ")) == resources


def test_no_user_facing_text_still_says_only_rayjobs_rayclusters_and_jobs():
    texts = {p: p.read_text() for p in [REPO / "README.md", *(REPO / "docs").glob("*.md"),
                                         *(REPO / "charts" / "taugate" / "templates").glob("*")]}
    help_text = subprocess.run([sys.executable, "-m", "taugate.cli", "admit", "--help"], capture_output=True,
                               text=True, check=True).stdout
    texts[REPO / "taugate admit --help"] = help_text
    stale = re.compile(r"RayJobs?, RayClusters?,? (and|or) Jobs?\b")
    assert [str(p.relative_to(REPO)) for p, t in texts.items() if stale.search(t)] == []
    assert "docs/kinds.md" in " ".join(help_text.split())
