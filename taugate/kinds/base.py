"""``WorkloadKind``: what taugate knows about one workload kind, and the defaults most kinds share.
Pure: objects in as the API server sends them, plain data out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from taugate.fieldpath import Path
from taugate.memo import Memo
from taugate.outcome import Outcome
from taugate.pods import PodTemplate, json_bytes
from taugate.structure import workload_problems
from taugate.violation import Violation

SHAPE_POLICY = "object-shape"
"""The ``Violation.policy`` of a structure problem (a field without the type its API gives it)."""

TEMPLATES_MEMO_SIZE = 256

_templates_memo: Memo[tuple[int, bytes], tuple[Any, tuple[PodTemplate, ...]]] = Memo(TEMPLATES_MEMO_SIZE)
"""Keyed by the identity of the kind (kept in the entry) and the spec's bytes: blueprints."""


def _shape_violations(problems: list[tuple[str, str]]) -> list[Violation]:
    return [Violation(SHAPE_POLICY, f, f"{problem}; fix the manifest (the API server would reject it too)")
            for f, problem in problems]


class Override(NamedTuple):
    """A field mutation sets on CREATE whatever the client wrote there; ``was`` says what the
    client sent and ``why`` the upstream rule that needs the value, for the warning."""

    key: str
    value: Any
    was: str
    why: str

    @property
    def warning(self) -> str:
        return f"taugate set spec.{self.key}: {json.dumps(self.value)} (it was {self.was}): {self.why}"


def cel_templates(*path: str, each: str = "", keyed: bool = False) -> str:
    """CEL: the pod template at ``object.<path>`` (a list of one, or empty when a step or its
    ``spec`` is missing); with ``each``, ``object.<path>`` is a list (``keyed``: a map) whose items
    hold the template at ``<each>``. Every step is tested with ``has`` (a missing key is an error
    in CEL)."""
    def chain(root: str, steps: tuple[str, ...]) -> tuple[str, str]:
        tests, at = [], root
        for step in steps:
            at = f"{at}.{step}"
            tests.append(f"has({at})")
        return " && ".join(tests), at

    if not each:
        test, at = chain("object", path)
        return f"({test} && has({at}.spec) ? [{at}] : [])"
    test, at = chain("object", path)
    inner, template = chain(f"{at}[x]" if keyed else "x", tuple(each.split(".")))
    return f"({test} ? {at}.filter(x, {inner} && has({template}.spec)).map(x, {template}) : [])"


