#!/usr/bin/env bash
# Installs taugate and everything its tests need (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
# Pinned (scripts/test-constraints.txt), so ruff and mypy judge the code against the same libraries
# on every machine.
python3 -m pip install -q -e '.[test]' -c scripts/test-constraints.txt
# boto3 for an s3:// evidence root, without its dependency resolution (pyproject.toml says why).
python3 -m pip install -q --no-deps boto3==1.43.11 botocore==1.43.11 s3transfer==0.17.0 jmespath==1.1.0
# Real OPA semantics for the policy reference tests. Its metadata asks for Python >= 3.14 but it
# works on 3.11; a failure to install fails CI rather than skipping those tests.
python3 -m pip install -q --ignore-requires-python opa-golib-python-bindings==0.4.4
# The tests read KubeRay's, Kueue's and k8s.io/api's files from the Go modules pinned in
# tests/e2e/gomod (tests/upstream.py): download them now, so a missing `go` fails here, clearly.
python3 -c 'import tests.paths'
# The end-to-end tier's control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), the whole stack (Kueue, the KubeRay operator, kwok), helm v3.22.0 (the
# CLI tests/e2e/test_helm_*.py drives, about 4 minutes of it), plus the OPA server the OPA policy
# backend's tests run (tests/opa_server.py, about 5 minutes of it), built from Go modules and
# cached by version under ~/.cache/taugate-e2e: about 40 minutes on a cold 2-core
# machine, seconds when warm. Gatekeeper (tests/e2e/gomod/gatekeeper, ~5 minutes cold) is only the
# end-to-end benchmark's peer: bench/e2e.py builds it when it runs, no test needs it.
bash tests/e2e/build.sh $(ls tests/e2e/gomod | grep -vx gatekeeper)
# The CodeFlare SDK the end-to-end tier drives as Kubeflow and OpenShift AI users do, in a venv of its
# own cached by version (tests/e2e/codeflare_sdk.sh: it pins ray[data,default], ~930 MB; about 3
# minutes cold, instant when warm).
bash tests/e2e/codeflare_sdk.sh
