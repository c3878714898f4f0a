"""``taugate serve`` and ``taugate operator`` log one JSON object a line (or text) at the level asked
by ``--log-level``/``--log-format``, ``TAUGATE_LOG_LEVEL``/``TAUGATE_LOG_FORMAT`` or the chart's
``logging`` values; a bad value is one line and exit 2."""

from __future__ import annotations

import argparse
import io
import json
import logging

import pytest

from taugate import logs
from taugate.cli import build_parser, main
from tests.install.chart import find, objects


@pytest.fixture
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def _args(level=None, fmt=None) -> argparse.Namespace:
    return argparse.Namespace(log_level=level, log_format=fmt)


def test_a_json_line_holds_time_level_logger_message_and_the_callers_fields(restore_root_logging):
    out = io.StringIO()
    logs.configure("info", "json", out)
    logging.getLogger("taugate.test").info("denied %s", "x", extra={"decision": "denied", "object": {"kind": "Job"},
                                                                     "settings": object(), "k8s_skip": False})
    logging.getLogger("taugate.test").debug("not at info")
    [line] = out.getvalue().splitlines()
    rec = json.loads(line)
    assert rec["level"] == "INFO" and rec["logger"] == "taugate.test" and rec["message"] == "denied x"
    assert rec["decision"] == "denied" and rec["object"] == {"kind": "Job"}
    assert rec["time"].endswith("+00:00") and "T" in rec["time"], "ISO 8601, UTC"
    assert "settings" not in rec and "k8s_skip" not in rec, "kopf's configuration is never written"


def test_the_text_format_is_one_plain_line(restore_root_logging):
    out = io.StringIO()
    logs.configure("debug", "text", out)
    logging.getLogger("taugate.test").debug("hello")
    assert out.getvalue().rstrip().endswith("DEBUG taugate.test: hello")


def test_the_flags_win_over_the_variables_which_win_over_info_and_json():
    env = {"TAUGATE_LOG_LEVEL": "debug", "TAUGATE_LOG_FORMAT": "text"}
    assert logs.chosen(_args(), {}) == ("info", "json")
    assert logs.chosen(_args(), env) == ("debug", "text")
    assert logs.chosen(_args("error", "json"), env) == ("error", "json")


def test_a_variable_naming_no_level_is_one_line_naming_it_and_what_is_allowed():
    with pytest.raises(ValueError, match=r"^TAUGATE_LOG_LEVEL='verbose': expected one of debug, info, warning, error$"):
        logs.chosen(_args(), {"TAUGATE_LOG_LEVEL": "verbose"})


@pytest.mark.parametrize("command", [["serve", "--cluster", "examples/cluster.yaml"], ["operator"]])
def test_serve_and_operator_refuse_a_bad_log_format_variable_with_exit_2(command, monkeypatch, capsys,
                                                                        restore_root_logging):
    monkeypatch.setenv("TAUGATE_LOG_FORMAT", "xml")
    assert main(command) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("TAUGATE_LOG_FORMAT='xml': expected one of json, text") and "\n" not in err


@pytest.mark.parametrize("command", ["serve", "operator"])
def test_serve_and_operator_take_the_log_flags(command):
    args = build_parser().parse_args([command, "--log-level", "warning", "--log-format", "text"])
    assert (args.log_level, args.log_format) == ("warning", "text")


def test_the_charts_logging_values_reach_the_webhook_and_the_operator():
    objs = objects({"logging": {"level": "debug", "format": "text"}})
    for name in ("taugate-webhook", "taugate-operator"):
        [dep] = find(objs, "Deployment", name)
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert (env["TAUGATE_LOG_LEVEL"], env["TAUGATE_LOG_FORMAT"]) == ("debug", "text"), name
    [dep] = find(objects(), "Deployment", "taugate-webhook")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["TAUGATE_LOG_LEVEL"], env["TAUGATE_LOG_FORMAT"]) == ("info", "json")
