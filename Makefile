# configmap-attacher. argo-rollouts v1.10.2 needs Go >= 1.26.10; the Go command fetches the
# pinned toolchain from the module proxy when the machine has an older one.
# `make help` lists the targets. Variables first (each can be set on the command line), then
# the build macro, then the targets; each target's `## ` comment says what it does.

# ---- Variables --------------------------------------------------------------------------

export GOTOOLCHAIN ?= go1.26.11
export GOFLAGS ?= -buildvcs=false

BIN      ?= bin/configmap-attacher
# STEP_BIN is the step plugin alone (STEP_PKG): what install-plugin gives the Rollouts
# controller.
STEP_BIN ?= bin/configmap-attacher-step
STEP_PKG := ./plugin/cmd/configmap-attacher-step
# The release version has one source of truth, hack/release/VERSION (make set-version VERSION=
# rewrites it and every mention in charts/, examples/ and docs/; make check-version, and
# hack/release/stamp's test in make check, verify they agree). make release and make publish
# default to it; other builds are stamped with git describe.
TREE_VERSION := $(shell cat hack/release/VERSION 2>/dev/null)
ifneq ($(filter release release-binaries publish check-version,$(MAKECMDGOALS)),)
VERSION  ?= $(TREE_VERSION)
endif
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/configmap-attacher/configmap-attacher/plugin.Version=$(VERSION)
# PLATFORMS are make release's binaries; IMAGE_ARCHS the image's (linux).
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGE_REPO ?= ghcr.io/configmap-attacher/configmap-attacher
IMAGE_ARCHS := amd64 arm64
IMAGE_OCI ?= dist/configmap-attacher-image.oci
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
CHART_REPO ?= oci://ghcr.io/configmap-attacher/charts
comma := ,
space := $(subst ,, )

# Tests. The control-plane parts the integration and end-to-end tests start (built from Go
# modules, cached under $$HOME/.cache/configmap-attacher).
TEST_COMPONENTS ?= etcd kube-apiserver kube-controller-manager kubectl rollouts-controller rollouts-controller-old helm argocd
# The oldest Kubernetes the tests run (test/support/cluster OldKubeVersion, the chart's
# kubeVersion floor): its control plane, built from its own modules into kube-$(OLD_KUBE_VERSION).
OLD_KUBE_VERSION ?= v1.31.13
# Its etcd and kubectl are links to KubeVersion's (hack/build-binaries.sh), last so that the
# other lane has built them by then.
OLD_KUBE_COMPONENTS ?= kube-apiserver kube-controller-manager etcd kubectl
GO_TEST_FLAGS ?= -race -count=1 -timeout 45m
# UNIT_PKGS: make check's tests, those that need no control plane.
UNIT_PKGS := ./plugin/... ./rpc/... ./hack/... ./test/support/fixtures ./test/support/fakemeta ./test/bench
# SLOW_TEST_PKGS: make test's longest packages, listed first so that they start first.
SLOW_TEST_PKGS ?= ./test/release ./test/doctor ./test/image ./test/soak ./test/rollouts
FUZZTIME ?= 1m

# The demos' control-plane parts.
DEMO_COMPONENTS := etcd kube-apiserver kube-controller-manager kubectl rollouts-controller

# Release tools (cached under CMA_CACHE).
CMA_CACHE ?= $(HOME)/.cache/configmap-attacher
HELM_VERSION ?= v3.22.0
CYCLONEDX_GOMOD ?= github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
HELM_DOCS_VERSION ?= v1.14.2
HELM_DOCS_FLAGS := --chart-search-root charts --sort-values-order file --skip-version-footer
# What publish.sh runs (make publish-tools; the release workflow builds the same versions,
# test/publish TestToolPins), PUBLISH_FLAGS are passed to it, DRY_RUN=1 prints its commands.
CRANE_PKG ?= github.com/google/go-containerregistry/cmd/crane@v0.22.1
COSIGN_PKG ?= github.com/sigstore/cosign/v3/cmd/cosign@v3.0.6
PUBLISH_FLAGS ?=
DRY := $(filter-out 0 false no,$(DRY_RUN))

