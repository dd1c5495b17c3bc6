package rollouts

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// pathResult records what one rollout path leaves behind.
type pathResult struct {
	Path string
	// Unowned are the objects the path left without the owner reference of the ReplicaSet
	// using them, before any remedy (never collected: they pile up; pruned by Argo CD once they
	// leave Git, they are lost for a rollback).
	Unowned []string
	// Lost are objects of ReplicaSets still in history that are gone (must stay empty).
	Lost []string
	Note string
}

func (r pathResult) String() string {
	un := "none"
	if len(r.Unowned) > 0 {
		un = strings.Join(r.Unowned, ", ")
	}
	return fmt.Sprintf("%-22s unowned: %s; lost: %d; %s", r.Path, un, len(r.Lost), r.Note)
}

// 4. Abort then retry; promote --full before the step is reached; undo to an older revision.
// Afterwards no object of a ReplicaSet still in history is lost. The summary says which paths
// leave objects without an owner.
func TestRolloutPaths(t *testing.T) {
	t.Parallel()
	for _, r := range rolloutPaths(t, sharedEnv(t)) {
		t.Log(r)
		if len(r.Lost) > 0 {
			t.Errorf("%s: objects of ReplicaSets in history lost: %v", r.Path, r.Lost)
		}
	}
}

// rolloutPaths runs each path in its own namespace, concurrently, and returns the summary.
func rolloutPaths(t *testing.T, e *env) []pathResult {
	paths := []struct {
		name string
		run  func(*testing.T, *env) pathResult
	}{
		{"abort-retry", pathAbortRetry},
		{"promote-full", pathPromoteFull},
		{"undo", pathUndo},
		{"promote-full-discover", pathPromoteFullDiscover},
	}
	var mu sync.Mutex
	results := make([]pathResult, len(paths))
	t.Run("paths", func(t *testing.T) {
		for i, p := range paths {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				r := p.run(t, e)
				mu.Lock()
				results[i] = r
				mu.Unlock()
			})
		}
	})
	return results
}

// pathAbortRetry: revision 2's step runs, the rollout is aborted during the pause (the canary
// ReplicaSet is scaled down, the plugin gets Abort and changes nothing), then retried: the
// step runs again against the same ReplicaSet and the rollout completes.
func pathAbortRetry(t *testing.T, e *env) pathResult {
	a := newApp(t, e, e.namespace(t), "web", stepsPluginFirst)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.attachWithJob(1)
	a.createConfig(2)
	a.deploy(2)
	a.waitStep(0, 2)
	rs2 := a.rsFor(2)
	a.waitOwned(2, rs2)
	a.waitPaused(2)

	a.abort()
	var abortStatus *v1alpha1.StepPluginStatus
	eventually(t, 60*time.Second, "the rollout aborted, the canary scaled to 0 and the plugin's Abort Successful", func() (bool, string) {
		ro := a.get()
		rs := a.rsFor(2)
		abortStatus = nil
		for i, s := range ro.Status.Canary.StepPluginStatuses {
			if s.Index == 0 && s.Operation == v1alpha1.StepPluginOperationAbort {
				abortStatus = &ro.Status.Canary.StepPluginStatuses[i]
			}
		}
		ok := ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded && rs.Spec.Replicas != nil && *rs.Spec.Replicas == 0 &&
			abortStatus != nil && abortStatus.Phase == v1alpha1.StepPluginPhaseSuccessful
		return ok, cluster.RolloutState(ro)
	})
	t.Logf("aborted; plugin Abort: %s: %q", abortStatus.Phase, abortStatus.Message)
	a.waitOwned(2, rs2) // Abort keeps the reference: the ReplicaSet still uses the objects

	a.retry()
	a.waitStep(0, 2)
	a.waitPaused(2)
	if rs := a.rsFor(2); rs.UID != rs2.UID {
		t.Fatalf("retry created a new ReplicaSet %s (uid %s), want %s", rs.Name, rs.UID, rs2.UID)
	}
	a.promote()
	a.waitHealthy(2)
	a.waitOwned(2, rs2)
	lost, unowned := a.audit()
	return pathResult{Path: "abort, retry", Unowned: unowned, Lost: lost,
		Note: "Abort keeps the owner reference; the retried step re-attaches (a no-op) to the same ReplicaSet"}
}

// pathPromoteFull: the plugin step comes after a pause; `promote --full` during that pause
// skips it, so revision 2's objects get no owner. The command-line Job attaches them.
func pathPromoteFull(t *testing.T, e *env) pathResult {
	a := newApp(t, e, e.namespace(t), "web", stepsPauseFirst)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.attachWithJob(1)
	a.createConfig(2)
	a.deploy(2)
	a.waitPaused(0)
	a.promoteFull()
	rs2 := a.waitHealthy(2)
	if s := stepRun(a.get(), 1); s != nil {
		t.Errorf("the plugin step ran although promote --full skipped it: %+v", s)
	}
	lost, unowned := a.audit()
	for _, r := range a.objects(2) {
		refs, gone, err := a.owners(r)
		if err != nil || gone || ownedBy(refs, rs2) {
			t.Errorf("%s after promote --full: owners %v gone %v err %v; expected it unowned (the step never ran)", r, refs, gone, err)
		}
	}
	// The documented remedy: the command-line Job attaches the current revision.
	out := a.attachWithJob(2)
	t.Logf("promote --full left %v unowned; the Job fixed it: %s", unowned, out)

	// The step after a pause still runs on the next revision.
	a.createConfig(3)
	a.deploy(3)
	a.waitPaused(0)
	a.promote()
	a.waitStep(1, 3)
	a.waitOwned(3, a.rsFor(3))
	a.waitPaused(3)
	a.promote()
	a.waitHealthy(3)
	lost2, unowned2 := a.audit()
	return pathResult{Path: "promote --full", Unowned: unowned, Lost: append(lost, lost2...),
		Note: fmt.Sprintf("the skipped step never attaches; the command-line Job does (unowned afterwards: %d)", len(unowned2))}
}

