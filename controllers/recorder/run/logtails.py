"""Pod log tails kept as evidence (pure): which containers of a pod ended and need their tail
read, the bounds of a tail (last lines and bytes), the ``log`` event of a tail read or of one
that cannot be, and which of a run's pending tails are read now.

A container instance is ``(pod uid, container, restartCount)``: Kubernetes' ``restartCount``
counts the restarts, so ``state.terminated`` is instance ``restartCount`` and
``lastState.terminated`` (the container was restarted since) instance ``restartCount - 1``,
whose log the kubelet serves as the ``previous`` one. Each instance's tail is recorded once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from taugate.access import as_dict, as_list, metadata_of
from taugate.controllers.recorder.run.values import node_name

FINAL_READ_STATUSES = frozenset({400, 404, 410})
"""HTTP statuses of a log read that reading again cannot change (the pod or the container
instance is gone, or the kubelet serves no log for it): recorded as unavailable at once. Any
other failure (a 5xx, a timeout, a refused connection, 403/429) is read again on a later pass."""


@dataclass(frozen=True)
class LogTarget:
    """One ended container instance whose log tail the evidence should hold.

    ``previous``: the instance is the container's previous one (read with ``previous=true``);
    ``deleted``: its pod was deleted before the tail was read (nothing left to read)."""

    key: str
    pod: str
    pod_uid: str
    container: str
    restart_count: int
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    finished_at: str | None = None
    init: bool = False
    previous: bool = False
    deleted: bool = False

    def gone(self) -> LogTarget:
        """The same instance, its pod deleted."""
        return replace(self, deleted=True)

    def wire(self) -> dict:
        """The fields every ``log`` event of this instance carries (``None`` left out)."""
        d = {"key": self.key, "pod": self.pod, "podUid": self.pod_uid, "container": self.container,
             "restartCount": self.restart_count, "node": self.node, "exitCode": self.exit_code,
             "reason": self.reason, "finishedAt": self.finished_at, "init": self.init or None}
        return {k: v for k, v in d.items() if v is not None}


def log_key(pod_uid: str, container: str, restart_count: int) -> str:
    """The instance's key: ``<pod uid>/<container>/<restartCount>``."""
    return f"{pod_uid}/{container}/{restart_count}"


def _count(cs: Mapping) -> int:
    n = cs.get("restartCount")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def log_targets(pod: Mapping) -> list[LogTarget]:
    """The ended container instances of ``pod`` (init containers too), from
    ``status.initContainerStatuses`` and ``status.containerStatuses``: ``state.terminated`` is
    instance ``restartCount``, ``lastState.terminated`` instance ``restartCount - 1`` (read as
    the previous log). A container that never terminated needs no tail."""
    meta = metadata_of(pod)
    name = str(meta.get("name") or "?")
    uid = str(meta.get("uid") or name)
    node = node_name(pod)
    status = as_dict(pod.get("status"))
    out: dict[str, LogTarget] = {}
    for list_name in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(list_name)):
            if not isinstance(cs, dict) or not isinstance(cs.get("name"), str) or not cs["name"]:
                continue
            restarts = _count(cs)
            for which, instance, previous in (("state", restarts, False), ("lastState", restarts - 1, True)):
                term = as_dict(as_dict(cs.get(which)).get("terminated"))
                if not term or instance < 0:
                    continue
                key = log_key(uid, cs["name"], instance)
                if key in out:
                    continue
                code = term.get("exitCode")
                finished = term.get("finishedAt")
                out[key] = LogTarget(
                    key=key, pod=name, pod_uid=uid, container=cs["name"], restart_count=instance, node=node,
                    exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                    reason=str(term["reason"]) if term.get("reason") else None,
                    finished_at=finished if isinstance(finished, str) else None,
                    init=list_name == "initContainerStatuses", previous=previous)
    return list(out.values())


@dataclass(frozen=True)
class Tail:
    """A bounded log tail: ``text`` (whole lines where it can), its line count, and whether the
    log held more than was kept."""

    text: str
    lines: int
    truncated: bool