# Benchmarks (make bench, make bench-scale). BENCH_RUN=StepBusy (any go test -bench pattern of
# the top-level benchmarks, e.g. 'StepLatency|StepBusy') runs only those, for development.
BENCH_COUNT ?= 3
BENCH_TIMEOUT ?= 90m
BENCH_RUN ?=
BENCH_ALL := ^Benchmark(StepLatency|StepBusy|APIRequests|PluginMemory|SamplePlugin|Concurrent|CommandLine)$$
BENCH_LOAD := $(shell cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
BENCH_ENV = CMA_PLUGIN_BINARY=$(abspath $(BIN)) CMA_STEP_PLUGIN_BINARY=$(abspath $(STEP_BIN)) CMA_BENCH_LOAD_BEFORE='$(BENCH_LOAD)'
SCALE_SIZES ?= 1000,5000,10000
SCALE_CHURN ?= 1m

# The soak (make soak).
SOAK_DURATION ?= 10m
SOAK_SEED ?= $(shell date +%s)
SOAK_ROLLOUTS ?= 5
SOAK_REPORT ?= $(abspath docs/soak.md)

# ---- The build macro --------------------------------------------------------------------

# go-build OUT,PKG[,OS,ARCH]: one static, trimmed binary stamped with VERSION; every shipped
# binary is built by it (OS and ARCH empty: the host's).
go-build = CGO_ENABLED=0 $(if $(3),GOOS=$(3) GOARCH=$(4) )go build -trimpath -ldflags '$(LDFLAGS)' -o $(1) $(2)

# GO_RUN runs a hack/ tool in the same build configuration as go-build (and `make lint`'s go
# vet), so that it reuses the packages they compiled instead of compiling them again.
GO_RUN := CGO_ENABLED=0 go run -trimpath

# go-build-both DIR,OS,ARCH: the full binary and the step plugin alone for one platform, as
# DIR/configmap-attacher-OS-ARCH and DIR/configmap-attacher-step-OS-ARCH (one recipe line each).
define go-build-both
$(call go-build,$(1)/configmap-attacher-$(2)-$(3),.,$(2),$(3))
$(call go-build,$(1)/configmap-attacher-step-$(2)-$(3),$(STEP_PKG),$(2),$(3))

endef

# ---- Targets ----------------------------------------------------------------------------

.PHONY: build check test unit binaries demo demo-argocd lint release set-version check-version publish publish-tools release-binaries clean image fuzz bench bench-scale soak docs help

build: ## the binary and the step plugin alone (BIN, STEP_BIN)
	$(call go-build,$(BIN),.)
	$(call go-build,$(STEP_BIN),$(STEP_PKG))

help: ## this list
	@awk 'BEGIN { FS = ":[^#]*## " } /^[a-z-]+:[^=]*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

## check: the short tier, for the inner loop: lint (gofmt, go vet, go mod tidy, golangci-lint),
## the tests that need no control plane, and the docs-drift checks (the flag tables of README.md
## and docs/*.md; hack/docs's test checks the same). Lint and the tests run at once (the tests
## wait on timers part of the time); each prints its own failures. Under a minute warm on 2 cores.
check: ## the inner loop: lint, the tests that need no control plane, the docs-drift check
	hack/lint.sh & lint=$$!; \
	go test -count=1 $(UNIT_PKGS) || s=1; \
	wait $$lint || s=1; \
	$(GO_RUN) ./hack/docs -check || s=1; \
	exit $${s:-0}

## test: every test: unit, RPC, binary, and the real control plane (the README's test command,
## and CI's through .ci/run). First lint, binaries and publish-tools, at once: on a fresh
## machine they are most of the run (builds from the module proxy), and three of them keep both
## cores busy through downloads and links; warm, each is a check of cached files. Then go test
## runs -p (the CPU count) packages at once, in the order given: the longest ones are listed
## first so that they start first and no long package starts last beside an idle core (./...
## adds the others, each once).
SLOW_TEST_PKGS ?= ./test/release ./test/doctor ./test/image ./test/soak ./test/rollouts
test: ## every test, with -race, against the real control plane (CI's command)
	$(MAKE) --no-print-directory -j3 lint binaries publish-tools
	go test $(GO_TEST_FLAGS) $(SLOW_TEST_PKGS) ./...

## unit: the core's and the RPC boundary's tests under the race detector.
unit: ## the core's, the modes' and the RPC boundary's tests with -race
	go test -race -count=1 ./plugin/... ./rpc/...

## binaries: build (or find cached) etcd, kube-apiserver, kube-controller-manager, kubectl
## and the Argo Rollouts controllers from Go modules, and the older control plane
## (OLD_KUBE_VERSION) beside them: two lanes at once (the script locks per component), each
## taking half of TEST_COMPONENTS' other parts after its control plane, as cold builds spend
## part of their time in module downloads and single-threaded links (their lines name each
## binary's directory, kube-<version>). Fails when either fails.
LANE_OLD_EXTRA := $(filter rollouts-controller-old argocd,$(TEST_COMPONENTS))
binaries: ## the control-plane parts the tests start (TEST_COMPONENTS and the older control plane), built once and cached
	hack/build-binaries.sh $(filter-out $(LANE_OLD_EXTRA),$(TEST_COMPONENTS)) & main=$$!; \
	KUBE_VERSION=$(OLD_KUBE_VERSION) hack/build-binaries.sh $(filter-out etcd kubectl,$(OLD_KUBE_COMPONENTS)) $(LANE_OLD_EXTRA) $(filter etcd kubectl,$(OLD_KUBE_COMPONENTS)) & old=$$!; \
	s=0; wait $$main || s=1; wait $$old || s=1; exit $$s

## demo: the README's "run it": a local control plane with the real Argo Rollouts controller
## and the plugin; a canary Rollout through 4 revisions, printing which ReplicaSet owns which
## ConfigMap and Secret after each stage (hack/demo). Builds the plugin and the control-plane
## binaries it needs first (cached; the first build takes minutes). KEEP=1 keeps it running
## until Ctrl-C and prints the kubeconfig and kubectl commands. (Built, then run, rather than
## `go run ./hack/demo`: go run exits 1 whenever it gets a SIGINT, so a Ctrl-C ending KEEP=1
## would fail make although the demo tore down cleanly.)
demo: build ## run it: a canary Rollout through 4 revisions on a local control plane (KEEP=1)
	hack/build-binaries.sh $(DEMO_COMPONENTS)
	@echo "compiling hack/demo (the first time: a minute or two) ..."
	go build -o bin/demo ./hack/demo
	bin/demo -plugin $(BIN)$(if $(filter-out 0 false no,$(KEEP)), -keep)

## demo-argocd: the same story through the real Argo CD v3.2.6 (application controller, repo
## server, miniredis; hack/build-binaries.sh argocd, about 3.5 minutes the first time): every
## revision is a commit to a file:// Git repository that an Application syncs with automated
## sync and prune; the ownership tree is printed after each sync. KEEP=1 as for demo.
demo-argocd: build ## the demo with every revision a Git commit synced by the real Argo CD
	hack/build-binaries.sh $(DEMO_COMPONENTS) argocd
	@echo "compiling hack/demo (the first time: a minute or two) ..."
	go build -o bin/demo ./hack/demo
	bin/demo -argocd -plugin $(BIN)$(if $(filter-out 0 false no,$(KEEP)), -keep)

## lint: gofmt, go vet, go mod tidy -diff and golangci-lint (.golangci.yml says which linters
## and why).
lint: ## gofmt, go vet, go mod tidy -diff, golangci-lint
	hack/lint.sh

## release: everything of one version in dist/ (docs/install.md "Releasing" lists it): static
## binaries for linux and darwin, amd64 and arm64, the image index (from the same linux
## binaries: the digest `make image` gives), the chart packaged by the real helm with VERSION as
## version and appVersion, install.yaml and install-namespaced.yaml rendered from it, the
## Kustomize base dist/kustomize, a CycloneDX SBOM per binary and one for the image
## (cyclonedx-gomod), dist/install.md (the argo-rollouts-config entry per linux arch with its
## real sha256, the argo-helm values, the image by digest), dist/changelog.md (the version's
## section of docs/changelog.md) and checksums.txt of every file. Reproducible: the same source
## and SOURCE_DATE_EPOCH give the same bytes (test/release TestReleaseReproducible).
release: export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
release: release-binaries ## everything of one version in dist/, reproducibly
	$(GO_RUN) ./hack/image -tag $(IMAGE_REPO):$(VERSION) -revision '$(REVISION)' \
	  $(foreach a,$(IMAGE_ARCHS),-binary linux/$(a)=dist/configmap-attacher-linux-$(a) -step-binary linux/$(a)=dist/configmap-attacher-step-linux-$(a)) \
	  -oci-layout dist/configmap-attacher-image.oci -digest-file dist/configmap-attacher-image.oci.digest
	CMA_CACHE=$(CMA_CACHE) HELM_VERSION=$(HELM_VERSION) hack/build-binaries.sh helm >&2
	$(GO_RUN) ./hack/release -dist dist -version $(VERSION) -image $(IMAGE_REPO) -archs $(subst $(space),$(comma),$(strip $(IMAGE_ARCHS))) \
	  -helm $(CMA_CACHE)/helm-$(HELM_VERSION)/helm \
	  -cyclonedx-gomod "$$(CMA_CACHE=$(CMA_CACHE) hack/tool.sh cyclonedx-gomod $(CYCLONEDX_GOMOD))"

## set-version: make set-version VERSION=vX.Y.Z writes the version into hack/release/VERSION and
## every mention of it (Chart.yaml's version and appVersion, the image tags, download URLs and
## ?ref= in examples/ and docs/, the Kustomize base's chart labels); commit, then tag.
set-version: ## VERSION=vX.Y.Z: write the release version everywhere it is mentioned
	@case "$(origin VERSION)" in command\ line|environment) ;; *) echo "usage: make set-version VERSION=vX.Y.Z" >&2; exit 2;; esac
	$(GO_RUN) ./hack/release set-version $(VERSION)

