"""``WorkloadKind``: what taugate knows about one workload kind, and the defaults most kinds share.

Each kind module (``rayjob``, ``raycluster``, ``job``) subclasses ``WorkloadKind`` once and
``taugate.kinds`` registers the instance. Everything is pure: objects in (dicts as the API server
sends them), plain data out.
"""

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
"""Specs whose pod templates are remembered (``WorkloadKind.read``); the memo starts again when full."""

_templates_memo: Memo[tuple[int, bytes], tuple[Any, tuple[PodTemplate, ...]]] = Memo(TEMPLATES_MEMO_SIZE)
"""Keyed by the identity of the kind (kept in the entry) and the spec's bytes: blueprints."""


def _shape_violations(problems: list[tuple[str, str]]) -> list[Violation]:
    return [Violation(SHAPE_POLICY, f, f"{problem}; fix the manifest (the API server would reject it too)")
            for f, problem in problems]


class Override(NamedTuple):
    """A field mutation sets on CREATE whatever the client wrote there (``WorkloadKind.create_overrides``):
    ``spec[key] = value``; ``was`` says what the client sent (``false``, ``not set (...)``) and
    ``why`` the upstream rule that needs the value, for the AdmissionReview warning (``warning``)."""

    key: str
    value: Any
    was: str
    why: str

    @property
    def warning(self) -> str:
        """``taugate set spec.<key>: <value> (it was <was>): <why>``."""
        return f"taugate set spec.{self.key}: {json.dumps(self.value)} (it was {self.was}): {self.why}"


