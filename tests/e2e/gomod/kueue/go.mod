module taugate.local/e2e/kueue

go 1.26.0

// The Kueue release the tests read their Kueue inputs from (CRDs, cmd/kueueviz/examples), through
// tests/upstream.py. Written by hand: no tool directive yet, so `go mod tidy` would drop it.
require sigs.k8s.io/kueue v0.17.0
