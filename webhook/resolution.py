"""Workspace, workload profile and LocalQueue resolution (ARCHITECTURE.md section 2, steps 1 and
2). Pure; mutation and validation both call it, so the two webhooks never disagree about which
profile and queue an object belongs to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taugate import labels
from taugate.fieldpath import label_field
from taugate.models import ResolvedProfile, TauWorkspace
from taugate.pods import PodTemplate
from taugate.settings import Settings
from taugate.snapshot import ClusterState
from taugate.webhook.decision import Violation


@dataclass(frozen=True, slots=True)
class Resolution:
    """``how`` the profile was chosen (``label``, ``shape`` or ``default``) and, for ``default``, a
    ``note`` saying why."""

    workspace: TauWorkspace
    profile: ResolvedProfile
    queue: str
    lane: str
    how: str = "shape"
    note: str = ""


@dataclass(frozen=True, slots=True)
class Unresolved:

    violations: tuple[Violation, ...]


def lane_of(obj: dict, settings: Settings) -> str:
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    kind = obj.get("kind")
    return obj_labels.get(labels.LANE) or settings.default_lanes.get(kind if isinstance(kind, str) else "", "training")


def object_shape(templates: list[PodTemplate], settings: Settings) -> tuple[set[int], set[str]]:
    """The distinct GPUs-per-pod of the GPU pod templates and the GPU classes their nodeSelectors
    name, read once per object (after its structure checks)."""
    gpus: set[int] = set()
    classes: set[str] = set()
    for t in templates:
        if t.gpus_per_pod > 0:
            gpus.add(t.gpus_per_pod)
            wanted = (t.spec.get("nodeSelector") or {}).get(settings.gpu_class_label)
            if wanted is not None:
                classes.add(wanted)
    return gpus, classes


def matches_shape(profile: ResolvedProfile, gpus: set[int], classes: set[str]) -> bool:
    """Every GPU pod template asks exactly ``gpusPerWorker`` (CPU-only matches 0) and no
    nodeSelector names another GPU class."""
    if profile.gpus_per_worker == 0:
        if gpus:
            return False
    elif gpus != {profile.gpus_per_worker}:
        return False
    return profile.gpu_class is None or classes <= {profile.gpu_class}


def mig_only(templates: list[PodTemplate]) -> list[str]:
    """The MIG slice resources when they are all the GPU an object asks for, else empty. Such an
    object must never get a full-GPU profile: its placement and quota are for whole GPUs."""
    found: list[str] = []
    for t in templates:
        if t.gpus_per_pod > 0:
            return []
        for name in t.mig_per_pod:
            if name not in found:
                found.append(name)
    return found


def _mig_violation(field: str, mig: list[str], what: str, applicable: tuple[ResolvedProfile, ...]) -> Violation:
    fit = ", ".join(_describe(p) for p in applicable if p.gpus_per_worker == 0) or "none in this workspace"
    return Violation("workload-profile", field,
        f"asks only for MIG slices ({', '.join(mig)}) but {what}, a full-GPU profile (its placement and "
        f"quota are for whole {labels.GPU_RESOURCE}); allowed: a profile with gpusPerWorker 0 ({fit}); fix: set "
        f"the label {labels.WORKLOAD_PROFILE} to one of those, or ask for whole GPUs")


def _describe(p: ResolvedProfile) -> str:
    cls = f", gpuClass {p.gpu_class}" if p.gpu_class else ""
    return f"{p.name} (gpusPerWorker {p.gpus_per_worker}{cls})"


def resolve(obj: dict, templates: list[PodTemplate], ws: TauWorkspace, state: ClusterState,
            settings: Settings) -> Resolution | Unresolved:
    """The workload profile and LocalQueue of ``obj`` in workspace ``ws``; never raises.

    The answer depends only on the state and a few facts of the object (lane, the two labels,
    GPUs per pod, GPU classes, MIG slices), so it is remembered per state by them.
    """
    if state.profile_set_problem:
        return Unresolved((Violation("workload-profile", "", state.profile_set_problem),))
    meta_labels = (obj.get("metadata") or {}).get("labels") or {}
    lane = lane_of(obj, settings)
    requested = meta_labels.get(labels.WORKLOAD_PROFILE)
    asked_queue = meta_labels.get(labels.KUEUE_QUEUE_NAME)
    shape, classes = object_shape(templates, settings)
    mig = mig_only(templates)
    # remembered per state, keyed by the workspace's identity (kept alive in the entry, so never reused)
    memo = state.memo("resolve", RESOLVE_MEMO_SIZE)
    key: tuple[Any, ...] | None = (id(ws), lane, requested, asked_queue, frozenset(shape), frozenset(classes),
                                   tuple(mig))
    try:
        hit = memo.get(key)
    except TypeError:  # a label value that is no string (not checked yet): decided, not remembered
        key, hit = None, None
    if hit is not None:
        return hit[1]  # type: ignore[no-any-return]
    ask = _Asked(ws, state, lane, state.applicable_profiles(ws, lane),
                 label_field(labels.WORKLOAD_PROFILE) if requested is not None else "metadata", mig, shape, classes)
    result = _resolve(ask, requested, asked_queue)
    if key is not None:
        memo.put(key, (ws, result))
    return result


RESOLVE_MEMO_SIZE = 4096


def _resolve(ask: _Asked, requested: str | None, asked_queue: str | None) -> Resolution | Unresolved:
    ws = ask.ws
    problems: list[Violation] = []
    how, chosen = ("label", _labelled_profile(ask, requested)) if requested is not None else _shaped_profile(ask)
    profile = chosen if isinstance(chosen, ResolvedProfile) else None
    if isinstance(chosen, Violation):
        problems.append(chosen)
    if profile is not None and not profile.is_ready():
        problems.append(_not_ready(ask, profile, how))
    queue, queue_problem = _queue(ask, asked_queue)
    if queue_problem is not None:
        problems.append(queue_problem)
    if problems or profile is None:
        return Unresolved(tuple(problems))
    note = ""
    if how == "default":
        note = (f"no workload profile in workspace {ws.metadata.name!r} matches {ask.shape_text()}, so the "
                f"workspace default {_describe(profile)} applies; to use another, set the label "
                f"{labels.WORKLOAD_PROFILE}")
    return Resolution(ws, profile, queue, ask.lane, how, note)


@dataclass(slots=True)
class _Asked:
    """What ``resolve`` decides from, for one object. Read-only by convention (built on every
    review; frozen costs ~1 us more)."""

    ws: TauWorkspace
    state: ClusterState
    lane: str
    applicable: tuple[ResolvedProfile, ...]
    field: str
    mig: list[str]
    shape: set[int]
    classes: set[str]

    def names(self) -> str:
        """Only for messages: a request that resolves never pays."""
        return ", ".join(sorted(p.name for p in self.applicable)) or "none"

    def described(self) -> str:
        return ", ".join(_describe(p) for p in self.applicable) or "none"

    def shape_text(self) -> str:
        return f"{'/'.join(map(str, sorted(self.shape) or [0]))} GPU(s) per pod"


def _labelled_profile(ask: _Asked, requested: str) -> ResolvedProfile | Violation:
    wsname = ask.ws.metadata.name
    candidate = ask.state.profiles.get(requested)
    if candidate is None:
        return Violation("workload-profile", ask.field,
            f"asks for workload profile {requested!r}, which does not exist; allowed in workspace "
            f"{wsname!r} (lane {ask.lane}): {ask.names()}; fix: set the label to one of them or remove it")
    if not any(p is candidate for p in ask.applicable):
        return Violation("workload-profile", ask.field,
            f"asks for workload profile {requested!r}, which does not apply to workspace {wsname!r} "
            f"(namespace {ask.ws.target_namespace}, lane {ask.lane}); allowed: {ask.names()}; fix: use one of them")
    if ask.mig and candidate.gpus_per_worker > 0:
        return _mig_violation(ask.field, ask.mig, f"asks for workload profile {_describe(candidate)}", ask.applicable)
    return candidate


def _shaped_profile(ask: _Asked) -> tuple[str, ResolvedProfile | Violation]:
    """Without the label: the single applicable Ready profile matching the object's shape, else
    the workspace default. A matching profile that is not Ready is still chosen, so the denial
    names it."""
    wsname = ask.ws.metadata.name
    shaped = [p for p in ask.applicable if matches_shape(p, ask.shape, ask.classes)]
    ready = [p for p in shaped if p.is_ready()]
    default = ask.ws.spec.defaults.workload_profile
    if len(ready) == 1:
        return "shape", ready[0]
    if len(ready) > 1:
        tie_break = next((p for p in ready if p.name == default), None)
        if tie_break is not None:
            return "shape", tie_break
        return "shape", Violation("workload-profile", ask.field,
            f"several workload profiles fit {ask.shape_text()}: {', '.join(_describe(p) for p in ready)}; "
            f"fix: add the label {labels.WORKLOAD_PROFILE}=<one of them>")
    if shaped:
        # the profile made for this shape cannot place runs: say so, rather than fall back to a
        # default that was never meant for this object
        return "shape", shaped[0]
    if not default:
        return "shape", Violation("workload-profile", ask.field,
            f"no applicable workload profile matches {ask.shape_text()} in workspace {wsname!r} and it has no "
            f"default profile; allowed: {ask.described()}; fix: change the GPUs per pod to one of those or set "
            f"the label {labels.WORKLOAD_PROFILE}")
    profile = ask.state.profiles.get(default)
    if ask.mig and profile is not None and profile.gpus_per_worker > 0:
        return "default", _mig_violation(ask.field, ask.mig, f"would get the workspace default {_describe(profile)}",
                                         ask.applicable)
    if profile is None or not any(p is profile for p in ask.applicable):
        return "default", Violation("workload-profile", ask.field,
            f"no applicable workload profile matches {ask.shape_text()} and the workspace default {default!r} is "
            f"{'missing' if profile is None else 'not applicable'}; allowed: {ask.described()}; fix: set the "
            f"label {labels.WORKLOAD_PROFILE} or ask the platform team to fix workspace {wsname!r}")
    return "default", profile


def _not_ready(ask: _Asked, profile: ResolvedProfile, how: str) -> Violation:
    why = next((c.message for c in profile.conditions if c.type == "Ready"), "no Ready condition")
    others = ", ".join(sorted(p.name for p in ask.applicable if p.is_ready() and p is not profile)) or "none"
    return Violation("workload-profile", ask.field,
        f"{'asks for' if how == 'label' else 'resolves to'} workload profile {profile.name!r}, which is not "
        f"Ready ({why}); allowed: a Ready profile ({others}); fix: wait for the platform team to fix "
        f"{profile.name!r} or choose another with the label {labels.WORKLOAD_PROFILE}")


def _queue(ask: _Asked, asked_queue: str | None) -> tuple[str, Violation | None]:
    """The workspace's LocalQueue (its first), and the violation when the queue label names another
    or the workspace's own does not exist."""
    ws, state = ask.ws, ask.state
    allowed_queues = state.queues_of(ws)
    queue = allowed_queues[0]
    qfield = label_field(labels.KUEUE_QUEUE_NAME)
    if asked_queue is not None and asked_queue not in allowed_queues:
        owner = next((w.metadata.name for w in state.workspaces.values()
                      if asked_queue in state.queues_of(w) and w is not ws), None)
        where = (f"the LocalQueue of workspace {owner!r}" if owner else
                 f"a LocalQueue that does not exist in namespace {ws.target_namespace!r}"
                 if (ws.target_namespace, asked_queue) not in state.local_queues else
                 f"a LocalQueue that workspace {ws.metadata.name!r} may not use")
        return queue, Violation("queue", qfield,
            f"names queue {asked_queue!r}, {where}; allowed: {', '.join(allowed_queues)}; "
            f"fix: set {labels.KUEUE_QUEUE_NAME}={queue} or remove the label")
    if (ws.target_namespace, queue) not in state.local_queues:
        return queue, Violation("queue", qfield,
            f"workspace {ws.metadata.name!r} uses LocalQueue {queue!r}, which does not exist in namespace "
            f"{ws.target_namespace!r}; nothing can be queued until the platform team creates it")
    return queue, None
