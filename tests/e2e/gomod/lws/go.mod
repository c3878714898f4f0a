module taugate.local/e2e/lws

go 1.26.0

// LeaderWorkerSet (leaderworkerset.x-k8s.io): source only, nothing built. The tests read its CRD
// (config/crd/bases) and docs/examples/ through tests/upstream.py; the end-to-end stack installs
// the CRD so Kueue's leaderworkerset integration starts (tests/e2e/stack.py).

require sigs.k8s.io/lws v0.8.0