class WorkloadKind:
    """One workload kind taugate admits (ARCHITECTURE.md section 6 says how to add one).

    - ``resource``: the plural, as webhook rules and RBAC name it; ``upstream``: the upstream
      sources whose rules the module follows (file + function);
    - ``suspend_path``: where Kueue's ``suspend`` lives; None where Kueue gates the pods instead
      (a Pod, Deployment, StatefulSet, LeaderWorkerSet: a serving workload stays running);
    - ``scale_path``: the field the ``scale`` subresource sets (its ``specReplicasPath``; Kubernetes
      ``pkg/registry/apps/*/storage`` ``ScaleREST``, a CRD's ``subresources.scale``), None without one;
    - ``pod_priority_field``: False where mutation must not set the pod ``priorityClassName`` (a
      TrainJob's runtime sets it; a bare Pod's priority is resolved before the webhooks run);
    - ``templates_from_spec``: ``pod_templates`` reads nothing but ``spec`` (so ``read`` may
      remember them by the spec's JSON text);
    - ``serving``: never ends on its own, so its run ends when the object is deleted;
    - ``run_children``: ``(group, version, resource)`` of intermediate objects of no registered
      kind that the recorder follows as run members (a Deployment's ReplicaSets);
    - ``cel_pod_templates``: a CEL expression over ``object`` giving the list of its pod templates
      (each with ``spec``, and ``metadata`` when it has one), for the
      API server's own policy (``taugate/admission_policy.py``); None: that policy does not judge the kind.
    """

    group: ClassVar[str]
    version: ClassVar[str]
    resource: ClassVar[str]
    kind: ClassVar[str]
    upstream: ClassVar[str]
    default_lane: ClassVar[str] = "training"
    suspend_path: ClassVar[Path | None] = ("spec", "suspend")
    scale_path: ClassVar[Path | None] = None
    pod_priority_field: ClassVar[bool] = True
    spec_model: ClassVar[Any]
    templates_from_spec: ClassVar[bool] = True
    serving: ClassVar[bool] = False
    run_children: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    cel_pod_templates: ClassVar[str | None] = None

    @property
    def api_version(self) -> str:
        """``group/version``, or the bare version for the core group (a Pod's ``v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __repr__(self) -> str:
        return f"<{self.kind} {self.api_version} ({self.resource})>"

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Where a run whose root is ``obj`` stands, from the kind's own status types (``status``
        empty without one): the recorder's completion rule."""
        raise NotImplementedError(f"{self.kind}: no outcome rule")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """Every pod template of ``obj``, head first, never skipping one that asks for no GPU.
        Fields of the wrong type read as absent (``malformed`` reports them)."""
        raise NotImplementedError

    def malformed(self, obj: dict[str, Any]) -> list[Violation]:
        """One ``object-shape`` violation per field admission reads or writes without its API type;
        an object with none is safe to read with ``pod_templates``."""
        return _shape_violations(workload_problems(self.spec_model, obj))

    def read(self, obj: dict[str, Any]) -> tuple[list[Violation], list[PodTemplate]]:
        """``(malformed(obj), [])``, else ``([], pod_templates(obj))``, in one pass over the spec's
        JSON text. With ``templates_from_spec`` the templates are remembered by that text as
        blueprints and ``rebound`` to each object; a kind whose templates read the metadata (a
        Job's ``kueue.x-k8s.io/job-min-parallelism``) or several fields (a TrainJob) sets it False."""
        spec = obj.get("spec")
        spec_json = json_bytes(spec) if type(spec) is dict else None
        found = _shape_violations(workload_problems(self.spec_model, obj, spec_json))
        if found:
            return found, []
        if spec_json is None or not self.templates_from_spec:
            return [], self.pod_templates(obj)
        key = (id(self), spec_json)
        hit = _templates_memo.get(key)
        if hit is not None and hit[0] is self:
            return [], [t.rebound(obj) for t in hit[1]]
        templates = self.pod_templates(obj)
        _templates_memo.put(key, (self, tuple(t.blueprint() for t in templates)))
        return [], templates

    def governs(self, templates: list[PodTemplate]) -> bool:
        """False lets an object pass admission unchanged. Default: always (a RayJob, RayCluster or
        Job is a batch workload even on CPUs); a kind a workspace also runs without GPUs (a
        notebook Pod) overrides it with ``taugate.pods.asks_for_gpus``."""
        return True

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """``(labels, annotations)`` Kueue's own defaulting webhook puts on a queued object's pod
        templates; mutation sets them too because webhooks run in name order and Kueue's
        ``reinvocationPolicy`` is ``Never``. Default: none (Kueue reads the object)."""
        return {}, {}

    def kueue_holds(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(scheduling gates, finalizers)`` Kueue's webhook puts on a queued object itself, for
        the same reason as ``kueue_template_metadata``. Default: none."""
        return (), ()

    def queued(self, obj: dict[str, Any]) -> bool:
        """True when Kueue queues ``obj`` (so taugate gives it a LocalQueue and suspends it)."""
        return True

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """Whether the API server accepts pod template label changes in an UPDATE of ``old`` (a
        patch under an immutable field fails the whole UPDATE). Default: always."""
        return True

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """What KubeRay, Kueue or Kubernetes would refuse or mishandle for this kind, on a
        well-formed ``obj``; ``elastic_jobs``: Kueue's ElasticJobsViaWorkloadSlices gate. Default: none."""
        return []

    def create_defaults(self, spec: dict[str, Any], *, queued: bool) -> list[tuple[str, Any]]:
        """``(key, value)`` mutation sets in ``spec`` on CREATE where missing. Default: none."""
        return []

    def create_overrides(self, spec: dict[str, Any], *, queued: bool, ray_shutdown: str) -> list[Override]:
        """What mutation sets on CREATE over what the client wrote, because the queue cannot run the
        object otherwise, each said in a warning. ``ray_shutdown``: ``set`` or ``refuse``.
        Reinvocation on the output returns none. Default: none."""
        return []

    def create_inserts(self, spec: dict[str, Any]) -> list[tuple[str, int, Any]]:
        """``(key, index, item)``: ``item`` inserted at ``index`` of ``spec[key]`` on CREATE (a
        TrainJob's own ``spec.runtimePatches`` entry); none when already there. Default: none."""
        return []

    def autoscaling(self, obj: dict[str, Any]) -> bool:
        """True when an autoscaler may grow the worker pods past ``replicas``. Default: False."""
        return False

    def most_pods(self, obj: dict[str, Any], template: PodTemplate) -> int:
        """The most pods ``template`` may grow to under that autoscaler. Default: ``replicas``."""
        return template.replicas
