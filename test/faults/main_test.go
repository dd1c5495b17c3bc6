// Package faults proves the step under faults of the real control plane: the apiserver
// stopped mid-step, throttling, conflicts with the garbage collector (docs/reliability.md).
package faults

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
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "faults", RolloutCRD: true, Shared: &shared, Err: &sharedErr}))
}

// sharedCluster returns the package's cluster, or skips (fails with CI=true) without one.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}
