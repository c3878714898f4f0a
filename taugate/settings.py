"""Settings shared by the webhook, the controllers and the CLI.

Read from environment variables prefixed ``TAUGATE_`` (pydantic-settings), e.g.
``TAUGATE_SERVICE_ACCOUNT=system:serviceaccount:taugate-system:taugate``; the CLI may override
them. Nothing here is read per request from the environment: a ``Settings`` is built once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from taugate.kinds import KINDS

# Node Problem Detector conditions that mean a GPU node is unhealthy when their status is "True"
# (names from the OKE NPD GPU health checks in ../shared/samples/oci-hpc-oke).
DEFAULT_GPU_HEALTH_CONDITIONS = (
    "GpuEcc", "GpuRowRemap", "GpuBus", "GpuCount", "GpuPcie", "GpuFabricMgr", "GpuXid",
    "NvlinkSpeed", "DcgmiHealth", "GpuImex", "RdmaLink",
)


DEFAULT_GPU_DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com")
"""DeviceClasses of GPUs as the DRA drivers install them: NVIDIA's k8s-dra-driver-gpu (``gpu.nvidia.com``,
``mig.nvidia.com``), AMD's (``gpu.amd.com``) and Intel's (``gpu.intel.com``)."""
# "system:serviceaccount:kube-system:resource-claim-controller" creates a pod's ResourceClaims from its
# templates (kube-controller-manager's resource-claim-controller); kube-scheduler creates the claim of a
# pod's DRA extended resources (KEP-5004).
RESOURCE_CLAIM_CREATORS = ("system:serviceaccount:kube-system:resource-claim-controller", "system:kube-scheduler")


MIN_ADMISSION_KEY_BYTES = 32
"""The shortest admission key (HMAC-SHA256) taugate starts with: 256 bits, the hash's own size
(RFC 2104 section 3: a key shorter than the hash output is discouraged, it weakens the MAC)."""


class Settings(BaseSettings):
    """Platform-wide configuration.

    - ``service_account``: taugate's own username (``system:serviceaccount:NS:NAME``); its
      requests pass admission untouched.
    - ``system_namespace``: where TauWorkspaces and TauQuotaRequests live.
    - ``gpu_class_label``: the node label naming a node's GPU class.
    - ``gpu_health_conditions``: Node Problem Detector condition types that, when ``True``, mark a
      GPU node unhealthy (a node that is not ``Ready`` is unhealthy too).
    - ``admission_deadline_seconds``: seconds the server spends on one review before answering
      with its fail-safe decision; keep it below the webhook configuration's ``timeoutSeconds``.
    - ``default_lanes``: the lane of an object without a ``tau.azure.com/lane`` label, by kind (each
      kind's ``default_lane``, ``taugate.kinds``).
    - ``admin_groups`` / ``admin_users``: who may approve TauQuotaRequests.
    - ``controller_users``: the usernames whose creates of an owned object are trusted as children
      of a workload (a RayJob's RayCluster, KubeRay's submitter Job, a JobSet's Jobs, a Job's,
      RayCluster's or StatefulSet's pods, a Deployment's ReplicaSet, the pods of a ReplicaSet,
      DaemonSet or ReplicationController: they inherit the parent's run-id and nothing else);
      an owned object anyone else creates is a top-level workload.
    - ``unmanaged_gpu_workloads``: what admission does with a GPU workload in a workspace of a
      kind taugate does not manage (a bare ReplicaSet, a DaemonSet, a ReplicationController, a
      Pod whose controller is another operator's kind: ``taugate.unmanaged``): ``deny`` (the default; the
      message names the managed kinds and the fix) or ``warn`` (allowed, with an AdmissionReview
      warning). Helm value ``webhook.unmanagedGpuWorkloads``.
    - ``kueue_elastic_jobs``: Kueue's ElasticJobsViaWorkloadSlices feature gate is on in the
      cluster (alpha, off by default in Kueue 0.17), so a RayCluster/RayJob annotated
      ``kueue.x-k8s.io/elastic-job: "true"`` may use the Ray autoscaler under Kueue.
    - ``ray_shutdown_after_job_finishes``: what admission does with a queued RayJob that says
      ``shutdownAfterJobFinishes: false`` (as KubeRay's ``kubectl ray job submit`` writes), which
      Kueue refuses: ``set`` (the default: set to true, said in a warning;
      ``taugate.kinds.rayjob.shutdown_override``) or ``refuse`` (refused, naming the fix). A RayJob
      that leaves it out gets true with the warning either way. Helm value
      ``ray.shutdownAfterJobFinishes``.
    - ``max_body_bytes``: the largest AdmissionReview body accepted (HTTP 413 above).
    - ``max_bytes_in_flight``: bytes of large bodies (over the server's 64 KiB inline limit)
      being read and decided at once; a body that does not fit waits for room until the
      admission deadline, then gets HTTP 429 with the reason. A 7.8 MiB review costs about
      30 MB of memory while it is decided, so the default (8 MiB) keeps the server well under
      the chart's 512 Mi limit.
    - ``max_connections``: open HTTPS connections; at the limit the longest-idle one is closed
      to make room, and a new connection is closed when none is idle.
    - ``header_timeout_seconds``: the TLS handshake, and a request's head (request line and
      headers) from its first byte, must complete within this many seconds (slowloris).
    - ``idle_timeout_seconds``: a connection with no request in flight (before its first
      request, or after an answer) is closed after this many seconds. The API server's webhook
      client keeps idle connections for 90 s (``IdleConnTimeout`` of k8s.io/apimachinery's
      ``SetTransportDefaults``) and opens a new one when it finds one closed.
    - ``admission_key``: the secret that signs the admission record (``taugate.record``); the
      webhook signs with it and the operator's recorder verifies with it, so both need the same
      value (the chart fills ``TAUGATE_ADMISSION_KEY`` from one Secret). Unset, records are
      unsigned and the recorder trusts none of them. Set, it must be at least
      ``MIN_ADMISSION_KEY_BYTES`` bytes (``admission_key_problem``): ``taugate serve`` and the
      operator refuse to start with a shorter one.
    - ``policy_dir``: the Rego policy library (default: ``policies/`` of this checkout; set
      ``TAUGATE_POLICY_DIR`` in an image).
    - ``policy_backend``: where ``taugate serve`` evaluates the policies: ``embedded`` (regorus,
      in process) or ``opa`` (an OPA server at ``opa_url``, e.g. the chart's sidecar
      ``http://127.0.0.1:8181``; the policies are pushed there).
    - ``opa_timeout_seconds``: the most one policy evaluation by the OPA server may take (a
      re-push of the policies to a restarted server included); a later answer is HTTP 503 and
      the webhook's ``failurePolicy`` decides. It must be below ``admission_deadline_seconds``
      (2 s), itself below the webhook configurations' ``timeoutSeconds`` (3 s, the chart's
      ``webhook.timeoutSeconds``), so taugate answers a late OPA before its own deadline (504)
      and long before the API server gives up on the call (checked with the ``opa`` backend).
      1 s is over 100 times a local OPA's answer (median 2.2 ms, p99 8 ms for the policy
      samples' inputs with OPA v1.22.4 on the 2-core dev machine, 2026-12-01).
    - ``log_level``, ``log_format``: how ``taugate serve`` and ``taugate operator`` log
      (``TAUGATE_LOG_LEVEL``: debug, info, warning, error; ``TAUGATE_LOG_FORMAT``: json, text; the
      chart's ``logging`` values). ``taugate.logs`` reads and checks them before anything else
      starts, so a bad value is one line naming the variable; here they are plain text.
    - ``gpu_device_resources``: GPU device resources of this cluster besides
      ``taugate.devices.DEFAULT_DEVICE_RESOURCES`` (a name, or a prefix ending in ``*``); a pod
      holding one is a GPU pod, counted by resource name (Helm value ``gpu.deviceResources``).
    - ``gpu_device_classes``: the DRA DeviceClasses whose devices are GPUs (Helm value
      ``gpu.deviceClasses``; the defaults are the NVIDIA, AMD and Intel DRA drivers' classes).
    - ``dra_gpu_workloads``: what admission does with GPUs asked through Dynamic Resource
      Allocation in a workspace: ``deny`` (the default: refused, naming ``nvidia.com/gpu`` as the
      way) or ``queue`` (counted, queued and placed like any GPU workload; only when Kueue runs
      with its DRA support and maps these DeviceClasses onto the queues' GPU resource:
      docs/gpu-paths.md). Helm value ``gpu.draWorkloads``.
    - ``device_access``: what admission does with a workspace pod that reaches devices without
      asking for them (``NVIDIA_VISIBLE_DEVICES``, a privileged container, a host path of
      ``/dev/nvidia*``, CDI annotations: ``taugate.devices.access_problems``): ``deny`` (the
      default) or ``govern`` (admitted as a GPU workload: queued and placed by its profile).
      Helm value ``gpu.deviceAccess``.
    """

    model_config = SettingsConfigDict(env_prefix="TAUGATE_")

    service_account: str = "system:serviceaccount:taugate-system:taugate"
    system_namespace: str = "tau-platform"
    gpu_class_label: str = "tau.azure.com/gpu-class"
    gpu_health_conditions: tuple[str, ...] = DEFAULT_GPU_HEALTH_CONDITIONS
    admission_deadline_seconds: float = Field(default=2.0, gt=0, le=30)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    max_bytes_in_flight: int = Field(default=8 * 1024 * 1024, gt=0)
    max_connections: int = Field(default=256, gt=0)
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    idle_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    default_lanes: dict[str, str] = Field(
        default_factory=lambda: {k.kind: k.default_lane for k in KINDS}
    )
    admin_groups: tuple[str, ...] = ("tau-platform-admins", "system:masters")
    policy_dir: Path = Path(__file__).resolve().parent.parent / "policies"
    admin_users: tuple[str, ...] = ()
    controller_users: tuple[str, ...] = (
        "system:serviceaccount:ray-system:kuberay-operator",
        "system:serviceaccount:kueue-system:kueue-controller-manager",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:cronjob-controller",
        "system:serviceaccount:kube-system:deployment-controller",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:replication-controller",
        "system:kube-controller-manager",
        # Issue 17 kinds' controllers: JobSet's Jobs, LeaderWorkerSet's StatefulSets and Pods,
        # training-operator's Pods, Kubeflow Trainer's JobSet of a TrainJob (their install
        # manifests' service accounts).
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:lws-system:lws-controller-manager",
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    )
    unmanaged_gpu_workloads: Literal["deny", "warn"] = "deny"
    kueue_elastic_jobs: bool = False
    ray_shutdown_after_job_finishes: Literal["set", "refuse"] = "set"
    admission_key: SecretStr | None = None
    policy_backend: Literal["embedded", "opa"] = "embedded"
    opa_url: str | None = None
    opa_timeout_seconds: float = Field(default=1.0, gt=0, le=30)
    gpu_device_resources: tuple[str, ...] = ()
    gpu_device_classes: tuple[str, ...] = DEFAULT_GPU_DEVICE_CLASSES
    dra_gpu_workloads: Literal["deny", "queue"] = "deny"
    device_access: Literal["deny", "govern"] = "deny"
    log_level: str = "info"
    log_format: str = "json"

    def admission_key_bytes(self) -> bytes | None:
        """``admission_key`` as bytes (UTF-8), or None when unset or empty."""
        value = self.admission_key.get_secret_value() if self.admission_key is not None else ""
        return value.encode() if value else None

    def admission_key_problem(self) -> str | None:
        """One line saying why the admission key is unusable (set, but shorter than
        ``MIN_ADMISSION_KEY_BYTES``), naming the variable and the chart's Secret; None when it
        is usable or unset."""
        key = self.admission_key_bytes()
        if key is None or len(key) >= MIN_ADMISSION_KEY_BYTES:
            return None
        return (f"TAUGATE_ADMISSION_KEY is {len(key)} byte(s); the admission key must be at least "
                f"{MIN_ADMISSION_KEY_BYTES} bytes of random key material (a shorter key is recovered offline from "
                f"any signed record, and then forged records verify): put one in the Secret "
                f"webhook.admissionKey.existingSecret names (default <release>-admission-key, key `key`), "
                f"e.g. `openssl rand -hex 32`")

    @model_validator(mode="after")
    def _opa_answers_before_the_deadline(self) -> Settings:
        if self.policy_backend == "opa" and self.opa_timeout_seconds >= self.admission_deadline_seconds:
            raise ValueError(f"opa_timeout_seconds ({self.opa_timeout_seconds:g}) must be below "
                             f"admission_deadline_seconds ({self.admission_deadline_seconds:g}): a late OPA "
                             f"server must be answered before the admission deadline")
        return self
