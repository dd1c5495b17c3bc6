// Package core proves the ownership core against a real control plane: etcd,
// kube-apiserver and kube-controller-manager (with the garbage collector) on 127.0.0.1, started
// by test/support/cluster from binaries built from Go modules: owner references and garbage
// collection, the rules, discovery, every user counts, bad input writing nothing.
package core

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

var (
	shared    *cluster.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	realapi.Use(&shared)
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "core", RolloutCRD: true, Shared: &shared, Err: &sharedErr}))
}

// sharedCluster returns the package's cluster, or skips (fails with CI=true) without one.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}