class WorkloadKind:
    """One workload kind taugate admits.

    Class attributes (every subclass sets the first five):

    - ``group``, ``version``: the API group and version (``ray.io``, ``v1``);
    - ``resource``: the REST resource, the plural (``rayjobs``), as webhook rules and RBAC name it;
    - ``kind``: the kind (``RayJob``);
    - ``upstream``: the upstream sources whose rules the module follows (file + function);
    - ``default_lane``: the lane an object of this kind runs in without a ``tau.azure.com/lane``
      label (``Settings.default_lanes``);
    - ``suspend_path``: where the ``suspend`` Kueue sets on a queued object lives (``spec.suspend``;
      a Kubeflow job's ``spec.runPolicy.suspend``, a RayService's ``spec.rayClusterConfig.suspend``);
      None for a kind Kueue queues without suspending it (a Pod, Deployment, StatefulSet or
      LeaderWorkerSet: Kueue gates its pods instead, and a serving workload stays running);
    - ``scale_path``: the field the kind's ``scale`` subresource sets (its ``specReplicasPath``:
      ``spec.replicas`` of a Deployment, StatefulSet or LeaderWorkerSet, a PyTorchJob's
      ``spec.pytorchReplicaSpecs.Worker.replicas``); None for a kind without one (Kubernetes
      ``pkg/registry/apps/*/storage`` ``ScaleREST``; a CRD's ``subresources.scale``). A change
      through it is judged as an UPDATE of that field (``taugate.webhook.scale``);
    - ``pod_priority_field``: whether mutation sets the profile's pod ``priorityClassName`` on its
      pod templates (``webhook.pod_rules``); default True (a TrainJob's runtime patch has no such
      field: the runtime, which the platform owns, sets it; a bare Pod's priority is resolved by
      the API server before the webhooks run, so a class added then is refused);
    - ``spec_model``: the pydantic model of the kind's ``spec`` (a ``TypedDict`` of every field
      admission reads or writes, typed as the kind's Go API types; ``taugate.structure`` says how to
      write one), which ``malformed`` checks;
    - ``templates_from_spec``: whether ``pod_templates`` reads nothing but ``spec`` (so ``read``
      remembers them by the spec's JSON text); default True;
    - ``serving``: the kind never ends on its own (a Deployment, a RayService): its run ends when
      the object is deleted; default False;
    - ``run_children``: ``(group, version, resource)`` of the intermediate objects of no registered
      kind its controller makes and the recorder follows as run members (a Deployment's
      ReplicaSets); default none.

    Methods a subclass overrides: ``pod_templates`` and ``outcome`` (always), and where the kind differs from the
    defaults here: ``governs``, ``queued``, ``templates_mutable``, ``checks``, ``create_defaults``,
    ``create_overrides``, ``create_inserts``,
    ``kueue_template_metadata``, ``kueue_holds``, ``autoscaling`` with ``most_pods``.
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

    @property
    def api_version(self) -> str:
        """``group/version`` (``ray.io/v1``), as an object's ``apiVersion`` reads; the bare
        version for the core group (a Pod's ``v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __repr__(self) -> str:
        return f"<{self.kind} {self.api_version} ({self.resource})>"

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Where a run whose root is ``obj`` stands, read from the kind's own status types (``status``
        is ``obj``'s, an empty dict without one): the recorder's completion rule."""
        raise NotImplementedError(f"{self.kind}: no outcome rule")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """Every pod template of ``obj`` with its role, replicas and GPU demand, in a stable order
        (head first). Every pod template of a workload is a GPU template: a template is never
        skipped because it asks for no GPU. Fields of the wrong type read as absent (``malformed``
        reports them)."""
        raise NotImplementedError

    def malformed(self, obj: dict[str, Any]) -> list[Violation]:
        """One ``object-shape`` violation per field of ``obj`` (``metadata``, and ``spec`` by the
        kind's ``spec_model``) that admission reads or writes and that does not have the type its
        API gives it (``taugate.structure.workload_problems``). The API server checks the schema
        only after mutating webhooks have run, so they see objects exactly as a client sent them;
        an object with none of these problems is safe to read with ``pod_templates``."""
        return _shape_violations(workload_problems(self.spec_model, obj))

    def read(self, obj: dict[str, Any]) -> tuple[list[Violation], list[PodTemplate]]:
        """``(malformed(obj), [])`` when ``obj`` has structure problems, else ``([],
        pod_templates(obj))``: what admission reads of every object, in one pass over its spec's
        JSON text. For a kind whose ``templates_from_spec`` is True (the default: ``pod_templates``
        reads nothing but ``spec`` and each template's pod spec is the one at its ``path``), the
        templates are remembered by the spec's JSON text (``TEMPLATES_MEMO_SIZE`` specs) as
        blueprints holding no reference into any object (``PodTemplate.blueprint``), and an object
        with the same spec gets them ``rebound`` to itself: its own template dicts, the same
        replicas and GPU demand. A kind whose templates read the metadata (a Job's
        ``kueue.x-k8s.io/job-min-parallelism``, a Pod's group annotations) or are assembled from
        several fields (a TrainJob's) sets it False and reads them every time."""
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
        """True when taugate governs an object of this kind whose pod templates are
        ``templates`` (queues, places, labels and validates it); False lets it pass admission
        unchanged. Default: always (a RayJob, RayCluster or Job is a batch workload even on CPUs).
        A core kind a workspace also runs without GPUs (a notebook Pod, a dashboard Deployment)
        overrides it to ``taugate.pods.asks_for_gpus``."""
        return True

    def kueue_template_metadata(self, queue: str, priority_class: str | None) -> tuple[dict[str, str], dict[str, str]]:
        """``(labels, annotations)`` Kueue's own defaulting webhook for this kind puts on the pod
        templates of a queued object with LocalQueue ``queue`` (and WorkloadPriorityClass
        ``priority_class``); mutation sets them where missing, so the pods are queued as Kueue
        means even when Kueue's webhook ran before taugate's (webhooks run in name order and
        Kueue's ``reinvocationPolicy`` is ``Never``). Default: none (Kueue reads the object)."""
        return {}, {}

    def kueue_holds(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(scheduling gates, finalizers)`` Kueue's defaulting webhook puts on a queued object of
        this kind itself (not on its templates): mutation adds those missing on CREATE, for the
        same reason as ``kueue_template_metadata``. Default: none (Kueue suspends the object or
        reads its templates)."""
        return (), ()

    def queued(self, obj: dict[str, Any]) -> bool:
        """True when Kueue queues ``obj`` (so taugate gives it a LocalQueue and suspends it)."""
        return True

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """True when the API server accepts changes to the pod templates' labels in an UPDATE of
        the stored object ``old`` (a patch under an immutable field fails the whole UPDATE).
        Default: always (a CRD without immutable fields)."""
        return True

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """The kind's own built-in rules (what KubeRay, Kueue or Kubernetes would refuse or mishandle
        for this kind), on a well-formed ``obj`` whose pod templates are ``templates``; ``old`` is
        the stored object on UPDATE, else None; ``elastic_jobs``: Kueue's
        ElasticJobsViaWorkloadSlices feature gate is on. Default: none."""
        return []

    def create_defaults(self, spec: dict[str, Any], *, queued: bool) -> list[tuple[str, Any]]:
        """``(key, value)`` pairs mutation sets in ``spec`` on CREATE when the key is missing
        (set-if-missing, so reinvocation changes nothing). Default: none."""
        return []

    def create_overrides(self, spec: dict[str, Any], *, queued: bool, ray_shutdown: str) -> list[Override]:
        """What mutation sets in ``spec`` on CREATE over the value the client wrote or left out,
        because the queue cannot run the object otherwise; each is said in a warning (never a silent
        change). ``ray_shutdown`` is ``Settings.ray_shutdown_after_job_finishes`` (``set`` or
        ``refuse``). Reinvocation on the output returns none. Default: none."""
        return []

    def create_inserts(self, spec: dict[str, Any]) -> list[tuple[str, int, Any]]:
        """``(key, index, item)`` triples mutation inserts on CREATE: ``item`` at ``index`` of the
        list ``spec[key]`` (created when missing), for a kind whose pod templates live in an item
        of a list the object may already hold (a TrainJob's own ``spec.runtimePatches`` entry).
        Return none when the item is already there (reinvocation changes nothing). Default: none."""
        return []

    def autoscaling(self, obj: dict[str, Any]) -> bool:
        """True when ``obj`` turns on an autoscaler that may grow its worker pods past their
        ``replicas``. Default: False."""
        return False

    def most_pods(self, obj: dict[str, Any], template: PodTemplate) -> int:
        """The most pods ``template`` of ``obj`` may grow to under the autoscaler ``autoscaling``
        reports (asked only when it is on). Default: ``template.replicas``."""
        return template.replicas
