"""Every label and annotation key taugate reads or writes, in one place.

Keys under ``tau.azure.com`` are the TauGrid API contract (ARCHITECTURE.md section 1); the
``kueue.x-k8s.io`` keys are Kueue's own (``kueue.x-k8s.io/queue-name`` selects the LocalQueue,
``kueue.x-k8s.io/priority-class`` the WorkloadPriorityClass). taugate never writes
``app.kubernetes.io/*`` or ``ray.io/*`` keys.
"""

GROUP = "tau.azure.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

RUN_ID = "tau.azure.com/run-id"
MANAGED_BY = "tau.azure.com/managed-by"
MANAGED_BY_VALUE = "taugate"
WORKSPACE = "tau.azure.com/workspace"
WORKLOAD_PROFILE = "tau.azure.com/workload-profile"
GPU_CLASS = "tau.azure.com/gpu-class"
PROFILE_SET_HASH = "tau.azure.com/workload-profile-set-hash"
LANE = "tau.azure.com/lane"

KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"

# TauQuotaRequest approval annotations: platform-owned, only admins may set them.
APPROVED = "tau.azure.com/approved"
REJECTED = "tau.azure.com/rejected"
REVIEWED_BY = "tau.azure.com/reviewed-by"

# Annotation a platform admin puts on an existing Namespace that taugate did not create, naming the
# one TauWorkspace that may adopt it (Namespaces are cluster-scoped: only admins may annotate them).
ADOPT_AS_WORKSPACE = "tau.azure.com/adopt-as-workspace"

# Annotation in which the mutating webhook records what it changed and why, for the recorder
# (admission has no side effects, so the record travels on the object itself).
ADMISSION_RECORD = "tau.azure.com/admission"

# Annotation on the webhook's TLS Secret: when a rotation published its new CA (RFC 3339, UTC);
# ``taugate certs sync`` switches the serving certificate once the CA has had time to propagate.
CA_PUBLISHED_AT = "tau.azure.com/ca-published-at"

# Annotation on taugate's PolicyReports (taugate/policy_report.py): the digest of the policy set
# that produced the results, as ``taugate policy eval`` prints it.
POLICY_DIGEST = "tau.azure.com/policy-digest"
RESULTS_LEFT_OUT = "tau.azure.com/results-left-out"  # on a PolicyReport: results beyond its limit, counted

# Resource names.
GPU_RESOURCE = "nvidia.com/gpu"
GFD_GPU_PRODUCT = "nvidia.com/gpu.product"
GFD_GPU_COUNT = "nvidia.com/gpu.count"

RUN_ID_LENGTH = 24
