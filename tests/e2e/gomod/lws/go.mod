module taugate.local/e2e/lws

go 1.26.0

// The LeaderWorkerSet release the tests read their LeaderWorkerSet inputs from (config/crd/bases,
// docs/examples) through tests/upstream.py (issue 17). Pinned source only: nothing is built.
require sigs.k8s.io/lws v0.8.0
