#!/usr/bin/env python3
"""Write the Helm chart's copy of the webhook routes: ``charts/taugate/files/routes.json``.

``webhook/routes.py`` (``ROUTES``) is the single source of the webhook's HTTPS paths and of the
rules in the Mutating/ValidatingWebhookConfigurations; the chart cannot import Python, so this
script serialises ``ROUTES`` to JSON and the templates read it with ``.Files.Get``.
``tests/install`` fails when the file is out of date.

Usage (from the repository root)::

    python scripts/chart_routes.py            # rewrite the file
    python scripts/chart_routes.py --check    # exit 1 if the file differs from ROUTES

Each route becomes ``{"key", "name", "path", "type", "namespaces", "rules": [...]}``:

- ``key``: the path without its leading slash (``/validate-tau`` -> ``validate-tau``); values
  such as ``webhook.failurePolicy.<key>`` are keyed by it.
- ``rules``: ``admissionregistration.k8s.io/v1`` ``RuleWithOperations`` objects, in ROUTES order.
- ``namespaces``: which namespaces the webhook's ``namespaceSelector`` admits. ``workspace``
  (namespaces labelled ``tau.azure.com/workspace``) for routes on workload kinds;
  ``platform`` (the platform's system namespace, where TauWorkspaces and TauQuotaRequests live)
  for routes whose rules name only ``tau.azure.com`` kinds. The cluster-scoped TauCluster is
  not filtered by any namespaceSelector (Kubernetes rule: namespaceSelector does not apply to
  cluster-scoped objects other than Namespace).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "charts" / "taugate" / "files" / "routes.json"

# API groups whose objects live in the platform's system namespace, not in workspaces.
PLATFORM_GROUPS = frozenset({"tau.azure.com"})


def routes_document() -> dict:
    """``ROUTES`` as the chart reads them: ``{"generatedFrom": str, "routes": [route, ...]}``.

    Raises ``ValueError`` if a route's path does not start with ``/`` or two routes share a key,
    because the chart keys values by it.
    """
    sys.path.insert(0, str(ROOT))
    try:
        from taugate.webhook.routes import ROUTES
    finally:
        sys.path.pop(0)
    routes, keys = [], set()
    for route in ROUTES:
        if not route.path.startswith("/"):
            raise ValueError(f"route {route.name}: path {route.path!r} must start with '/'")
        key = route.path[1:]
        if key in keys:
            raise ValueError(f"route {route.name}: key {key!r} used twice")
        keys.add(key)
        groups = {g for rule in route.rules for g in rule.api_groups}
        routes.append({
            "key": key,
            "name": route.name,
            "path": route.path,
            "type": route.type,
            "namespaces": "platform" if groups and groups <= PLATFORM_GROUPS else "workspace",
            "rules": [
                {
                    "apiGroups": list(rule.api_groups),
                    "apiVersions": list(rule.api_versions),
                    "resources": list(rule.resources),
                    "operations": list(rule.operations),
                }
                for rule in route.rules
            ],
        })
    return {"generatedFrom": "webhook/routes.py ROUTES by scripts/chart_routes.py; do not edit", "routes": routes}


def render() -> str:
    """The exact text of ``routes.json`` (2-space indented JSON, trailing newline)."""
    return json.dumps(routes_document(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the chart's routes file; exit 1 when it is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    current = OUTPUT.read_text() if OUTPUT.exists() else None
    if args.check:
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python scripts/chart_routes.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.parent.mkdir(parents=True, exist_ok=True)
        OUTPUT.write_text(text)
        print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
