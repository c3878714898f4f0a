"""Where the tests' inputs are: this repository's examples, policies and test data
(``tests/data``), and the upstream projects' own files, read in place from the Go modules pinned
in ``tests/e2e/gomod`` (``tests/upstream.py``): nothing outside the repository but the Go module
cache."""

from __future__ import annotations

from pathlib import Path

from tests import upstream

REPO = Path(__file__).resolve().parents[1]
POLICIES = REPO / "policies"
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
EXAMPLE_RAYJOB = REPO / "examples" / "rayjob-image-classifier.yaml"
DATA = REPO / "tests" / "data"
"""Inputs written by the project (tests/data/README.md says after what)."""

KUBERAY = upstream.module_dir("kuberay")
"""KubeRay's ray-operator module: ``config/samples``, ``config/crd/bases``."""
KUBERAY_SAMPLES = KUBERAY / "config" / "samples"
RAYJOB_CRD = KUBERAY / "config" / "crd" / "bases" / "ray.io_rayjobs.yaml"
RAYCLUSTER_CRD = KUBERAY / "config" / "crd" / "bases" / "ray.io_rayclusters.yaml"
RAYSERVICE_CRD = KUBERAY / "config" / "crd" / "bases" / "ray.io_rayservices.yaml"
STABLE_DIFFUSION = KUBERAY_SAMPLES / "ray-service.stable-diffusion.yaml"
"""KubeRay's GPU RayService: a CPU head and 1 worker of 1 GPU in group ``gpu-group``, requests set."""
IMAGE_CLASSIFIER = KUBERAY_SAMPLES / "pytorch-resnet-image-classifier" / "ray-job.pytorch-image-classifier.yaml"
"""KubeRay's GPU RayJob sample: a CPU head and 4 workers of 1 GPU each in group ``gpu-group``."""

KUEUE = upstream.module_dir("kueue")
"""Kueue's module: ``config/components/crd/bases``; its example workloads are
``cmd/kueueviz/examples`` (the site's ``static/examples`` are a separate module, not published)."""
KUEUE_CRDS = KUEUE / "config" / "components" / "crd" / "bases"
KUEUE_EXAMPLES = KUEUE / "cmd" / "kueueviz" / "examples"
KUEUE_JOB = KUEUE_EXAMPLES / "03-agi-job.yaml"
"""Kueue's example batch/v1 Job: 3 pods, queue label, suspended, cpu and memory requests."""

K8S_DRA_TEMPLATES = (upstream.module_dir("kubernetes", "k8s.io/kubernetes") / "test" / "integration" / "scheduler_perf"
                     / "dra" / "templates")
"""Kubernetes' own DRA objects (the scheduler's DRA benchmarks): DeviceClasses ``test-class``,
ResourceClaimTemplates, ResourceClaims and the pods that name them."""

K8S_API = upstream.module_dir("kubernetes", "k8s.io/api")
"""k8s.io/api at the pinned Kubernetes version: ``testdata/HEAD/<group>.<version>.<Kind>.json``."""

JOBSET = upstream.module_dir("jobset")
"""JobSet's module: ``config/components/crd/bases`` (the module ships no examples; its KEPs' are
copied into ``tests/data/admission/jobset``)."""
JOBSET_CRD = JOBSET / "config" / "components" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"

LWS = upstream.module_dir("lws")
"""LeaderWorkerSet's module: ``config/crd/bases``, ``docs/examples``."""
LWS_CRD = LWS / "config" / "crd" / "bases" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_VLLM_GPU = LWS / "docs" / "examples" / "vllm" / "GPU" / "lws.yaml"
"""LWS's vLLM sample: 2 groups of a leader and 1 worker, 8 GPUs each (and a Service)."""
LWS_SAMPLE = LWS / "docs" / "examples" / "sample" / "lws.yaml"
"""LWS's basic sample: 3 groups of 4 nginx pods, leader and worker templates, CPU only."""

KUBEFLOW = upstream.module_dir("kubeflow")
"""Kubeflow's training-operator module: ``manifests/base/crds``, ``examples/pytorch``."""
PYTORCHJOB_CRD = KUBEFLOW / "manifests" / "base" / "crds" / "kubeflow.org_pytorchjobs.yaml"
PYTORCH_MNIST_NCCL = KUBEFLOW / "examples" / "pytorch" / "mnist" / "v1" / "pytorch_job_mnist_nccl.yaml"
"""training-operator's GPU PyTorchJob: a Master and 1 Worker of 1 GPU each, no requests."""
PYTORCH_ELASTIC = KUBEFLOW / "examples" / "pytorch" / "elastic" / "imagenet" / "imagenet.yaml"
"""training-operator's elastic PyTorchJob: 2 CPU Workers, an HPA (metrics) up to maxReplicas 3."""

TRAINER = upstream.module_dir("trainer")
"""Kubeflow Trainer's module: ``manifests/base/crds``, ``manifests/base/runtimes``, ``examples``."""
TRAINER_CRDS = TRAINER / "manifests" / "base" / "crds"
TRAINJOB_CRD = TRAINER_CRDS / "trainer.kubeflow.org_trainjobs.yaml"
TRAINING_RUNTIME_CRDS = (TRAINER_CRDS / "trainer.kubeflow.org_trainingruntimes.yaml",
                         TRAINER_CRDS / "trainer.kubeflow.org_clustertrainingruntimes.yaml")
TORCH_RUNTIME = TRAINER / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"
"""Trainer's ``torch-distributed`` ClusterTrainingRuntime: one replicated job ``node`` (container
``node``), ``mlPolicy.numNodes: 1``, no resources of its own."""
TRAINJOB_TORCH_DDP = DATA / "admission" / "trainer" / "torch-ddp.yaml"
"""The trainer proposal's ``torch-ddp`` TrainJob (``tests/data/README.md``): 5 nodes of 2 GPUs by
request only, on ``torch-distributed``."""
LAMMPS_TRAINJOB = TRAINER / "examples" / "flux" / "lammps-train-job.yaml"
"""Trainer's Flux LAMMPS TrainJob: ``numNodes: 2`` on the ``flux-runtime``, no ``resourcesPerNode``."""
LWS_EXAMPLES = LWS / "docs" / "examples"
KUBEFLOW_EXAMPLES = KUBEFLOW / "examples"

KYVERNO = upstream.module_dir("kyverno")
"""Kyverno's module, read for the Policy Reports working group's CRDs (``wgpolicyk8s.io``
v1alpha2) that taugate's audit writes, and for the benchmark peer's CRDs and release manifest
(``bench/kyverno``)."""
POLICY_REPORT_CRD = KYVERNO / "config" / "crds" / "policyreport" / "wgpolicyk8s.io_policyreports.yaml"
CLUSTER_POLICY_REPORT_CRD = KYVERNO / "config" / "crds" / "policyreport" / "wgpolicyk8s.io_clusterpolicyreports.yaml"

TAUGRID = DATA / "taugrid"
"""TauGrid's CRDs and samples, written by the project after TauGrid's (not on the Go proxy)."""