## check-version: every mention agrees with hack/release/VERSION; with VERSION= (the release
## workflow's tag) also that VERSION is it and docs/changelog.md has its section.
check-version: ## every mention of the version agrees with hack/release/VERSION
	$(GO_RUN) ./hack/release check-version $(if $(filter command\ line environment,$(origin VERSION)),-want $(VERSION))

## publish: push and sign what make release wrote (hack/release/publish.sh: crane push of the
## image, helm push of the chart, cosign sign and attest, the GitHub release). DRY_RUN=1 prints
## the commands with dist/'s digests and runs none (test/release runs it). PUBLISH_FLAGS go to
## publish.sh, for a registry of your own (docs/install.md), e.g.
##   make publish PUBLISH_FLAGS='--registry registry.example.com/team --key cosign.key --no-github-release'
## crane and cosign are the ones `make publish-tools` builds (CRANE=, COSIGN=, HELM= override).
publish: $(if $(DRY),,publish-tools) ## push and sign what make release wrote (DRY_RUN=1 prints the commands)
	VERSION=$(VERSION) IMAGE_REPO=$(IMAGE_REPO) CHART_REPO=$(CHART_REPO) \
	  $(if $(DRY),,CRANE="$${CRANE:-$$(CMA_CACHE=$(CMA_CACHE) hack/tool.sh crane $(CRANE_PKG))}" \
	  COSIGN="$${COSIGN:-$$(CMA_CACHE=$(CMA_CACHE) hack/tool.sh cosign $(COSIGN_PKG))}" HELM="$${HELM:-$(CMA_CACHE)/helm-$(HELM_VERSION)/helm}") \
	  hack/release/publish.sh $(if $(DRY),--dry-run) $(PUBLISH_FLAGS) dist

