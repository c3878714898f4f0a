module taugate.local/e2e/kubeflow

go 1.26.0

// The Kubeflow training-operator release the tests read their PyTorchJob inputs from
// (manifests/base/crds, examples/pytorch) through tests/upstream.py (issue 17). Pinned source
// only: nothing is built.
require github.com/kubeflow/training-operator v1.9.3
