"""kopf's routine ``Handler '<id>' succeeded.`` line (one per watch event: every Node heartbeat) is
DEBUG, so the operator at INFO logs what changed, not that the cluster is alive; kopf's failures
keep their levels. The rate on a real cluster is measured in
``tests/e2e/test_operator_logs_scale_with_events.py``."""

from __future__ import annotations

import logging

import pytest

from taugate.controllers.kopf_startup import quiet_routine_handler_lines


@pytest.fixture
def kopf_objects(caplog):
    quiet_routine_handler_lines()
    return logging.getLogger("kopf.objects")


def test_a_handler_success_is_not_logged_at_info(kopf_objects, caplog):
    with caplog.at_level(logging.INFO):
        kopf_objects.info("Handler '_node' succeeded.")
        kopf_objects.info("Timer '_tick' succeeded.")
    assert caplog.records == []


def test_a_handler_success_is_logged_at_debug_as_debug(kopf_objects, caplog):
    with caplog.at_level(logging.DEBUG):
        kopf_objects.info("Handler '_node' succeeded.")
    [rec] = caplog.records
    assert (rec.levelname, rec.getMessage()) == ("DEBUG", "Handler '_node' succeeded.")


def test_failures_and_other_kopf_lines_keep_their_level(kopf_objects, caplog):
    with caplog.at_level(logging.INFO):
        kopf_objects.error("Handler '_node' failed with an exception and will try again in 60 seconds: boom")
        kopf_objects.info("Handler '_node' succeeded. (and something else)")
    assert [r.levelname for r in caplog.records] == ["ERROR", "INFO"]
