// Package cli proves the command line (the Job mode) against a real control plane: it waits
// for the ReplicaSet of the current pod template (a stale currentPodHash, -expect-template-
// annotation, workloadRef) and decides at once when it is there.
package cli

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
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "cli", RolloutCRD: true, Shared: &shared, Err: &sharedErr}))
}

// sharedCluster returns the package's cluster, or skips (fails with CI=true) without one.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}
