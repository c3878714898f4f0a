"""kopf's start-up gate with thousands of objects (``taugate/controllers/kopf_startup.py``): each
object adds and drops a toggle of the operator's ToggleSet and then waits for the whole set; the
waiters are woken when the set's state changes, not at every add and drop (which was quadratic)."""

from __future__ import annotations

import asyncio

from kopf._cogs.aiokits.aiotoggles import ToggleSet

from taugate.controllers.kopf_startup import wake_waiters_only_on_change


async def test_two_thousand_objects_indexed_wake_their_waiters_once_and_every_waiter_goes_on(monkeypatch):
    assert wake_waiters_only_on_change()
    assert wake_waiters_only_on_change()  # installing twice changes nothing
    calls = []
    real = asyncio.Condition.notify_all

    def counting(self):
        calls.append(1)
        real(self)

    monkeypatch.setattr(asyncio.Condition, "notify_all", counting)
    gate = ToggleSet(all)
    kinds = await gate.make_toggle(name="every kind listed")  # off until the listings end
    assert len(calls) == 1  # the empty set was on: it turned off
    calls.clear()
    waiters = []
    for i in range(2000):  # each object: its toggle, dropped once indexed, then it waits for all
        toggle = await gate.make_toggle(name=f"object-{i}")
        await gate.drop_toggle(toggle)
        await gate.drop_toggle(toggle)  # kopf drops it again on each later event of the object
        waiters.append(asyncio.create_task(gate.wait_for(True)))
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters) and len(calls) == 0
    await gate.drop_toggle(kinds)
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=30)
    assert len(calls) == 1 and gate.is_on()
    # and the other way: a toggle that is off turns the set off, its turning on back on
    late = await gate.make_toggle(name="late")
    assert gate.is_off() and len(calls) == 2
    again = asyncio.create_task(gate.wait_for(True))
    await late.turn_to(True)
    await asyncio.wait_for(again, timeout=30)