## publish-tools: build (or find cached) what publish.sh runs, from the Go module proxy: crane,
## cosign (hack/tool.sh) and helm (hack/build-binaries.sh), the versions the release workflow
## builds (test/publish TestToolPins). make test needs them (test/publish runs publish.sh).
publish-tools: ## build crane and cosign (and helm) for publish.sh
	CMA_CACHE=$(CMA_CACHE) hack/tool.sh crane $(CRANE_PKG) >/dev/null
	CMA_CACHE=$(CMA_CACHE) hack/tool.sh cosign $(COSIGN_PKG) >/dev/null
	CMA_CACHE=$(CMA_CACHE) HELM_VERSION=$(HELM_VERSION) hack/build-binaries.sh helm >/dev/null

## release-binaries: only the static binaries of PLATFORMS and dist/checksums.txt.
release-binaries: ## only the static binaries of PLATFORMS and dist/checksums.txt
	rm -rf dist && mkdir -p dist
	$(foreach p,$(PLATFORMS),$(call go-build-both,dist,$(word 1,$(subst /, ,$(p))),$(word 2,$(subst /, ,$(p)))))
	cd dist && sha256sum configmap-attacher-* > checksums.txt && cat checksums.txt

clean: ## remove bin/ and dist/
	rm -rf bin dist

