module taugate.local/e2e/kyverno

go 1.26.0

// Kyverno: read only, for the Policy Reports working group's CRDs it ships
// (config/crds/policyreport/wgpolicyk8s.io_{policyreports,clusterpolicyreports}.yaml), which
// taugate's audit writes (taugate/policy_report.py) and the chart installs where absent.
// Nothing is built from it (no `tool` directive), so tests/e2e/build.sh skips it.
require github.com/kyverno/kyverno v1.19.1
