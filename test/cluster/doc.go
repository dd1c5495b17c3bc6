// Package cluster starts a real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager (garbage collector, replicaset, deployment, serviceaccount,
// serviceaccount-token and namespace controllers), all listening on 127.0.0.1 only, each run
// as a child process in its own state directory with its log captured there.
//
// The binaries come from hack/build-binaries.sh (cached under $CMA_CACHE, default
// $HOME/.cache/configmap-attacher, see BinDir). When they are missing and cannot be built the
// tests are skipped, unless CI=true or CMA_REQUIRE_CLUSTER=1, which turn that into a failure.
//
// Per test (stopped by t.Cleanup, also when the test fails):
//
//	c := cluster.Start(t, cluster.Options{})
//	ns := c.Namespace(t)
//	cs := c.Client(t)
//
// One cluster per package, from TestMain:
//
//	var shared *cluster.Cluster
//	var sharedErr error
//
//	func TestMain(m *testing.M) {
//		shared, sharedErr = cluster.StartShared(cluster.Options{})
//		code := m.Run()
//		shared.Stop() // nil-safe
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		c := cluster.Require(t, shared, sharedErr) // skips or fails when there is no cluster
//		...
//	}
//
// Child processes get SIGKILL when the test binary dies (Pdeathsig), so a test timeout or a
// panic does not leave a control plane behind. Only the PIDs this package started are ever
// signalled; they are also written to <Dir>/pids.
//
// Environment:
//
//	CMA_CACHE             binary cache root (default $HOME/.cache/configmap-attacher)
//	CMA_KUBE_BIN_DIR      use this directory of binaries instead of the cache; never build
//	CMA_NO_BUILD=1        do not run hack/build-binaries.sh when binaries are missing
//	CI=true, CMA_REQUIRE_CLUSTER=1   missing binaries fail instead of skip
//	CMA_KEEP_CLUSTER_DIR=1           keep state directories (logs) after a passing test too
package cluster
