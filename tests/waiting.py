"""Waiting on a condition with a deadline, the one way tests synchronise (never a bare sleep):
``await until(probe)`` / ``until_sync(probe)`` return the first value of ``probe()`` (awaited when
it is a coroutine) that ``check`` accepts (truthy by default), probing every ``interval``
seconds, and fail the test naming ``what`` after ``timeout`` seconds."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def until(probe: Callable[[], Any], *, check: Callable[[Any], bool] = bool, timeout: float = 10.0,
                what: str = "the condition", interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if check(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r:.200})")
        await asyncio.sleep(interval)


def until_sync(probe: Callable[[], Any], *, check: Callable[[Any], bool] = bool, timeout: float = 10.0,
               what: str = "the condition", interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r:.200})")
        time.sleep(interval)
