"""Where the tests' inputs are: this repository's examples and policies, and the shared real
samples (``../shared/samples``, read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SAMPLES = SHARED / "samples"
POLICIES = REPO / "policies"
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"
EXAMPLE_RAYJOB = REPO / "examples" / "rayjob-image-classifier.yaml"
IMAGE_CLASSIFIER = SAMPLES / "kuberay/ray-operator/config/samples/pytorch-resnet-image-classifier/ray-job.pytorch-image-classifier.yaml"
