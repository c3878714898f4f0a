# The one query the engine evaluates per admission request: every result of every policy.
#
# Each policy lives in package data.taugate.policies.<name with "_" for "-"> and defines
# `deny contains v` and/or `warn contains v`. `results` lists them as
# [package key, "deny" | "warn", v]; the engine maps the key back to the policy folder and
# applies the enforcement action configured for it (policies/enforcement.yaml).
package taugate.aggregate

results := array.concat(
	[[name, "deny", v] | some name; some v in data.taugate.policies[name].deny],
	[[name, "warn", v] | some name; some v in data.taugate.policies[name].warn],
)