// pathUndo: revisions 1..3 (timed pause: no manual promotion), then `undo --to-revision=2`:
// only the pod template is restored, the revision-3 step list runs against ReplicaSet 2; the
// step must end Successful, saying it skipped revision 3's objects, and the rollback completes
// by itself.
func pathUndo(t *testing.T, e *env) pathResult {
	a := newApp(t, e, e.namespace(t), "web", stepsPluginAuto)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.attachWithJob(1)
	for rev := 2; rev <= 3; rev++ {
		a.createConfig(rev)
		a.deploy(rev)
		a.waitStep(0, rev)
		a.waitOwned(rev, a.rsFor(rev))
		a.waitHealthy(rev)
	}
	rs2, rs3 := a.rsFor(2), a.rsFor(3)
	a.undo(2)
	st, status := a.waitStep(0, 2)
	if !strings.Contains(st.Message, "skipped") || len(status.Skipped) != 2 {
		t.Errorf("undo: step message %q, status %+v: want both revision-3 objects skipped", st.Message, status)
	}
	for _, sk := range status.Skipped {
		if len(sk.UsedBy) != 1 || sk.UsedBy[0] != rs3.Name {
			t.Errorf("undo: skipped %s %s used by %v, want [%s]", sk.Kind, sk.Name, sk.UsedBy, rs3.Name)
		}
	}
	raw, _ := json.Marshal(status)
	t.Logf("undo to revision 2: step %s: %q status %s", st.Phase, st.Message, raw)
	back := a.waitHealthy(2) // no promote: the timed pause ends by itself
	if back.UID != rs2.UID {
		t.Fatalf("undo created ReplicaSet %s (uid %s), want the old %s (uid %s)", back.Name, back.UID, rs2.Name, rs2.UID)
	}
	if got := back.Annotations["rollout.argoproj.io/revision"]; got != "4" {
		t.Errorf("ReplicaSet %s revision annotation %q, want 4", back.Name, got)
	}
	a.waitOwned(2, rs2)
	a.waitOwned(3, rs3)
	lost, unowned := a.audit()
	return pathResult{Path: "undo --to-revision=2", Unowned: unowned, Lost: lost,
		Note: "the newer step list ran against the older ReplicaSet: Successful, skipped the newer objects"}
}

// pathPromoteFullDiscover: as pathPromoteFull, but with no Job: the initial deploy and the
// promote --full leave revisions 1 and 2 unowned; the next revision's step, with
// discover: {}, adds the missing owner references across the history.
func pathPromoteFullDiscover(t *testing.T, e *env) pathResult {
	a := newApp(t, e, e.namespace(t), "web", stepsPauseFirst)
	a.discover = true
	a.createConfig(1)
	a.deploy(1)
	rs1 := a.waitHealthy(1)
	a.createConfig(2)
	a.deploy(2)
	a.waitPaused(0)
	a.promoteFull()
	rs2 := a.waitHealthy(2)
	lost, unowned := a.audit()
	if len(unowned) != 4 {
		t.Errorf("after the initial deploy and promote --full: unowned %v, want revisions 1 and 2's four objects", unowned)
	}
	a.createConfig(3)
	a.deploy(3)
	a.waitPaused(0)
	a.promote()
	st, status := a.waitStep(1, 3)
	rs3 := a.rsFor(3)
	discovered := map[string]string{}
	for _, d := range status.Discovered {
		discovered[d.Kind+"/"+d.Name] = strings.Join(d.ReplicaSets, ",")
	}
	for rev, rs := range map[int]string{1: rs1.Name, 2: rs2.Name} {
		for _, r := range a.objects(rev) {
			if discovered[r.String()] != rs {
				t.Errorf("discover: %s lacks ReplicaSet %s in the step status %+v", r, rs, status.Discovered)
			}
		}
	}
	if len(discovered) != 4 {
		// PlanDiscover runs before the listed objects are attached (plugin/step/step.go), so it also
		// reports, and patches a second time, the current revision's listed objects.
		t.Logf("FINDING: discover reports %d additions, 4 expected (revisions 1 and 2): it also counts the listed objects the same step attaches: %q", len(discovered), st.Message)
	}
	t.Logf("revision 3's step with discover: %q", st.Message)
	a.waitOwned(3, rs3)
	a.waitOwned(2, rs2)
	a.waitOwned(1, rs1)
	a.waitPaused(3)
	a.promote()
	a.waitHealthy(3)
	lost2, unowned2 := a.audit()
	if len(unowned2) > 0 {
		t.Errorf("still unowned after discover: %v", unowned2)
	}
	return pathResult{Path: "promote --full, no Job", Unowned: unowned, Lost: append(lost, lost2...),
		Note: fmt.Sprintf("initial deploy and skipped step leave them; the next step with discover: {} attaches them (unowned afterwards: %d)", len(unowned2))}
}
