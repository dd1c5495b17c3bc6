#!/usr/bin/env bash
# Builds the real control-plane parts the integration and end-to-end tests run:
# etcd, kube-apiserver, kube-controller-manager, kubectl (k8s.io/kubernetes) and the
# Argo Rollouts controller (two minors), helm (helm.sh/helm/v3, for the chart tests) and Argo CD
# (the application controller, the repo server and a Redis-compatible server in one binary, for
# test/gitops and `make demo-argocd`), all from Go modules, nothing downloaded prebuilt.
# Binaries are cached under $CMA_CACHE (default $HOME/.cache/configmap-attacher), keyed on
# their pinned versions, so a warm run only checks that the files exist.
#
# Usage: hack/build-binaries.sh [component...]   (default: all)
#        KUBE_VERSION=v1.31.13 hack/build-binaries.sh kube-apiserver kube-controller-manager etcd kubectl
#          (the oldest control plane the tests run, test/support/cluster OldKubeVersion: its own
#          wrapper module, build log names and lock, so it builds beside a run for the default
#          one; its etcd and kubectl are links to the default version's, built once)
# Prints the directory holding the binaries of each version on its last line per component.
set -euo pipefail

DEFAULT_KUBE_VERSION=v1.34.5
KUBE_VERSION="${KUBE_VERSION:-$DEFAULT_KUBE_VERSION}"
ROLLOUTS_VERSION="${ROLLOUTS_VERSION:-v1.10.2}"
ROLLOUTS_OLD_VERSION="${ROLLOUTS_OLD_VERSION:-v1.9.1}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
ARGOCD_VERSION="${ARGOCD_VERSION:-v3.2.6}"
CACHE="${CMA_CACHE:-$HOME/.cache/configmap-attacher}"
export GOTOOLCHAIN="${GOTOOLCHAIN_BUILD:-go1.26.11}"
export GOFLAGS=-mod=mod
mkdir -p "$CACHE/logs"

