"""The OPA-server backend of the policy engine (``webhook.engines.load_policy_engine(..., backend="opa")``).

The same policy set as the embedded engine is pushed to an OPA server with
``opa-python-client`` (``update_policy_from_string``: ``PUT /v1/policies/{id}``; ids are
``taugate/<path in the policy folder>``), and each decision asks it for the same document
the embedded engine evaluates (``query_rule``: ``POST /v1/data/taugate/aggregate/results``).
So both backends give the same decisions; enforcement is applied here, in Python.

The client speaks plain HTTP (``opa-python-client`` has no CA-file option): run OPA as a
sidecar on localhost. The policy set is validated locally (parse, compile, own tests) before
it is pushed, and a reload is pushed before it becomes active; when the push fails the old set
stays active (the push of the old set is retried so the server matches it again).
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

from opa_client.opa import OpaClient

from taugate.webhook.decision import Violation
from taugate.webhook.policy import AGGREGATE_PACKAGE, PolicyError, PolicyEvaluationError, PolicySet, PolicyStore

log = logging.getLogger("taugate.policy.opa")

POLICY_ID_PREFIX = "taugate"


def policy_id(rel: str) -> str:
    """The OPA policy id of a module: ``taugate/gpu-total-fits-queue/policy.rego``."""
    return f"{POLICY_ID_PREFIX}/{rel}"


class OpaServerPolicyEngine:
    """``PolicyEngine`` backed by an OPA server at ``url`` (``http://127.0.0.1:8181``).

    ``evaluate`` is synchronous (one HTTP round trip, ``requests`` session, thread-safe with a
    lock around the client); when the server answers without a result (it restarted and lost
    its policies) the set is pushed again and the query retried once. Raises
    ``PolicyEvaluationError`` when the server cannot be reached or still has no result, and
    ``PolicyError`` at construction when it rejects the policies.
    """

    def __init__(self, store: PolicyStore, url: str, *, timeout_s: float = 1.5):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PolicyError(f"opa_url {url!r} is not an http(s) URL such as http://127.0.0.1:8181")
        self.url = url
        self.store = store
        self._lock = threading.RLock()
        self._client = OpaClient(host=parts.hostname, port=parts.port or (443 if parts.scheme == "https" else 80),
                                 ssl=parts.scheme == "https", timeout=timeout_s, retries=0)
        self._pushed: set[str] = set()
        try:
            store.add_activation_hook(self._activate)
        except PolicyError:
            raise
        except Exception as e:
            raise PolicyError(f"cannot push policies to OPA at {url}: {e.__class__.__name__}: {e}") from None

    @property
    def digest(self) -> str:
        return self.store.current.digest

    def push(self, ps: PolicySet) -> None:
        """Push every serving module of ``ps`` (helpers first, the aggregate last), then delete
        the ids of modules the set no longer has."""
        modules = sorted(ps.serving_modules, key=lambda f: (f.package == AGGREGATE_PACKAGE, not f.rel.startswith("lib/"), f.rel))
        with self._lock:
            for f in modules:
                self._client.update_policy_from_string(f.source, policy_id(f.rel), rego_compat=False)
            wanted = {policy_id(f.rel) for f in modules}
            for stale in sorted(self._pushed - wanted):
                try:
                    self._client.delete_policy(stale)
                except Exception as e:  # already gone: harmless
                    log.warning("could not delete stale OPA policy %s: %s", stale, e)
            self._pushed = wanted

    def _activate(self, new: PolicySet, old: PolicySet | None) -> None:
        try:
            self.push(new)
        except Exception:
            if old is not None:
                try:
                    self.push(old)
                except Exception:
                    log.exception("could not restore the previous policy set on OPA")
            raise

    def _query(self, input: dict) -> dict:
        with self._lock:
            return self._client.query_rule(input, AGGREGATE_PACKAGE.replace(".", "/"), "results")

    def evaluate(self, input: dict) -> list[Violation]:
        """Every result of every policy for ``input`` as decided by the OPA server."""
        ps = self.store.current
        try:
            answer = self._query(input)
            if "result" not in answer:
                log.warning("OPA at %s has no taugate policies (restarted?); pushing them again", self.url)
                self.push(ps)
                answer = self._query(input)
        except Exception as e:
            raise PolicyEvaluationError(f"OPA server at {self.url} failed: {e.__class__.__name__}: {e}") from None
        if "result" not in answer:
            raise PolicyEvaluationError(f"OPA server at {self.url} returned no result for {AGGREGATE_PACKAGE}.results")
        return ps.to_violations(answer["result"])

    def start_watching(self, interval_s: float = 0.5) -> None:
        """Hot reload: see ``PolicyStore.start_watching`` (a reload is pushed before it activates)."""
        self.store.start_watching(interval_s)

    def stop_watching(self) -> None:
        self.store.stop_watching()

    def close(self) -> None:
        """Close the HTTP session."""
        self._client.close_connection()
