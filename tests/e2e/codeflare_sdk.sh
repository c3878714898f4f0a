#!/usr/bin/env bash
# Installs the CodeFlare SDK (how Kubeflow and OpenShift AI users create RayClusters and RayJobs from
# Python) into a venv of its own, cached by version outside the work tree:
#
#   ${TAUGATE_E2E_CACHE:-$HOME/.cache/taugate-e2e}/codeflare-sdk-<version>/
#
# Not a test extra of pyproject.toml: codeflare-sdk 0.40.1 pins ray[data,default]==2.58.0 (about
# 930 MB installed, with pyarrow and pandas) and openshift-client, so tests/e2e/test_codeflare_sdk.py
# runs it in a subprocess, as a user's notebook would. The version is the pin in codeflare-sdk.txt.
# Prints "codeflare-sdk: <venv python>" on its last line; exit 1 if the install fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${TAUGATE_E2E_CACHE:-$HOME/.cache/taugate-e2e}
pin=$(grep -v '^#' "$here/codeflare-sdk.txt")
venv="$cache/codeflare-sdk-${pin#codeflare-sdk==}"
if [ ! -f "$venv/.installed" ]; then  # absent after an interrupted install too: start again
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q -r "$here/codeflare-sdk.txt"
  touch "$venv/.installed"
fi
echo "codeflare-sdk: $venv/bin/python"
