// Package audit proves `configmap-attacher audit` against a real control plane: the findings
// (lost, unowned, stray, legacy, shared), -fix under the core's rules, the requests it sends.
package audit

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
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "audit", RolloutCRD: true, Shared: &shared, Err: &sharedErr}))
}

// sharedCluster returns the package's cluster, or skips (fails with CI=true) without one.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}
