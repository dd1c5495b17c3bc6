#!/usr/bin/env bash
# Builds a Go tool from the module proxy at a pinned version (never a prebuilt download), once,
# into $CMA_CACHE/tools/<name>-<version>/, and prints the binary's path on stdout. It is built
# outside this module so its dependencies never enter go.mod. Used by hack/lint.sh
# (golangci-lint, actionlint), `make docs` (helm-docs) and `make release` (cyclonedx-gomod).
#
# Usage: hack/tool.sh NAME PACKAGE@VERSION     e.g. hack/tool.sh actionlint github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: hack/tool.sh NAME PACKAGE@VERSION" >&2; exit 2; }
name=$1 pkg=$2 version=${2##*@}
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.11}"
CACHE="${CMA_CACHE:-$HOME/.cache/configmap-attacher}"
dir="$CACHE/tools/$name-$version"
bin="$dir/$name"
if [ ! -x "$bin" ]; then
  mkdir -p "$CACHE/tools"
  # One build at a time per tool: parallel test packages may ask for the same one.
  exec 8>"$CACHE/tools/.$name-$version.lock"
  command -v flock >/dev/null 2>&1 && flock 8
  if [ ! -x "$bin" ]; then
    echo "building $name $version from the module proxy (once; cached in $dir) ..." >&2
    start=$(date +%s)
    # -mod=mod and GOFLAGS from the caller would apply to the tool's own module; clear them.
    rm -rf "$dir.tmp"
    GOFLAGS= GOBIN="$dir.tmp" go install "$pkg" >&2
    mkdir -p "$dir" && mv "$dir.tmp/$name" "$bin" && rmdir "$dir.tmp"
    echo "built $name in $(( $(date +%s) - start )) s" >&2
  fi
fi
echo "$bin"
