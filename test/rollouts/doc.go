// Package rollouts (test/rollouts) runs the plugin inside a real Argo Rollouts controller: etcd, kube-apiserver and
// kube-controller-manager from test/support/cluster, the rollouts-controller built by
// hack/build-binaries.sh (patched to listen on 127.0.0.1 only), the plugin binary built from
// this module and registered in argo-rollouts-config (test/support/cluster's RolloutsController), and a
// stand-in for the kubelet (test/support/cluster's FakeKubelet) that makes pods Running and Ready, or
// fails them with CreateContainerConfigError when a ConfigMap or Secret they use is missing,
// as a real kubelet would. The package holds tests only; what other packages share with it
// lives in test/support/cluster.
//
// Each test works in its own namespace of one shared cluster and controller (the controller
// watches all namespaces); the test against the older controller starts its own cluster,
// because the CRDs differ between versions.
//
// Missing binaries skip the tests, or fail them with CI=true or CMA_REQUIRE_CLUSTER=1 (see
// test/support/cluster). CMA_KEEP_CLUSTER_DIR=1 keeps the state and log directories.
package rollouts
