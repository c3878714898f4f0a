"""The ``Progressing`` condition: training progress read from metrics JSONL or log lines, and the
stall rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from taugate.controllers.recorder.run.values import (
    PROGRESSING,
    Finding,
    ProgressSample,
    ProgressState,
    format_micro,
    format_time,
    parse_time,
)


def parse_metrics_jsonl(text: str, step_keys: Sequence[str] = ("step", "global_step", "iteration", "epoch"),
                        ) -> tuple[int, float | None]:
    """Count metric records in JSONL text and find the largest step.

    Each non-empty line that parses as a JSON object is a record; the step is the first of
    ``step_keys`` holding a number. A last line without a newline (being written) and lines that
    do not parse are skipped. Returns ``(records, max step or None)``.
    """
    records, step = 0, None
    lines = text.split("\n")
    if lines and not text.endswith("\n"):
        lines = lines[:-1]
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        records += 1
        for k in step_keys:
            v = obj.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                step = float(v) if step is None else max(step, float(v))
                break
    return records, step


def parse_log_progress(text: str, pattern: str) -> tuple[int, float | None]:
    """Count log lines matching ``pattern`` (a Python regex) and the largest number its first
    group captures. Returns ``(matching lines, max step or None)``; raises ``re.error`` on a bad
    pattern."""
    rx = re.compile(pattern)
    count, step = 0, None
    for line in text.splitlines():
        m = rx.search(line)
        if not m:
            continue
        count += 1
        if m.groups():
            try:
                v = float(m.group(1))
            except (TypeError, ValueError):
                continue
            step = v if step is None else max(step, v)
    return count, step


def advance_progress(prev: ProgressState | None, sample: ProgressSample | None, now: datetime) -> ProgressState | None:
    """Fold one metrics reading into the progress state.

    Progress advanced when the reading has more records or a larger step than before (a log
    read through ``tailLines`` may count fewer lines: then only the step decides). A reading that
    did not advance keeps ``last_advance``.
    """
    if sample is None or sample.records <= 0:
        return prev
    t = format_micro(now)
    if prev is None:
        return ProgressState(sample.source, sample.records, sample.step, t, t)
    if sample.step is not None and prev.step is not None:
        advanced = sample.step > prev.step
    else:
        advanced = sample.records > prev.records or (sample.step is not None and prev.step is None)
    if not advanced:
        return prev
    return ProgressState(sample.source, sample.records, sample.step if sample.step is not None else prev.step,
                         t, prev.first_advance)


def _src_text(src: Mapping) -> str:
    if src.get("kind") == "File":
        return str(src.get("path"))
    return f"{src.get('kind')} {src.get('name')}" + (f" container {src['container']}" if src.get("container") else "")


def derive_progressing(progress: ProgressState | None, now: datetime, stall_after: float, *,
                       running_since: str | None, terminal: bool, expect: str = "") -> Finding | None:
    """``Progressing``: the training metrics advance.

    True (``MetricsAdvancing``) while the last advance is within ``stall_after`` seconds; False
    with reason ``Stalled`` after that quiet period (counted from the last advance, or from
    ``running_since``, the time all pods were scheduled, when no metric was ever seen).
    Unknown before the run runs. After the end, None (stall detection does not apply).
    """
    if terminal:
        return None
    quiet = timedelta(seconds=stall_after)
    if progress is None:
        start = parse_time(running_since)
        if start is None:
            return Finding(PROGRESSING, "Unknown", "NotRunning", "the run's pods are not all scheduled yet")
        if now - start > quiet:
            return Finding(PROGRESSING, "False", "Stalled",
                           f"no training metrics {int(stall_after)}s after the pods were scheduled ({running_since})"
                           + (f"; expected {expect}" if expect else ""), None, format_time(start + quiet))
        return Finding(PROGRESSING, "Unknown", "AwaitingMetrics",
                       "pods scheduled; no training metrics yet" + (f" (expected {expect})" if expect else ""))
    last = parse_time(progress.last_advance) or now
    step = f"step {progress.step:g}, " if progress.step is not None else ""
    if now - last > quiet:
        return Finding(PROGRESSING, "False", "Stalled",
                       f"no progress for {int((now - last).total_seconds())}s (> {int(stall_after)}s): last advance at "
                       f"{progress.last_advance} ({step}{progress.records} records) from {_src_text(progress.source)}",
                       progress.source, format_time(last + quiet))
    return Finding(PROGRESSING, "True", "MetricsAdvancing",
                   f"{step}{progress.records} records; last advance at {progress.last_advance} "
                   f"from {_src_text(progress.source)}",
                   progress.source, progress.first_advance)
