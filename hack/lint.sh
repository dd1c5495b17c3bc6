#!/usr/bin/env bash
# `make lint`: gofmt, go vet, go.mod tidy, and golangci-lint with the short set in .golangci.yml
# (at the repository root, so editors and a bare `golangci-lint run` find the same config).
# golangci-lint is built from the Go module proxy at a pinned version by hack/tool.sh (cached
# under $CMA_CACHE/tools). A cold build takes a few minutes on 2 cores; a warm run, about 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.11}"
GOLANGCI_LINT_VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"

out=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*'))
if [ -n "$out" ]; then
  echo "gofmt needed on:"; echo "$out"; exit 1
fi
# go vet compiles every package it checks; in the configuration of the shipped binaries
# (`make build`, the tests' build, `make release`: CGO_ENABLED=0, -trimpath) those compiled
# packages are the binaries' own, so on a fresh machine vet's compile is also their build
# (measured with an empty build cache: vet and then the binary, 931 CPU-s in vet's default
# configuration, 598 CPU-s in this one). Nothing here uses cgo.
CGO_ENABLED=0 go vet -trimpath ./...
# go.mod and go.sum must be what `go mod tidy` writes (a direct import marked "// indirect" is
# how a dependency's role gets misread); -diff changes nothing and fails when tidy would.
if ! tidy=$(go mod tidy -diff 2>&1); then
  echo "go mod tidy would change go.mod/go.sum (run it and commit the result):"; echo "$tidy"; exit 1
fi

bin=$(hack/tool.sh golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION")
"$bin" run ./...

# The release workflow cannot run here: actionlint (built like golangci-lint) checks its syntax,
# expressions, permissions keys and action inputs, and its run: scripts with shellcheck when
# shellcheck is on PATH.
actionlint=$(hack/tool.sh actionlint github.com/rhysd/actionlint/cmd/actionlint@v1.7.12)
"$actionlint" .github/workflows/*.yaml
