// Package doctor tests `configmap-attacher doctor` (the built binary) against the real control
// plane (test/support/cluster): an installation as the examples describe it (the Argo Rollouts
// controller's Deployment with examples/helm-values.yaml's initContainer, volume and mount,
// examples/argo-rollouts-config.yaml, the upstream controller ClusterRole plus
// examples/rbac-step-plugin.yaml, the controller mode with examples/controller.yaml's RBAC as a
// real `configmap-attacher controller` process) passes with exit 0; each problem, planted once
// on the live objects, is reported with its fix and exit 1. The chart's `helm test` hook is
// rendered with the real helm, dry-run on the server, and its exact arguments run as the hook's
// own ServiceAccount (impersonated), which proves its RBAC suffices.
package doctor

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

var (
	shared    *cluster.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "doctor", Shared: &shared, Err: &sharedErr, RolloutCRD: true}))
}