## image: one OCI image index for linux/amd64 and linux/arm64, built without a Docker engine
## (hack/image: FROM scratch, nonroot 65532, the standard OCI labels, SOURCE_DATE_EPOCH
## timestamps: the last commit's time), as an OCI layout that `crane push` pushes as one tag:
##   crane push dist/configmap-attacher-image.oci $(IMAGE_REPO):$(VERSION)
## The same image runs the Job, the controller, and `install-plugin DIR` (the Argo Rollouts
## controller's initContainer).
image: export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image: ## the OCI image index for linux/amd64 and linux/arm64 (IMAGE_OCI), no Docker engine
	$(foreach a,$(IMAGE_ARCHS),$(call go-build-both,bin,linux,$(a)))
	$(GO_RUN) ./hack/image -tag $(IMAGE_REPO):$(VERSION) -revision '$(REVISION)' \
	  $(foreach a,$(IMAGE_ARCHS),-binary linux/$(a)=bin/configmap-attacher-linux-$(a) -step-binary linux/$(a)=bin/configmap-attacher-step-linux-$(a)) \
	  -oci-layout $(IMAGE_OCI) -digest-file $(IMAGE_OCI).digest

## fuzz: run each fuzz target for FUZZTIME (the seed corpora also run in `make test`).
fuzz: ## each fuzz target for FUZZTIME (1m)
	go test ./plugin -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	go test ./plugin -run '^$$' -fuzz '^FuzzTemplateReferences$$' -fuzztime $(FUZZTIME)

## bench: benchmarks against a real control plane (test/bench): step latency through the built
## binary's RPC boundary beside a client-go floor, the step in a busy namespace (quiet, 1,000 and
## 5,000 Pods; controller and step-only installs; apiserver bytes and 429s; RSS with 10 concurrent
## steps), API requests per step, the plugin process's memory beside argo-rollouts' own step
## plugin sample (built from the module cache), 10 callers over 500 Rollouts (and the same under
## -race), the command line's wall time. Writes docs/benchmarks.md and
## docs/benchmarks-step-latency.svg from the run's figures (raw JSON in bin/bench/). About 30
## minutes on 2 CPUs; run it on a quiet machine. -count 3 repeats the short latency, request and
## command-line leaves; the memory, concurrency and busy-namespace leaves measure once per run
## (each is hundreds of steps already; CMA_BENCH_MEMORY_RUNS, CMA_BENCH_CONCURRENT_RUNS,
## CMA_BENCH_BUSY_RUNS raise it). The controller mode's benchmarks (BenchmarkController*) are not
## part of it: docs/controller.md says how to run them, and bench-scale regenerates its figures.
##
## BENCH_RUN=StepBusy runs only those benchmarks, for development: no -race run, the JSON goes
## to bin/bench/partial.json, and docs/benchmarks.md is not rewritten (it comes from a whole run).
ifeq ($(BENCH_RUN),)
bench: build ## benchmarks against a real control plane → docs/benchmarks.md (BENCH_RUN= for some)
	mkdir -p bin/bench
	$(BENCH_ENV) CMA_BENCH_RESULTS=bin/bench/race.json \
	  go test -race ./test/bench/ -run '^$$' -bench '^BenchmarkConcurrent$$/^callers=10$$/^inprocess$$' \
	  -benchtime 1x -count 1 -timeout $(BENCH_TIMEOUT)
	$(BENCH_ENV) CMA_BENCH_RESULTS=bin/bench/results.json CMA_BENCH_RACE_RESULTS=bin/bench/race.json \
	  CMA_BENCH_DOC=docs/benchmarks.md CMA_BENCH_CHART=docs/benchmarks-step-latency.svg \
	  go test ./test/bench/ -run '^$$' -bench '$(BENCH_ALL)' -benchtime 1x -count $(BENCH_COUNT) -timeout $(BENCH_TIMEOUT)
