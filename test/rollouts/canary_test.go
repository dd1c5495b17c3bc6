package rollouts

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// 1. A canary Rollout with the plugin step first, through three revisions: after each step
// run the revision's ReplicaSet owns its ConfigMap and Secret, the step is Successful in
// status.canary.stepPluginStatuses, the plugin's log line reaches the controller's log, and the
// plugin records a ConfigAttached Event on the Rollout.
func TestCanaryStepAttachesEachRevision(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	canaryRevisions(t, e, 3)
}

// canaryRevisions runs scenario 1 on e through revisions 1..n.
func canaryRevisions(t *testing.T, e *env, n int) {
	a := newApp(t, e, e.namespace(t), "web", stepsPluginFirst)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	if s := a.get().Status.Canary.StepPluginStatuses; len(s) != 0 {
		t.Errorf("steps ran on the initial deploy: %+v", s)
	}
	for rev := 2; rev <= n; rev++ {
		a.createConfig(rev)
		a.deploy(rev)
		st, status := a.waitStep(0, rev)
		rs := a.rsFor(rev)
		a.waitOwned(rev, rs)
		if want := fmt.Sprintf("attached 1 ConfigMap and 1 Secret to ReplicaSet %s", rs.Name); st.Message != want {
			t.Errorf("revision %d: step message %q, want %q", rev, st.Message, want)
		}
		if strings.Join(status.ConfigMaps, ",") != a.cm(rev) || strings.Join(status.Secrets, ",") != a.secret(rev) {
			t.Errorf("revision %d: step status %+v", rev, status)
		}
		line := waitLog(t, e.ctl, "plugin.configmap-attacher", "namespace="+a.ns, st.Message)
		if ev := a.waitEvent("ConfigAttached", st.Message); ev.Type != corev1.EventTypeNormal {
			t.Errorf("event type %s, want Normal", ev.Type)
		}
		t.Logf("revision %d: %s; controller log: %s", rev, st.Message, line)
		a.waitPaused(2)
		if r := a.rsFor(rev); r.Status.AvailableReplicas != 1 {
			t.Errorf("revision %d at setWeight 50: canary ReplicaSet has %d available, want 1", rev, r.Status.AvailableReplicas)
		}
		a.promote()
		a.waitHealthy(rev)
	}
	// Every revision's objects stay owned by its ReplicaSet (still in history); revision 1's
	// have no owner: no step runs on the initial deploy.
	for rev := 2; rev <= n; rev++ {
		a.waitOwned(rev, a.rsFor(rev))
	}
	lost, unowned := a.audit()
	if len(lost) > 0 {
		t.Errorf("objects lost: %v", lost)
	}
	want := []string{"ConfigMap/web-config-1", "Secret/web-secret-1"}
	if len(unowned) != 2 || !strings.HasPrefix(unowned[0], want[0]) || !strings.HasPrefix(unowned[1], want[1]) {
		t.Errorf("unowned objects %v, want only revision 1's %v", unowned, want)
	}
}