all=(etcd kube-apiserver kube-controller-manager kubectl rollouts-controller rollouts-controller-old helm argocd)
comps=("$@")
[ ${#comps[@]} -eq 0 ] && comps=("${all[@]}")
is_kube() { case "$1" in etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) return 0;; esac; return 1; }

# One build at a time per component: concurrent runs (parallel test packages each finding a
# binary missing, `make binaries`' lanes, `make publish-tools` beside them) would write the
# same *.tmp outputs, go.sum files and wrapper directories (rollouts_wrapper rm -rf's its
# directory). The kube components of one KUBE_VERSION share a wrapper module, so they take that
# version's lock; every other component takes its own. A lock is held while its component is
# checked and built, so runs for different components build at once and a later run for the
# same one waits, then finds it cached.
lock_of() { # component
  if is_kube "$1"; then echo "$CACHE/.build-kube-$KUBE_VERSION.lock"; else echo "$CACHE/.build-$1.lock"; fi
}
take_lock() { # component
  command -v flock >/dev/null 2>&1 || return 0
  local f; f=$(lock_of "$1")
  exec 9>"$f"
  if ! flock -n 9; then
    echo "waiting for another build-binaries.sh run (lock $f) ..."
    flock 9
  fi
}
release_lock() { exec 9>&-; }

kube_minor() { local v="${KUBE_VERSION#v}"; echo "${v#*.}" | cut -d. -f1; }
kube_dir="$CACHE/kube-$KUBE_VERSION"
start_all=$(date +%s)

# kube wrapper module: k8s.io/kubernetes cannot be `go install`ed (its go.mod points the
# staging modules at ./staging); a module that requires it and maps each staging module to
# the published version builds every command.
kube_wrapper() {
  local w="$CACHE/src/kube-$KUBE_VERSION"
  if [ ! -f "$w/go.sum.done" ]; then
    mkdir -p "$w"
    local staging="${KUBE_VERSION/v1./v0.}"
    {
      echo "module cma.local/kubewrapper"
      echo "go 1.24.0"
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo "replace ("
      local modfile
      modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } > "$w/go.mod"
    echo 'package main' > "$w/tools.go"
    (cd "$w" && go mod download k8s.io/kubernetes && touch go.sum.done)
  fi
  echo "$w"
}

rollouts_wrapper() { # $1 version
  local v="$1" w="$CACHE/src/rollouts-$1"
  if [ ! -f "$w/ready" ]; then
    rm -rf "$w"; mkdir -p "$w"
    local dir
    dir=$(go mod download -json "github.com/argoproj/argo-rollouts@$v" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    # The controller hard-codes its metrics and healthz listeners to 0.0.0.0. Tests must
    # listen on loopback only, so build from a copy whose listen address is 127.0.0.1.
    cp -r "$dir" "$w/src"; chmod -R u+w "$w/src"
    sed -i 's/"0\.0\.0\.0:%d"/"127.0.0.1:%d"/' "$w/src/controller/controller.go"
    grep -q '"127.0.0.1:%d"' "$w/src/controller/controller.go"
    touch "$w/ready"
  fi
  echo "$w/src"
}

# helm wrapper module: a module that requires helm.sh/helm/v3 builds its cmd/helm with helm's
# own dependency versions (its go.mod has no replace directives), independent of ours.
helm_wrapper() {
  local w="$CACHE/src/helm-$HELM_VERSION"
  if [ ! -f "$w/go.sum.done" ]; then
    mkdir -p "$w"
    printf 'module cma.local/helmwrapper\n\ngo 1.26.0\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" > "$w/go.mod"
    echo 'package main' > "$w/tools.go"
    (cd "$w" && go mod download helm.sh/helm/v3 && touch go.sum.done)
  fi
  echo "$w"
}

# The Kubernetes version a helm binary assumes without a cluster (`helm template`'s default).
helm_kube_default() { # helm binary
  local d; d=$(mktemp -d)
  mkdir -p "$d/c/templates"
  printf 'apiVersion: v2\nname: c\nversion: 0.0.0\n' > "$d/c/Chart.yaml"
  printf 'v: {{ .Capabilities.KubeVersion.Version }}\n' > "$d/c/templates/v.yaml"
  HOME="$d" HELM_CACHE_HOME="$d/cache" HELM_CONFIG_HOME="$d/config" HELM_DATA_HOME="$d/data" \
    "$1" template c "$d/c" 2>/dev/null | sed -n 's/^v: //p'
  rm -rf "$d"
}

# Argo CD: `go install github.com/argoproj/argo-cd/v3/...@VERSION` fails on the module's replace
# directives, so build from a writable copy of the module source as the main module (as for the
# Rollouts controller). Nothing of Argo CD is kept in this repository: the copy lives in the
# cache, and the only file added to it is the small wrapper main below, which runs one of
#   argocd application-controller ARGS...  (cmd/argocd-application-controller/commands)
#   argocd repo-server ARGS...             (cmd/argocd-repo-server/commands)
#   argocd redis --addr 127.0.0.1:PORT     (github.com/alicebob/miniredis/v2, already in Argo
#                                           CD's module graph: what `argocd --core` runs)
# The application controller's metrics listener is hard-coded to 0.0.0.0 in this version
# (controller/appcontroller.go); the copy is patched to 127.0.0.1, as every test process
# listens on loopback only.
argocd_wrapper() {
  local v="$ARGOCD_VERSION" w="$CACHE/src/argocd-$ARGOCD_VERSION"
  if [ ! -f "$w/ready" ]; then
    rm -rf "$w"; mkdir -p "$w"
    local dir
    dir=$(go mod download -json "github.com/argoproj/argo-cd/v3@$v" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    cp -r "$dir" "$w/src"; chmod -R u+w "$w/src"
    sed -i 's/"0\.0\.0\.0:%d", metricsPort/"127.0.0.1:%d", metricsPort/' "$w/src/controller/appcontroller.go"
    grep -q '"127.0.0.1:%d", metricsPort' "$w/src/controller/appcontroller.go"
    mkdir -p "$w/src/cmd/cma-argocd"
    cat > "$w/src/cmd/cma-argocd/main.go" <<'GO'
// Command cma-argocd is generated by configmap-attacher's hack/build-binaries.sh: the Argo CD
// application controller, repo server and an in-memory Redis (miniredis) in one binary for
// tests on 127.0.0.1. Usage: cma-argocd application-controller|repo-server|redis ARGS...
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	"github.com/argoproj/argo-cd/v3/common"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	"github.com/argoproj/argo-cd/v3/util/log"
)

func main() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cma-argocd application-controller|repo-server|redis ARGS...")
		os.Exit(2)
	}
	var command *cobra.Command
	switch os.Args[1] {
	case "application-controller":
		command = appcontroller.NewCommand()
	case "repo-server":
		command = reposerver.NewCommand()
	case "redis":
		fs := flag.NewFlagSet("redis", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:6379", "listen address")
		_ = fs.Parse(os.Args[2:])
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr(*addr); err != nil {
			fmt.Fprintln(os.Stderr, "miniredis:", err)
			os.Exit(1)
		}
		fmt.Println("miniredis listening on", m.Addr())
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		m.Close()
		return
	case "version":
		fmt.Println(common.GetVersion().Version)
		return
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
	command.SetArgs(os.Args[2:])
	if err := command.Execute(); err != nil {
		os.Exit(1)
	}
}
GO
    touch "$w/ready"
  fi
  echo "$w/src"
}

build() { # name outdir logfile cmd...
  local name="$1" out="$2" log="$3"; shift 3
  if [ -x "$out/$name" ]; then echo "[$i/$n] $name: cached at $out/$name"; return; fi
  mkdir -p "$out"
  local t0=$(date +%s)
  echo "[$i/$n] building $name (log: $log) ... elapsed so far $(( t0 - start_all ))s"
  if ! "$@" >"$log" 2>&1 9>&-; then
    echo "[$i/$n] FAILED to build $name after $(( $(date +%s) - t0 ))s; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    if is_kube "$name"; then echo "retry with: KUBE_VERSION=$KUBE_VERSION $0 $name" >&2; else echo "retry with: $0 $name" >&2; fi
    exit 1
  fi
  echo "[$i/$n] built $name in $(( $(date +%s) - t0 ))s: $out/$name"
}

n=${#comps[@]}; i=0
for c in "${comps[@]}"; do
  i=$((i+1))
  # An older control plane runs the default version's etcd and kubectl (etcd 3.6 serves the
  # older apiserver's etcd 3.5 client; kubectl only applies manifests): a link, not a second
  # build of each, which a cold first run would spend minutes on.
  if [ "$KUBE_VERSION" != "$DEFAULT_KUBE_VERSION" ] && { [ "$c" = etcd ] || [ "$c" = kubectl ]; }; then
    shared="$CACHE/kube-$DEFAULT_KUBE_VERSION/$c"
    if [ ! -x "$shared" ]; then
      KUBE_VERSION="$DEFAULT_KUBE_VERSION" "$0" "$c" | sed 's/^/  /'
    fi
    mkdir -p "$kube_dir"
    ln -sfn "$shared" "$kube_dir/$c"
    echo "[$i/$n] $c: $kube_dir/$c -> $shared"
    continue
  fi
  take_lock "$c"
  case "$c" in
    etcd)
      w=$(kube_wrapper)
      build etcd "$kube_dir" "$CACHE/logs/etcd-$KUBE_VERSION.log" \
        bash -c "cd '$w' && go build -trimpath -ldflags '-s -w' -o '$kube_dir/etcd.tmp' go.etcd.io/etcd/server/v3 && mv '$kube_dir/etcd.tmp' '$kube_dir/etcd'" ;;
    kube-apiserver|kube-controller-manager|kubectl|kube-scheduler)
      w=$(kube_wrapper)
      ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(kube_minor)"
      ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$(kube_minor)"
      build "$c" "$kube_dir" "$CACHE/logs/$c-$KUBE_VERSION.log" \
        bash -c "cd '$w' && go build -trimpath -ldflags '$ld' -o '$kube_dir/$c.tmp' k8s.io/kubernetes/cmd/$c && mv '$kube_dir/$c.tmp' '$kube_dir/$c'" ;;
    rollouts-controller|rollouts-controller-old)
      v="$ROLLOUTS_VERSION"; [ "$c" = rollouts-controller-old ] && v="$ROLLOUTS_OLD_VERSION"
      src=$(rollouts_wrapper "$v")
      out="$CACHE/rollouts-$v"
      build rollouts-controller "$out" "$CACHE/logs/rollouts-$v.log" \
        bash -c "cd '$src' && go build -trimpath -ldflags '-s -w -X github.com/argoproj/argo-rollouts/utils/version.version=${v#v}' -o '$out/rollouts-controller.tmp' ./cmd/rollouts-controller && mv '$out/rollouts-controller.tmp' '$out/rollouts-controller'"
      if [ ! -d "$out/crds" ]; then
        mkdir -p "$out/crds"; for f in "$src"/manifests/crds/*-crd.yaml; do cp "$f" "$out/crds/"; done
      fi ;;
    helm)
      w=$(helm_wrapper)
      out="$CACHE/helm-$HELM_VERSION"
      # As helm's own Makefile: the Kubernetes version that `helm template` and `helm lint`
      # assume without a cluster (and check the chart's kubeVersion against) is its client-go's
      # (v0.N → 1.N). Without these flags it is v1.20.0, and a chart with kubeVersion
      # >=1.34 renders with the released helm but not with this one.
      kv=$(cd "$w" && go list -m -f '{{.Version}}' k8s.io/client-go); kv=${kv#v0.}; kv=${kv%%.*}
      ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
      for p in chartutil lint/rules; do
        ld="$ld -X helm.sh/helm/v3/pkg/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$p.k8sVersionMinor=$kv"
      done
      # A helm cached before these flags existed is rebuilt once (-trimpath keeps -ldflags out
      # of the build info, so ask the binary).
      if [ -x "$out/helm" ] && [ "$(helm_kube_default "$out/helm")" != "v1.$kv.0" ]; then
        echo "helm: $out/helm assumes Kubernetes $(helm_kube_default "$out/helm"), not v1.$kv.0; rebuilding"
        rm -f "$out/helm"
      fi
      build helm "$out" "$CACHE/logs/helm-$HELM_VERSION.log" \
        bash -c "cd '$w' && go build -trimpath -ldflags '$ld' -o '$out/helm.tmp' helm.sh/helm/v3/cmd/helm && mv '$out/helm.tmp' '$out/helm'" ;;
    argocd)
      src=$(argocd_wrapper)
      out="$CACHE/argocd-$ARGOCD_VERSION"
      ld="-s -w -X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}"
      build argocd "$out" "$CACHE/logs/argocd-$ARGOCD_VERSION.log" \
        bash -c "cd '$src' && CGO_ENABLED=0 go build -trimpath -ldflags '$ld' -o '$out/argocd.tmp' ./cmd/cma-argocd && mv '$out/argocd.tmp' '$out/argocd'"
      if [ ! -d "$out/crds" ]; then
        mkdir -p "$out/crds.tmp"
        cp "$src/manifests/crds/application-crd.yaml" "$src/manifests/crds/appproject-crd.yaml" "$out/crds.tmp/"
        mv "$out/crds.tmp" "$out/crds"
      fi ;;
    *) echo "unknown component $c (known: ${all[*]})" >&2; exit 2 ;;
  esac
  release_lock
done
echo "all ${n} components ready in $(( $(date +%s) - start_all ))s under $CACHE"
