"""One change to kopf's start-up, for fleets: a readiness toggle added or dropped wakes the
waiters only when what they wait for changed.

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
from typing import Any

log = logging.getLogger("taugate.operator")


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
