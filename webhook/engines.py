"""Choosing a policy backend: ``load_policy_engine`` builds the embedded engine (regorus, in
process, ``webhook/policy/engine.py``) or the OPA-server one (``webhook/policy/opa.py``) over the same
``PolicyStore``, so neither backend module imports the other."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from taugate.webhook.policy.engine import EmbeddedPolicyEngine, PolicyEngine, PolicyError, PolicyStore
from taugate.webhook.policy.opa import DEFAULT_TIMEOUT_SECONDS, OpaServerPolicyEngine
from taugate.webhook.policy_tests import reload_gate


def load_policy_engine(policy_dir: str | Path, *, enforcement: dict[str, str] | str | Path | None = None,
                       backend: Literal["embedded", "opa"] = "embedded", opa_url: str | None = None,
                       opa_timeout_s: float = DEFAULT_TIMEOUT_SECONDS) -> PolicyEngine:
    """Load the policy set in ``policy_dir`` behind the ``PolicyEngine`` interface.

    ``enforcement``: a mapping ``policy: deny|warn|dryrun``, a YAML file, or None for
    ``<policy_dir>/enforcement.yaml`` when present. ``backend``: ``embedded`` (regorus, in
    process) or ``opa`` (an OPA server at ``opa_url``, e.g. ``http://127.0.0.1:8181``; the
    policies are pushed there; one evaluation takes at most ``opa_timeout_s`` seconds,
    ``Settings.opa_timeout_seconds``). The set must parse, compile and pass its own ``test_`` rules.
    The returned engine has ``.store`` (a ``PolicyStore``: ``check_for_changes()`` reloads); a
    changed set is activated only when it passes everything ``taugate policy test`` checks
    (``policy_tests.reload_gate``).
    Raises ``PolicyError`` (one line: file, line, reason) when the set cannot load, and for an
    ``opa`` backend without a URL or whose server rejects the policies.
    """
    store = PolicyStore(policy_dir, enforcement, gate=reload_gate)
    if backend == "embedded":
        return EmbeddedPolicyEngine(store)
    if backend == "opa":
        if not opa_url:
            raise PolicyError("the opa backend needs opa_url (for example http://127.0.0.1:8181)")
        return OpaServerPolicyEngine(store, opa_url, timeout_s=opa_timeout_s)
    raise PolicyError(f"unknown policy backend {backend!r}; expected 'embedded' or 'opa'")
