module taugate.local/e2e/kubeflow

go 1.26.0

// Kubeflow's training-operator (kubeflow.org PyTorchJob and the other v1 jobs): source only, nothing
// built. The tests read its CRDs (manifests/base/crds) and examples/ through tests/upstream.py; the
// end-to-end stack installs the PyTorchJob CRD so Kueue's kubeflow.org/pytorchjob integration starts.

require github.com/kubeflow/training-operator v1.9.3
