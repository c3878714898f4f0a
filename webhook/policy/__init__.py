"""The Rego policy engine: policy sets, their tests, and the embedded and OPA backends."""
