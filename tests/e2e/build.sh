#!/usr/bin/env bash
# Builds the real Kubernetes control plane the end-to-end tests run against, from Go modules.
#
# Each component is a small Go module under tests/e2e/gomod/<component>/ whose go.mod requires the
# upstream module at a pinned version (go.sum committed) and names the commands to build as `tool`
# directives. Binaries are cached outside the work tree, keyed by component and by the hash of its
# go.mod + go.sum, so a warm machine skips the build:
#
#   ${TAUGATE_E2E_CACHE:-$HOME/.cache/taugate-e2e}/<component>-<hash>/bin/
#
# Usage: tests/e2e/build.sh [component ...]   (default: every component under tests/e2e/gomod)
# Prints, on its last line for each component, "<component>: <bin dir>". Exit 1 if a build fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${TAUGATE_E2E_CACHE:-$HOME/.cache/taugate-e2e}
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=${GOTOOLCHAIN:-local}
command -v go >/dev/null || { echo "build.sh: go is not on PATH (the end-to-end tier builds Kubernetes from Go modules)" >&2; exit 1; }

# Bumped when the way binaries are built or named changes, so the cache key changes with it.
BUILD_FORMAT=1

# Version stamps: without them kube-apiserver reports v0.0.0 and clients that check it fail.
ldflags_for() {
  local mod=$1 v
  case $mod in
    kubernetes)
      v=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/gomod/$mod/go.mod")
      local major=${v#v}; major=${major%%.*}; local minor=${v#v*.}; minor=${minor%%.*}
      local f=""
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
      done
      echo "-s -w$f" ;;
    helm)
      # As helm's own Makefile does: its version, and the Kubernetes version of its client-go
      # (v0.37 -> 1.37) as the default .Capabilities.KubeVersion of `helm template` and `helm lint`.
      v=$(awk '$1=="helm.sh/helm/v3"{print $2}' "$here/gomod/$mod/go.mod")
      local cg; cg=$(awk '$1=="k8s.io/client-go"{print $2}' "$here/gomod/$mod/go.mod")
      local kmin=${cg#v0.}; kmin=${kmin%%.*}
      local f=" -X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        f+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kmin"
      done
      echo "-s -w$f" ;;
    *) echo "-s -w" ;;
  esac
}

# The binary's name: the command's last path element, or the upstream name where they differ.
binary_name() {
  case $1 in
    go.etcd.io/etcd/server/v3) echo etcd ;;
    github.com/ray-project/kuberay/ray-operator) echo kuberay-operator ;;
    github.com/open-policy-agent/gatekeeper/v3) echo gatekeeper ;;
    *) basename "$1" ;;
  esac
}

build_one() {
  local mod=$1 dir="$here/gomod/$1"
  [ -f "$dir/go.mod" ] || { echo "build.sh: no Go module at $dir" >&2; return 1; }
  local key; key=$( (cat "$dir/go.mod" "$dir/go.sum"; ldflags_for "$mod"; echo "$BUILD_FORMAT") | sha256sum | cut -c1-12)
  local out="$cache/$mod-$key"
  if [ -f "$out/.complete" ]; then echo "$mod: cached in $out/bin"; return 0; fi
  local tools; tools=$(cd "$dir" && go mod edit -json | python3 -c 'import json,sys; print(" ".join(t["Path"] for t in json.load(sys.stdin).get("Tool") or []))')
  if [ -z "$tools" ]; then echo "$mod: pinned source only, nothing to build"; return 0; fi
  echo "$mod: building $(echo $tools | wc -w) command(s) with $(go version | awk '{print $3}') (a first build of Kubernetes takes 15-30 minutes on 2 cores)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp/bin"
  local start=$SECONDS
  for t in $tools; do
    echo "$mod:   go build $t"
    (cd "$dir" && go build -trimpath -ldflags "$(ldflags_for "$mod")" -o "$out.tmp/bin/$(binary_name "$t")" "$t")
  done
  touch "$out.tmp/.complete"; rm -rf "$out"; mv "$out.tmp" "$out"
  echo "$mod: built in $((SECONDS - start)) s into $out/bin"
}

mods=("$@")
[ ${#mods[@]} -gt 0 ] || mods=($(cd "$here/gomod" && ls))
for m in "${mods[@]}"; do build_one "$m"; done
