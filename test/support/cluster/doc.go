// Package cluster starts a real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager (garbage collector, replicaset, deployment, serviceaccount,
// serviceaccount-token and namespace controllers), all listening on 127.0.0.1 only, each run
// as a child process in its own state directory with its log captured there.
//
// The binaries come from hack/build-binaries.sh (cached under $CMA_CACHE, default
// $HOME/.cache/configmap-attacher, see BinDir). When they are missing and cannot be built the
// tests are skipped, unless CI=true or CMA_REQUIRE_CLUSTER=1, which turn that into a failure.
// A cluster runs KubeVersion unless Options.KubeVersion names OldKubeVersion, the oldest
// version the project supports, whose kube-apiserver and kube-controller-manager live in their
// own cache directory (its etcd and kubectl are links to KubeVersion's); the flags the harness
// passes follow the version (apiserver_flags.go).
//
// Per test (stopped by t.Cleanup, also when the test fails):
//
//	c := cluster.Start(t, cluster.Options{})
//	ns := c.Namespace(t)
//	cs := c.Client(t)
//
// One cluster per package, from TestMain (Main, main.go; MainOptions.Setup starts what else
// the package shares on it):
//
//	var shared *cluster.Cluster
//	var sharedErr error
//
//	func TestMain(m *testing.M) {
//		os.Exit(cluster.Main(m, cluster.MainOptions{Name: "mypkg", Shared: &shared, Err: &sharedErr}))
//	}
//
//	func TestX(t *testing.T) {
//		c := cluster.Require(t, shared, sharedErr) // skips or fails when there is no cluster
//		...
//	}
//
// Beyond the control plane, the package holds what more than one test package (and hack/demo)
// needs, so that no package imports another test package and each helper exists once:
//
//   - PluginBinary and BuildPluginCached (build.go): the configmap-attacher binary, built as
//     `make build` builds it once per source tree into bin/test-binaries/<hash> and shared by
//     every test package and run ($CMA_PLUGIN_BINARY names a prebuilt one instead).
//   - RolloutsController (rollouts_controller.go): the real Argo Rollouts controller with the
//     plugin registered in argo-rollouts-config and its RBAC as users install it; RolloutsDir,
//     InstallCRDs, RepoRoot (rollouts.go, bin.go); StartStepPlugin and RolloutsHandshake
//     (stepplugin.go): the binary started as that controller starts a step plugin.
//   - FakeKubelet (kubelet.go): makes pods Running and Ready, or CreateContainerConfigError
//     when a ConfigMap or Secret they use is missing, and runs a local binary for the pods of
//     a registered image (RunImage: a Job of our image completes for real); ConfigRef and
//     PodConfigRefs.
//   - ArgoCD and GitRepo (argocd.go): the real Argo CD application controller and repo server
//     (StartArgoCD, ArgoCDDir) syncing a file:// Git repository; test/gitops and hack/demo
//     -argocd.
//   - ControllerProcess and ControllerModeIdentity (controller_mode.go): `configmap-attacher
//     controller` as a child process with examples/controller.yaml's identity.
//   - ParseMetrics, ScrapeMetrics, Metric, SumMetric (metrics.go): /metrics as the tests read it.
//   - Workload helpers (workload.go): the label names, PruneLikeArgoCD, UpdateRollout,
//     ControlledReplicaSets, RolloutState, PromotePatch, LivePods; and test helpers
//     (testing.go): WaitUntil, LogLinesOnFailure, SyncBuffer.
//
// It is a library, not a test package: its non-test files are imported by every test package
// and by hack/demo, so each exported name says what it stands in for and why it is shared.
//
// Child processes get SIGKILL when the test binary dies (Pdeathsig), so a test timeout or a
// panic does not leave a control plane behind. Only the PIDs this package started are ever
// signalled; they are also written to <Dir>/pids.
//
// Environment:
//
//	CMA_CACHE             binary cache root (default $HOME/.cache/configmap-attacher)
//	CMA_PLUGIN_BINARY     the configmap-attacher binary to test instead of building one
//	CMA_KUBE_BIN_DIR      use this directory of binaries instead of the cache; never build
//	CMA_NO_BUILD=1        do not run hack/build-binaries.sh when binaries are missing
//	CI=true, CMA_REQUIRE_CLUSTER=1   missing binaries fail instead of skip
//	CMA_KEEP_CLUSTER_DIR=1           keep state directories (logs) after a passing test too
package cluster
