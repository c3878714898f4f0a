"""The active policy set of one folder, reloaded when its files change (ARCHITECTURE.md section 3):
a changed set becomes active only after the store's ``gate`` (else ``check_policy_set``) and every
activation hook (the OPA backend pushes there) accept it; otherwise the previous set keeps serving
and ``PolicySetCurrent`` (``/readyz``) is False with the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from prometheus_client import Counter, Gauge

from taugate.webhook.policy.embedded import build_regorus_engine, check_policy_set
from taugate.webhook.policy.sets import DEFAULT_ENFORCEMENT_FILE, PolicyError, PolicySet, read_policy_set

log = logging.getLogger("taugate.policy")

POLICY_RELOADS = Counter("taugate_policy_reloads_total",
                         "Policy sets activated after a change on disk (initial load excluded).")
POLICY_RELOAD_FAILURES = Counter("taugate_policy_reload_failures_total",
                                 "Changed policy sets rejected (parse, compile or test failure); "
                                 "the previous set kept serving.")
POLICY_SET_BROKEN = Gauge("taugate_policy_set_broken",
                          "1 while the policy files on disk fail to load and an older set is serving, else 0.")


def _fingerprint(root: Path, extra: Path | None) -> tuple:
    items: list[tuple[str, int | None, int | None]] = []  # (path, mtime ns, size); None: unreadable
    try:
        paths = sorted(root.rglob("*.rego"))
    except OSError:
        paths = []
    if extra is not None:
        paths.append(extra)
    elif (root / DEFAULT_ENFORCEMENT_FILE).exists():
        paths.append(root / DEFAULT_ENFORCEMENT_FILE)
    for p in paths:
        try:
            st = p.stat()
            items.append((str(p), st.st_mtime_ns, st.st_size))
        except OSError:
            items.append((str(p), None, None))
    return tuple(items)


def set_change(old: PolicySet, new: PolicySet) -> dict[str, list[str]]:
    """What activating ``new`` in place of ``old`` changes, by policy name: ``activated`` (new
    policies), ``deactivated`` (policies no longer served), ``enforcement`` (``name: old -> new`` of a
    policy whose configured action changed) and ``changed`` (a policy whose Rego source changed)."""
    before, after = set(old.policies.values()), set(new.policies.values())

    def source(ps: PolicySet, name: str) -> dict[str, str]:
        return {m.rel: m.source for m in ps.modules if Path(m.rel).parts[0] == name}

    both = sorted(before & after)
    return {"activated": sorted(after - before), "deactivated": sorted(before - after),
            "enforcement": [f"{n}: {old.enforcement.get(n, 'default')} -> {new.enforcement.get(n, 'default')}"
                            for n in both if old.enforcement.get(n) != new.enforcement.get(n)],
            "changed": [n for n in both if source(old, n) != source(new, n)]}


class PolicyStore:
    """``current`` is the active ``PolicySet`` (read it once per request: it is immutable). On a
    failed reload the old set keeps serving, ``last_error`` holds the one-line reason, the failure
    is logged and counted. Whoever runs the store polls ``check_for_changes`` in a worker thread:
    compiling never blocks an event loop.
    """

    def __init__(self, policy_dir: str | Path, enforcement: dict[str, str] | str | Path | None = None, *,
                 check_tests: bool = True, gate: Callable[[PolicySet], None] | None = None):
        self.policy_dir = Path(policy_dir)
        self._enforcement = enforcement
        self._enforcement_path = Path(enforcement) if isinstance(enforcement, (str, Path)) else None
        self._check_tests = check_tests
        self.gate = gate
        self._lock = threading.Lock()
        self._hooks: list[Callable[[PolicySet, PolicySet | None], None]] = []
        self.last_error: str | None = None
        self._failed_digest: str | None = None
        self._fp = _fingerprint(self.policy_dir, self._enforcement_path)
        self.current: PolicySet = self._load()

    @classmethod
    def serving(cls, ps: PolicySet) -> PolicyStore:
        """A store that serves one already checked set as it is (no loading until
        ``check_for_changes``, which then reloads from ``ps.root``)."""
        store = cls.__new__(cls)
        store.policy_dir = ps.root
        store._enforcement = ps.enforcement_file or (dict(ps.enforcement) if ps.enforcement else None)
        store._enforcement_path = Path(ps.enforcement_file) if ps.enforcement_file else None
        store._check_tests = True
        store.gate = None
        store._lock = threading.Lock()
        store._hooks = []
        store.last_error = None
        store._failed_digest = None
        store._fp = _fingerprint(store.policy_dir, store._enforcement_path)
        store.current = ps
        return store

    def _load(self) -> PolicySet:
        ps = read_policy_set(self.policy_dir, self._enforcement)
        if self._check_tests:
            check_policy_set(ps)
        else:
            build_regorus_engine(ps)
        return ps

    @property
    def digest(self) -> str:
        return self.current.digest

    def add_activation_hook(self, hook: Callable[[PolicySet, PolicySet | None], None]) -> None:
        """``hook(new, old)`` runs before a new set becomes active (and at once for the current
        set, with ``old`` None); if it raises ``PolicyError``, the new set is rejected."""
        hook(self.current, None)
        self._hooks.append(hook)

    def reload(self) -> bool:
        """Load the folder now; activate it if it differs and passes. Returns True when a new
        set became active. Never raises for a bad set: see ``last_error``."""
        with self._lock:
            self._fp = _fingerprint(self.policy_dir, self._enforcement_path)
            try:
                ps = read_policy_set(self.policy_dir, self._enforcement)
            except PolicyError as e:
                return self._failed(str(e), None)
            if ps.digest == self.current.digest:
                self._ok()
                return False
            if ps.digest == self._failed_digest:
                return False
            try:
                if self.gate is not None:
                    self.gate(ps)
                elif self._check_tests:
                    check_policy_set(ps)
                else:
                    build_regorus_engine(ps)
                for hook in self._hooks:
                    hook(ps, self.current)
            except PolicyError as e:  # compile or test failure, or an activation hook's (OPA push)
                return self._failed(str(e), ps.digest)
            old, self.current = self.current, ps
            self._ok()
            POLICY_RELOADS.inc()
            change = set_change(old, ps)
            log.info("policy set %s activated (was %s): %s", ps.digest[:12], old.digest[:12],
                     "; ".join(f"{k} {', '.join(v)}" for k, v in change.items() if v) or "no policy changed",
                     extra={"decision": "policy-set", "digest": ps.digest, "previous": old.digest, **change})
        return True

    def condition(self) -> dict[str, str]:
        """The ``PolicySetCurrent`` condition (``metav1.Condition``'s fields): ``True`` when the set
        on disk is the one serving, ``False`` with reason ``ReloadRejected`` and the gate's
        one-line message while a changed set stays inactive."""
        if self.last_error is None:
            return {"type": "PolicySetCurrent", "status": "True", "reason": "Serving",
                    "message": f"serving policy set {self.current.digest[:12]} from {self.policy_dir}"}
        return {"type": "PolicySetCurrent", "status": "False", "reason": "ReloadRejected",
                "message": f"still serving {self.current.digest[:12]}; the changed set is inactive: {self.last_error}"}

    def _ok(self) -> None:
        self.last_error = None
        self._failed_digest = None
        POLICY_SET_BROKEN.set(0)

    def _failed(self, reason: str, digest: str | None) -> bool:
        if reason != self.last_error:
            POLICY_RELOAD_FAILURES.inc()
            log.error("policy reload rejected, still serving %s: %s", self.current.digest[:12], reason)
        self.last_error = reason
        self._failed_digest = digest
        POLICY_SET_BROKEN.set(1)
        return False

    def check_for_changes(self) -> bool:
        """Reload when any policy file's mtime/size changed (cheap: stat only). True when a new set
        became active."""
        if _fingerprint(self.policy_dir, self._enforcement_path) == self._fp:
            return False
        return self.reload()
