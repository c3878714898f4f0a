"""Kubernetes Events on a workload for what taugate said about its UPDATE (ARCHITECTURE.md section
2), off the request path: a bounded queue and a background sender that drops what does not fit, as
Kyverno's event generator (kyverno pkg/event/controller.go). An Event is built as client-go's
recorder builds one (k8s.io/client-go tools/events/event_recorder.go ``makeEvent``) within the API
server's rules (k8s.io/kubernetes pkg/apis/core/validation/events.go ``ValidateEventCreate``: a note
of at most 1024 characters, a reporting instance of at most 128). A failed write is never retried.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import Counter

from taugate.kubeaccess import Resource
from taugate.webhook.decision import Decision

log = logging.getLogger("taugate.webhook.events")

EVENTS = Resource("events.k8s.io", "v1", "events", "Event", True)
REPORTING_CONTROLLER = "taugate"
NOTE_LIMIT = 1024
INSTANCE_LIMIT = 128
NAME_LIMIT = 253
QUEUE_SIZE = 1000
"""Events waiting to be written (Kyverno's ``maxQueuedEvents`` default is 1000)."""
EVENTS_PER_SECOND = 10.0
"""Writes a second at most: a researcher updating in a loop cannot turn the webhook into a load on
the API server; what does not fit in the queue meanwhile is dropped and counted."""

REASONS = {"/mutate": "Restored", "/validate": "PolicyWarning"}
DENIED = "PolicyViolation"

SENT = Counter("taugate_events", "Kubernetes Events taugate wrote about admitted updates, by result",
               ["result"])
DROPPED = Counter("taugate_events_dropped", "Events not written because the queue was full (the webhook "
                                            "never waits on one)")


class EventWriter(Protocol):
    """What the sender needs of an API client (``taugate.kube.Kube``, wired by the CLI)."""

    def create(self, res: Resource, obj: dict) -> dict | None: ...


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def event_for(path: str, req: dict, decision: Decision, *, instance: str, now: datetime) -> dict | None:
    """The Event for webhook ``path``'s answer ``decision`` to ``req``, or None when there is none:
    not an UPDATE, a dry run, no stored object with a uid, or nothing said (allowed, no warning)."""
    old = req.get("oldObject")
    meta = old.get("metadata") if isinstance(old, dict) else None
    if req.get("operation") != "UPDATE" or req.get("dryRun") is True or not isinstance(meta, dict):
        return None
    name, uid, namespace = meta.get("name"), meta.get("uid"), req.get("namespace")
    if not (isinstance(name, str) and name and isinstance(uid, str) and uid and isinstance(namespace, str)
            and namespace):
        return None
    if not decision.allowed:
        reason, lines = DENIED, [v.render() for v in decision.violations] or [decision.reason]
    elif decision.warnings and path in REASONS:
        reason, lines = REASONS[path], list(decision.warnings)
    else:
        return None
    kind, user = req.get("kind"), req.get("userInfo")
    kind, user = (kind if isinstance(kind, dict) else {}), (user if isinstance(user, dict) else {})
    group, version = kind.get("group") or "", kind.get("version") or ""
    who = user.get("username") if isinstance(user.get("username"), str) else "?"
    stamp = int(now.timestamp() * 1e9)
    note = f"update by {who}: " + " | ".join(lines)
    return {"apiVersion": EVENTS.api_version, "kind": EVENTS.kind,
            "metadata": {"name": f"{name[:NAME_LIMIT - 17]}.{stamp:x}", "namespace": namespace},
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "type": "Warning", "reason": reason,
            "action": "Update" if decision.allowed else "Deny",
            "reportingController": REPORTING_CONTROLLER, "reportingInstance": _clip(instance, INSTANCE_LIMIT),
            "regarding": {"apiVersion": f"{group}/{version}" if group else version, "kind": kind.get("kind") or "",
                          "namespace": namespace, "name": name, "uid": uid},
            "note": _clip(note, NOTE_LIMIT)}


class EventSender:
    """The bounded queue and the background thread that writes Events."""

    def __init__(self, writer: EventWriter, *, instance: str | None = None, queue_size: int = QUEUE_SIZE,
                 per_second: float = EVENTS_PER_SECOND):
        self.writer = writer
        self.instance = instance or os.environ.get("HOSTNAME") or "taugate-webhook"
        self.queue: queue.Queue[dict] = queue.Queue(maxsize=queue_size)
        self.interval = 1.0 / per_second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taugate-events", daemon=True)
        self._thread.start()

    def offer(self, path: str, req: dict, decision: Decision) -> bool:
        """Queue the Event of this answer, if it has one (never waits). Returns whether one was queued."""
        event = event_for(path, req, decision, instance=self.instance, now=datetime.now(UTC))
        if event is None:
            return False
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            DROPPED.inc()
            return False
        return True

    def _run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            try:
                event = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            wait = last + self.interval - time.monotonic()
            if wait > 0 and self._stop.wait(wait):  # the rate limit; stop promptly on close
                return
            last = time.monotonic()
            self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        try:
            self.writer.create(EVENTS, event)
        except Exception as e:  # an Event is a courtesy: never retried, never fatal
            SENT.labels("failed").inc()
            ref = event["regarding"]
            log.warning("could not write the %s Event on %s %s/%s: %s", event["reason"], ref["kind"],
                        ref["namespace"], ref["name"], e)
            return
        SENT.labels("written").inc()

    def close(self) -> None:
        """Stop the sender (Events still queued are dropped)."""
        self._stop.set()
        self._thread.join(timeout=5)