def bound_tail(text: str, max_lines: int, max_bytes: int) -> Tail:
    """The last ``max_lines`` lines of ``text`` that fit in ``max_bytes`` bytes of UTF-8.

    ``text`` is what the API server sent for ``tailLines = max_lines + 1``: more than
    ``max_lines`` lines means the log is longer than the tail (``truncated``). When the lines do
    not fit the byte bound, the oldest are dropped; a last line longer than the bound keeps its
    end (cut at a character boundary). A final newline does not count as a line."""
    lines = text.splitlines(keepends=True)
    truncated = len(lines) > max_lines
    lines = lines[len(lines) - max_lines:] if truncated else lines
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        n = len(line.encode("utf-8"))
        if size + n > max_bytes:
            truncated = True
            if not kept:  # one line longer than the bound: its end
                raw = line.encode("utf-8")[-max_bytes:]
                kept.append(raw.decode("utf-8", errors="ignore"))
            break
        kept.append(line)
        size += n
    out = "".join(reversed(kept))
    return Tail(out, len(kept), truncated)


def sha256_text(text: str) -> str:
    """The SHA-256 of ``text``'s UTF-8 bytes, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tail_event(target: LogTarget, tail: Tail, *, max_lines: int, max_bytes: int) -> dict:
    """The ``log`` event data of a tail read: the instance, the text, its line count, bytes,
    whether it was truncated (and the bounds), and the SHA-256 of the text."""
    return {**target.wire(), "text": tail.text, "lines": tail.lines, "bytes": len(tail.text.encode("utf-8")),
            "truncated": tail.truncated, "limits": {"lines": max_lines, "bytes": max_bytes},
            "sha256": sha256_text(tail.text)}


def unavailable_event(target: LogTarget, reason: str, message: str = "") -> dict:
    """The ``log`` event data of a tail that cannot be read: ``unavailable`` says why
    (``PodDeleted``, ``NotFound``, ``NotServed``, ``ReadFailed``), ``message`` what the API said."""
    d = {**target.wire(), "unavailable": reason}
    if message:
        d["message"] = message[:1024]
    return d


def unavailable_reason(status: int | None) -> str:
    """The ``unavailable`` reason of a failed read given up on (HTTP ``status``, None without a
    response)."""
    if status in (404, 410):
        return "NotFound"
    if status == 400:
        return "NotServed"
    return "ReadFailed"


def read_is_final(status: int | None) -> bool:
    """Whether a read that failed with HTTP ``status`` is not worth repeating (``FINAL_READ_STATUSES``)."""
    return status in FINAL_READ_STATUSES


@dataclass(frozen=True)
class TailPlan:
    """What a reconcile does with a run's pending tails: ``read`` (read them now), ``gone``
    (their pods were deleted: record them unavailable) and ``first_omitted`` (the first tail
    over the run's pod bound, when the bound is reached and not yet recorded)."""

    read: tuple[LogTarget, ...]
    gone: tuple[LogTarget, ...]
    first_omitted: LogTarget | None


def plan_tails(pending: Iterable[LogTarget], recorded: Iterable[Mapping], max_pods: int, *,
               limit_recorded: bool) -> TailPlan:
    """Which pending tails to read or record as unavailable now, given the ``log`` entries
    ``recorded`` (the summary's ``logs``): each key once, at most ``max_pods`` distinct pods
    per run (a further pod's instances are left out; the first of them is ``first_omitted``
    unless ``limit_recorded``). Ordered by pod, then container instance, so the bound keeps the
    first pods in a stable order."""
    done = {str(r.get("key")) for r in recorded}
    pods = {str(r.get("podUid")) for r in recorded if r.get("podUid")}
    read: list[LogTarget] = []
    gone: list[LogTarget] = []
    omitted: LogTarget | None = None
    for t in sorted(pending, key=lambda t: (t.finished_at or "", t.pod, t.init is False, t.container,
                                            t.restart_count)):
        if t.key in done:
            continue
        if t.pod_uid not in pods:
            if len(pods) >= max_pods:
                if omitted is None and not limit_recorded:
                    omitted = t
                continue
            pods.add(t.pod_uid)
        (gone if t.deleted else read).append(t)
    return TailPlan(tuple(read), tuple(gone), omitted)


def limit_event(max_pods: int, first: LogTarget) -> dict:
    """The ``logs-limit`` event data: the run reached its bound of ``max_pods`` pods' tails; the
    first pod left out."""
    return {"maxPods": max_pods, "firstOmitted": {"pod": first.pod, "podUid": first.pod_uid,
                                                  "container": first.container}}
