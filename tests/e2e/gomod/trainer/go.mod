module taugate.local/e2e/trainer

go 1.26.0

// The Kubeflow Trainer release the tests read their TrainJob inputs from (manifests/base/crds,
// manifests/base/runtimes, examples) through tests/upstream.py (issue 17); Kueue v0.17's
// trainjob integration is built against the same version. Pinned source only: nothing is built.
require github.com/kubeflow/trainer/v2 v2.2.0
