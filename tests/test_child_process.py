"""The tests' own measuring stick: a child's peak memory is its own (issue 27 item 1)."""

from __future__ import annotations

import sys

import pytest

from tests.child_process import run_measured

TOUCH_300_MIB = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"


def test_a_childs_peak_memory_is_its_own_not_that_of_a_larger_child_reaped_before():
    big = run_measured([sys.executable, "-c", TOUCH_300_MIB])
    small = run_measured([sys.executable, "-c", "pass"])
    assert big.returncode == small.returncode == 0
    assert big.peak_mib > 300 and small.peak_mib < 100, (big.peak_mib, small.peak_mib)


def test_a_childs_peak_memory_is_not_the_size_of_the_test_process_it_was_started_from():
    ballast = bytearray(300 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # the test process now holds 300 MiB more
    small = run_measured([sys.executable, "-c", "pass"])
    assert small.returncode == 0 and small.peak_mib < 100, small.peak_mib
    del ballast


def test_a_child_that_outlives_its_timeout_is_killed_and_fails_the_test():
    with pytest.raises(AssertionError, match="did not finish within 1 s"):
        run_measured([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)  # a child that hangs
