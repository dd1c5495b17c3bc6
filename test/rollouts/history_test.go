package rollouts

import (
	"fmt"
	"testing"
	"time"
)

// 3. revisionHistoryLimit: 1. Through four revisions the controller deletes the oldest
// ReplicaSets; the garbage collector then deletes their ConfigMaps and Secrets, and never an
// object of a ReplicaSet still in history.
func TestRevisionHistoryLimitCollects(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "web", stepsPluginAuto)
	limit := int32(1)
	a.historyLimit = &limit
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.attachWithJob(1)
	const last = 4
	for rev := 2; rev <= last; rev++ {
		a.createConfig(rev)
		a.deploy(rev)
		a.waitStep(0, rev)
		a.waitOwned(rev, a.rsFor(rev))
		a.waitHealthy(rev)
		// The controller keeps the stable ReplicaSet and `limit` older ones.
		eventually(t, 30*time.Second, fmt.Sprintf("at most %d ReplicaSets", limit+1), func() (bool, string) {
			n := len(a.replicaSets())
			return n <= int(limit)+1, fmt.Sprintf("%d ReplicaSets", n)
		})
		for r := 1; r <= rev; r++ {
			if rs := a.rsFor(r); rs != nil {
				a.waitOwned(r, rs) // still in history: kept
			} else {
				a.waitGone(r) // pruned from history: collected
			}
		}
		if lost, _ := a.audit(); len(lost) > 0 {
			t.Fatalf("revision %d: objects of ReplicaSets still in history are gone: %v", rev, lost)
		}
	}
	for r := 1; r <= last; r++ {
		kept := a.rsFor(r) != nil
		if want := r >= last-int(limit); kept != want {
			t.Errorf("revision %d: ReplicaSet kept %v, want %v", r, kept, want)
		}
	}
	t.Logf("revisionHistoryLimit %d: ReplicaSets and objects of revisions 1..%d collected, %d..%d kept", limit, last-int(limit)-1, last-int(limit), last)
}
