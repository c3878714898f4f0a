module taugate.local/e2e/jobset

go 1.26.0

// The JobSet release the tests read their JobSet inputs from (config/components/crd/bases, the
// webhook's rules) through tests/upstream.py (issue 17). Pinned source only: nothing is built.
require sigs.k8s.io/jobset v0.11.1
