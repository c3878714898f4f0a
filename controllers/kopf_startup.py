"""What each of taugate's kopf operators (the controllers', the recorder's) starts with: its login
and kopf settings (``register_connection``), kopf's routine handler lines at DEBUG
(``quiet_routine_handler_lines``), and one change to kopf's start-up, for fleets
(``wake_waiters_only_on_change``): a readiness toggle added or dropped wakes the waiters only when
what they wait for changed.

kopf (1.45, ``_core/reactor/queueing.py`` and ``processing.py``) lets no handler run until every
watched object is indexed: each object of the initial listing adds a toggle to the operator's
``ToggleSet`` (``_cogs/aiokits/aiotoggles.py``), drops it once indexed, and then waits until the
whole set is on. ``make_toggle`` and ``drop_toggle`` call ``notify_all`` every time, so N objects
listed are 2N wake-ups of up to N waiting objects, each scheduled on the event loop and each
re-checking the set: quadratic. Measured on the fleet benchmark (docs/performance.md): an operator
restarted beside 2,000 runs (their Jobs, Workloads and Pods) and 2,500 Nodes spent minutes of one
core in ``Condition.notify_all`` before its first workspace reconcile.

Here both still change the set under its condition, but notify only when ``is_on()`` (what every
waiter's predicate reads) differs before and after; a toggle's own ``turn_to`` notifies through
the same condition as before. A waiter woken by nothing it checks would wait again, so the
behaviour is the same, without the quadratic wake-ups. ``is_on`` is ``all`` over toggles created
off, so it stops at the first one still off.

If kopf's internals differ (another version), nothing is changed and one line is logged: the
operator is correct either way, only slower to start with many objects.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

import kopf
import kubernetes.client

log = logging.getLogger("taugate.operator")


class RoutineAtDebug(logging.Filter):
    """kopf's ``Handler '<id>' succeeded.`` line (kopf ``_core/actions/execution.py``
    ``execute_handler_once``, INFO on ``kopf.objects``) at DEBUG: the handlers run for every watch
    event, a Node heartbeat included (1,273 lines in 11 minutes with 10 kwok nodes at INFO).
    kopf's failures and retries keep their levels; a record kept is rewritten to DEBUG, so
    ``--log-level debug`` still shows it."""

    ROUTINE = re.compile(r"^(Handler|Timer|Daemon|Activity) '[^']*' succeeded\.$")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str) or not self.ROUTINE.match(record.msg):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


ROUTINE_AT_DEBUG = RoutineAtDebug()
KOPF_HANDLER_LOGGERS = ("kopf.objects",)
"""``kopf.objects``: kopf's ``ObjectLogger`` of every resource handler."""


def quiet_routine_handler_lines() -> None:
    """Put ``ROUTINE_AT_DEBUG`` on kopf's handler loggers (idempotent)."""
    for name in KOPF_HANDLER_LOGGERS:
        logging.getLogger(name).addFilter(ROUTINE_AT_DEBUG)


def connection_info(cfg: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the controllers' ``Configuration``; the token is refreshed first
    when the configuration can (the in-cluster service account token rotates)."""
    hook = getattr(cfg, "refresh_api_key_hook", None)
    if callable(hook):
        hook(cfg)
    token = None
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if auth:
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert or None, insecure=not cfg.verify_ssl, token=token,
        certificate_path=cfg.cert_file or None, private_key_path=cfg.key_file or None)


def register_connection(registry: kopf.OperatorRegistry, cfg: kubernetes.client.Configuration,
                        test_mode: bool) -> None:
    """Login with ``cfg`` and kopf's settings (``test_mode``: short batching, no Kubernetes events
    posted): what each of taugate's kopf operators (the controllers', the recorder's) starts with."""

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(cfg)

    @kopf.on.startup(registry=registry)
    def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.standalone = True
        settings.scanning.disabled = True
        settings.posting.enabled = not test_mode
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 30
        if test_mode:
            settings.queueing.idle_timeout = 1.0
            settings.queueing.exit_timeout = 1.0
            settings.watching.reconnect_backoff = 0.05
            settings.networking.connect_timeout = 2


def wake_waiters_only_on_change() -> bool:
    """Install the change (idempotent); True when kopf has the ``ToggleSet`` it applies to."""
    try:
        toggles = importlib.import_module("kopf._cogs.aiokits.aiotoggles")
        toggle_set, toggle_cls = toggles.ToggleSet, toggles.Toggle
        make, drop = toggle_set.make_toggle, toggle_set.drop_toggle
        if not hasattr(toggle_set, "is_on") or not {"_condition", "_toggles"} <= set(
                toggle_set.__init__.__code__.co_names):
            raise AttributeError("ToggleSet keeps no _condition and _toggles")
    except (ImportError, AttributeError) as e:
        log.warning("kopf's ToggleSet is not the one this change knows (%s): start-up with many objects "
                    "is slower", e)
        return False
    if getattr(drop, "_taugate", False):
        return True

    async def make_toggle(self: Any, __val: bool = False, *, name: str | None = None) -> Any:
        toggle = toggle_cls(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggle(self: Any, toggle: Any) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.discard(toggle)
            if self.is_on() != before:
                self._condition.notify_all()

    for fn, kopf_fn in ((make_toggle, make), (drop_toggle, drop)):
        setattr(fn, "_taugate", True)  # noqa: B010 - marks the installed change
        fn.__doc__ = kopf_fn.__doc__
    toggle_set.make_toggle, toggle_set.drop_toggle = make_toggle, drop_toggle
    return True