else
bench: build
	mkdir -p bin/bench
	$(BENCH_ENV) CMA_BENCH_RESULTS=bin/bench/partial.json \
	  go test ./test/bench/ -run '^$$' -bench '^Benchmark($(BENCH_RUN))$$' -benchtime 1x -count $(BENCH_COUNT) -timeout $(BENCH_TIMEOUT)
endif

## bench-scale: the controller mode's capacity model (test/bench/scale_test.go): a fresh
## `configmap-attacher controller` process over every namespace at 1k, 5k and 10k ReplicaSets
## (replicas 0; 2 opted-in objects and 2 unrelated 1 KiB ConfigMaps/Secrets each), measuring
## cold start against -qps, RSS, reaction while 1 % of workloads roll per minute, API requests
## per minute, what etcd and kube-apiserver used, and the largest size split over two installs;
## then 2k ControllerRevisions and 1k Jobs before the largest size (a mix the model predicts
## from costs fitted elsewhere), 2k bare Pods and 2k anchored StatefulSets after it.
## Rewrites the generated part of docs/controller.md and docs/controller-scale.svg (raw JSON in
## docs/controller-scale.json, from which `go test ./test/bench` checks the chart defaults; then
## `make docs` and `CMA_UPDATE=1 go test ./test/chart -run 'TestExamplesFollowChart|TestKustomizeControllerBase'`
## carry them into the chart README and the rendered examples). About
## 25 minutes on 2 CPUs with SCALE_CHURN=1m. SCALE_SIZES=1000,5000 for less.
bench-scale: build ## the controller mode's capacity model → docs/controller.md (SCALE_SIZES=)
	mkdir -p bin/bench
	$(BENCH_ENV) CMA_BENCH_SCALE=1 CMA_BENCH_SCALE_SIZES=$(SCALE_SIZES) CMA_BENCH_SCALE_CHURN=$(SCALE_CHURN) \
	  CMA_BENCH_RESULTS=docs/controller-scale.json CMA_BENCH_SCALE_DOC=docs/controller.md CMA_BENCH_SCALE_CHART=docs/controller-scale.svg \
	  go test ./test/bench/ -run '^$$' -bench '^BenchmarkControllerScale$$' -benchtime 1x -count 1 -timeout 150m -v

## soak: the invariant soak (test/soak): random rollout operations and faults (promote,
## abort, undo, GitOps prunes, pod deletions, apps deleted and recreated or re-applied, config
## shared by two workloads and by a StatefulSet, set image on Deployments sharing config,
## StatefulSet, DaemonSet and CronJob template changes, CronJob runs, Job deletes and TTLs,
## Rollouts-controller and plugin kills, leader SIGKILL, apiserver restarts and throttling)
## against the real control plane, the real Argo Rollouts controller with the step plugin and
## the controller mode (2 replicas), invariants checked every second (among them: no object
## deleted while a live user of any kind references it, none left once nothing uses it). Writes docs/soak.md. SOAK_DURATION (default 10m), SOAK_SEED (default: the time; replay with it),
## SOAK_ROLLOUTS (workloads, default 5). `make test` runs it for 60 s (report in bin/soak/).
soak: binaries ## the invariant soak → docs/soak.md (SOAK_DURATION=, SOAK_SEED= to replay)
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_ROLLOUTS=$(SOAK_ROLLOUTS) SOAK_REPORT=$(SOAK_REPORT) \
	  go test ./test/soak/ -run '^TestSoak$$' -count=1 -v -timeout 90m

## docs: the flag tables of README.md and docs/*.md from the commands' flag sets (hack/docs;
## `go run ./hack/docs -check` verifies them, as hack/docs TestDocsFlagTablesUpToDate does), and
## the chart's README.md from its values.yaml `# --` comments and README.md.gotmpl (helm-docs,
## built once from the module proxy by hack/tool.sh; test/chart TestChartReadmeUpToDate
## verifies it). HELM_DOCS_FLAGS are the flags the test runs helm-docs with, too.
docs: ## the generated flag tables and the chart's README
	$(GO_RUN) ./hack/docs
	"$$(hack/tool.sh helm-docs github.com/norwoodj/helm-docs/cmd/helm-docs@$(HELM_DOCS_VERSION))" $(HELM_DOCS_FLAGS)
