package rollouts

import (
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// 6. Scenario 1 (two revisions) against the older controller, v1.9.1, with its own CRDs and
// ClusterRole, on a cluster of its own (the CRDs differ between versions).
func TestOlderController(t *testing.T) {
	t.Parallel()
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	e := ownEnv(t, cluster.RolloutsOldVersion)
	canaryRevisions(t, e, 2)
	if !containsLine(e.ctl.Log(), "version=v"+cluster.RolloutsOldVersion[1:]) {
		t.Errorf("the controller log does not show version %s", cluster.RolloutsOldVersion)
	}
}
