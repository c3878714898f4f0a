"""The tests' upstream inputs come from the Go modules pinned in tests/e2e/gomod, one pin each, and
a missing ``go`` or pin is an error that says what to do, never a skip."""

from __future__ import annotations

import pytest

from tests import paths, upstream


def test_k8s_io_api_is_pinned_at_the_staging_version_of_the_pinned_kubernetes():
    _, kubernetes = upstream.pinned("kubernetes")
    module, api = upstream.pinned("kubernetes", "k8s.io/api")
    assert module == "k8s.io/api" and api == "v0" + kubernetes[2:]  # v1.37.2 -> v0.37.2


@pytest.mark.parametrize("component", ["kuberay", "kueue", "jobset", "lws", "kubeflow"])
def test_each_module_directory_is_the_pinned_module_at_its_pinned_version(component):
    module, version = upstream.pinned(component)
    directory = upstream.module_dir(component)
    assert directory.name == f"{module.rsplit('/', 1)[-1]}@{version}"
    assert f"module {module}\n" in (directory / "go.mod").read_text()


def test_the_paths_the_tests_read_exist_in_the_modules():
    for path in (paths.IMAGE_CLASSIFIER, paths.RAYJOB_CRD, paths.RAYCLUSTER_CRD, paths.KUEUE_JOB,
                 paths.KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml",
                 paths.K8S_API / "testdata" / "HEAD" / "admission.k8s.io.v1.AdmissionReview.json",
                 paths.JOBSET_CRD, paths.LWS_CRD, paths.LWS_VLLM_GPU, paths.LWS_SAMPLE, paths.PYTORCHJOB_CRD,
                 paths.PYTORCH_MNIST_NCCL, paths.PYTORCH_ELASTIC, paths.RAYSERVICE_CRD, paths.STABLE_DIFFUSION):
        assert path.is_file(), path


def test_without_go_on_path_the_error_says_to_install_go(monkeypatch):
    monkeypatch.setenv("PATH", "")
    upstream.module_dir.cache_clear()
    try:
        with pytest.raises(upstream.UpstreamUnavailable, match="`go` is not on PATH"):
            upstream.module_dir("kuberay")
    finally:
        upstream.module_dir.cache_clear()


def test_a_component_without_a_pin_or_a_module_not_required_is_an_error():
    with pytest.raises(upstream.UpstreamUnavailable, match="no Go module pins component 'ray'"):
        upstream.pinned("ray")
    with pytest.raises(upstream.UpstreamUnavailable, match="does not require sigs.k8s.io/kwok"):
        upstream.pinned("kueue", "sigs.k8s.io/kwok")


def test_a_module_that_cannot_be_downloaded_is_an_error_naming_it_and_its_pin(tmp_path, monkeypatch):
    (tmp_path / "kueue").mkdir()
    (tmp_path / "kueue" / "go.mod").write_text("module taugate.local/e2e/kueue\n\ngo 1.26.0\n\n"
                                               "require sigs.k8s.io/kueue v0.0.1-not-published\n")
    monkeypatch.setattr(upstream, "GOMOD", tmp_path)
    monkeypatch.setenv("GOPROXY", "off")  # fails at once, without the network
    upstream.module_dir.cache_clear()
    try:
        with pytest.raises(upstream.UpstreamUnavailable,
                           match=r"sigs.k8s.io/kueue@v0.0.1-not-published .*tests/e2e/gomod/kueue/go.mod"):
            upstream.module_dir("kueue")
    finally:
        upstream.module_dir.cache_clear()
