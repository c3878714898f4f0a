module taugate.local/e2e/kuberay

go 1.26.0

// The KubeRay release the tests read their KubeRay inputs from (CRDs, config/samples), through
// tests/upstream.py. Written by hand: no tool directive yet, so `go mod tidy` would drop it.
require github.com/ray-project/kuberay/ray-operator v1.5.0
