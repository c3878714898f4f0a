"""Settings shared by the webhook, the controllers and the CLI: ``TAUGATE_*`` environment variables
(pydantic-settings), built once, never read per request."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from taugate.kinds import KINDS

# Node Problem Detector conditions that mean a GPU node is unhealthy when "True" (names from the
# OKE NPD GPU health checks in ../shared/samples/oci-hpc-oke).
DEFAULT_GPU_HEALTH_CONDITIONS = (
    "GpuEcc", "GpuRowRemap", "GpuBus", "GpuCount", "GpuPcie", "GpuFabricMgr", "GpuXid",
    "NvlinkSpeed", "DcgmiHealth", "GpuImex", "RdmaLink",
)


DEFAULT_GPU_DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com")
"""GPU DeviceClasses as the DRA drivers install them: NVIDIA's k8s-dra-driver-gpu, AMD's, Intel's."""
# "system:serviceaccount:kube-system:resource-claim-controller" creates a pod's ResourceClaims from its
# templates (kube-controller-manager's resource-claim-controller); kube-scheduler creates the claim of a
# pod's DRA extended resources (KEP-5004).
RESOURCE_CLAIM_CREATORS = ("system:serviceaccount:kube-system:resource-claim-controller", "system:kube-scheduler")


MIN_ADMISSION_KEY_BYTES = 32
"""256 bits, the hash's own size (RFC 2104 section 3: a key shorter than the hash output weakens
the MAC)."""


class Settings(BaseSettings):
    """Platform-wide configuration; what a reader cannot see from the fields:

    - ``admission_deadline_seconds``: keep it below the webhook configuration's ``timeoutSeconds``.
    - ``controller_users``: whose creates of an owned object are trusted as children of a workload
      (they inherit the parent's run-id and nothing else); an owned object anyone else creates is
      a top-level workload.
    - ``kueue_elastic_jobs``: Kueue's ElasticJobsViaWorkloadSlices gate (alpha, off by default in
      Kueue 0.17) is on, so an elastic RayCluster/RayJob may use the Ray autoscaler under Kueue.
    - ``max_bytes_in_flight``: bytes of large bodies (over the 64 KiB inline limit) decided at once;
      a 7.8 MiB review costs ~30 MB while decided, so 8 MiB keeps the server under the chart's
      512 Mi limit. A body that does not fit waits until the deadline, then gets HTTP 429.
    - ``header_timeout_seconds``: TLS handshake and request head from its first byte (slowloris).
    - ``idle_timeout_seconds``: the API server's webhook client keeps idle connections for 90 s
      (``IdleConnTimeout`` of k8s.io/apimachinery's ``SetTransportDefaults``) and reopens one it
      finds closed.
    - ``admission_key``: signs the admission record; the webhook and the operator's recorder need
      the same value (one Secret in the chart). Unset, the recorder trusts no record; set, it must
      be at least ``MIN_ADMISSION_KEY_BYTES`` or neither process starts.
    - ``opa_timeout_seconds``: below ``admission_deadline_seconds`` (2 s), itself below the
      webhook's ``timeoutSeconds`` (3 s), so taugate answers a late OPA before its own deadline.
      1 s is over 100 times a local OPA's answer (median 2.2 ms, p99 8 ms, OPA v1.22.4, 2-core
      machine, 2026-12-01).
    - ``log_level``, ``log_format``: plain text here; ``taugate.logs`` checks them first.
    - ``dra_gpu_workloads`` ``queue``: only when Kueue runs with its DRA support and maps these
      DeviceClasses onto the queues' GPU resource (docs/gpu-paths.md).
    - ``admission_policy``: the operator installs and keeps the ValidatingAdmissionPolicy of
      ``taugate/admission_policy.py`` (False: it removes its own).
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
        # issue 17 kinds' controllers (their install manifests' service accounts)
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
    admission_policy: bool = True
    log_level: str = "info"
    log_format: str = "json"

    def admission_key_bytes(self) -> bytes | None:
        value = self.admission_key.get_secret_value() if self.admission_key is not None else ""
        return value.encode() if value else None

    def admission_key_problem(self) -> str | None:
        """Why the admission key is unusable (shorter than ``MIN_ADMISSION_KEY_BYTES``), or None."""
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
