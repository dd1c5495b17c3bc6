package gitops

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// story is the four-revision run every mode's test goes through: commit revision N, let the
// real Argo CD auto-sync it (with prune), let the canary reach its pause, restart a stable pod
// of revision N-1 mid-canary, promote, and check after each sync what Argo CD pruned, what
// is owned, what the garbage collector collected and what Argo CD shows.
type story struct {
	// Rollout and Deployment name the app's workloads ("" none).
	Rollout, Deployment string
	// OwnedFrom is the first revision whose objects the mode under test attaches (1, or 2 for
	// the step alone: steps do not run on a first deploy). 0: nothing is ever attached.
	OwnedFrom int
	// PruneFalse: the revisioned objects carry Prune=false and IgnoreExtraneous, so Argo CD
	// never prunes them (an unattached leftover is PruneSkipped).
	PruneFalse bool
	// Discover: the step has discover: {}, so a run also attaches earlier revisions' objects
	// that are still there (with PruneFalse: revision 1's, which Argo CD kept).
	Discover bool
	// PromoteFull is the revision promoted with `promote --full` (0: none).
	PromoteFull int
	// Revisions is how many revisions to run (default 4).
	Revisions int
}

// figure is one revision's measurement.
type figure struct {
	Rev       int
	Owned     time.Duration // from the apply (the first of the revision's objects appearing) to both owned; -1: not owned
	OwnedRS   time.Duration // from the revision's ReplicaSet appearing to both owned
	Pruned    []string      // what Argo CD pruned in this revision's sync
	Skipped   []string      // prune skipped (Prune=false)
	Kept      []string      // earlier revisions' objects still there after the sync
	Collected []string      // objects the garbage collector deleted at this revision
	Restart   string        // what a restarted stable pod of revision N-1 did
}

func (f figure) String() string {
	owned := "not owned"
	if f.Owned >= 0 {
		owned = f.Owned.Round(time.Millisecond).String() + " owned_after_replicaset=" + f.OwnedRS.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("rev=%d owned_after_apply=%s pruned=%d %v prune_skipped=%d kept=%d %v collected=%v restart=%q", f.Rev, owned,
		len(f.Pruned), f.Pruned, len(f.Skipped), len(f.Kept), f.Kept, f.Collected, f.Restart)
}

// run runs the story and returns one figure per revision. Every expectation is derived from
// the story's settings, not from what happened.
func (w *world) run(s story) []figure {
	w.t.Helper()
	if s.Revisions == 0 {
		s.Revisions = 4
	}
	var wls []string
	for _, wl := range []string{s.Rollout, s.Deployment} {
		if wl != "" {
			wls = append(wls, wl)
		}
	}
	owned := func(n int) bool { return s.OwnedFrom > 0 && n >= s.OwnedFrom }
	// attached: owned at some point before its ReplicaSet leaves the history.
	attached := func(n int) bool { return owned(n) || (s.Discover && s.PruneFalse) }
	var figs []figure
	for n := 1; n <= s.Revisions; n++ {
		var stable *appsv1.ReplicaSet
		if s.Rollout != "" {
			stable = w.revisionRS(s.Rollout, n-1)
		}
		r := w.commit(n)
		f := figure{Rev: n, Pruned: r.pruned, Skipped: r.skipped, Owned: -1}
		// What Argo CD must have pruned: revision N-1's objects when they were not attached
		// and not Prune=false; nothing else (owned objects are not even prune candidates).
		var wantPruned, wantSkipped []string
		if n > 1 && !owned(n-1) {
			for _, wl := range wls {
				if s.PruneFalse {
					wantSkipped = append(wantSkipped, revisionKeys(wl, n-1)...)
				} else {
					wantPruned = append(wantPruned, revisionKeys(wl, n-1)...)
				}
			}
		}
		sort.Strings(wantPruned)
		sort.Strings(wantSkipped)
		if strings.Join(r.pruned, ",") != strings.Join(wantPruned, ",") {
			w.t.Errorf("revision %d: Argo CD pruned %v, want %v", n, r.pruned, wantPruned)
		}
		if strings.Join(r.skipped, ",") != strings.Join(wantSkipped, ",") {
			w.t.Errorf("revision %d: Argo CD skipped the prune of %v, want %v", n, r.skipped, wantSkipped)
		}
		if s.Rollout != "" {
			if n == 1 {
				w.waitRolloutHealthy(s.Rollout, 1) // steps are skipped on the first deploy
			} else {
				w.waitRolloutPaused(s.Rollout, n)
			}
		}
		if s.Deployment != "" {
			w.waitDeploymentAt(s.Deployment, n)
		}
		for _, wl := range wls {
			if owned(n) {
				d, drs := w.waitOwned(wl, n, time.Minute)
				if d > f.Owned {
					f.Owned = d
				}
				if drs > f.OwnedRS {
					f.OwnedRS = drs
				}
			}
		}
		if !owned(n) {
			// Give a wrongly running attacher a moment to show itself.
			time.Sleep(time.Second)
			for _, wl := range wls {
				for _, k := range revisionKeys(wl, n) {
					if rec, _ := w.obs.get(k); len(rec.Owners) > 0 {
						w.t.Errorf("revision %d: %s got owners %v, but nothing should attach it", n, k, rec.Owners)
					}
				}
			}
		}
		// Mid-canary, a stable pod of revision N-1 restarts: it starts exactly when revision
		// N-1's config survived the sync.
		if s.Rollout != "" && n > 1 && stable != nil {
			pod, msg := w.restartPodOf(stable)
			wantFail := !owned(n-1) && !s.PruneFalse
			switch {
			case wantFail && msg == "":
				w.t.Errorf("revision %d: restarted stable pod %s of revision %d started, but its config was pruned", n, pod.Name, n-1)
			case !wantFail && msg != "":
				w.t.Errorf("revision %d: restarted stable pod %s of revision %d cannot start: %s", n, pod.Name, n-1, msg)
			}
			if msg != "" {
				f.Restart = "CreateContainerConfigError: " + msg
			} else {
				f.Restart = "started"
			}
		}
		if s.Rollout != "" && n > 1 {
			w.promote(s.Rollout, n, n == s.PromoteFull)
		}
		// Revision N-2's ReplicaSets leave the history now (revisionHistoryLimit 1): the garbage
		// collector deletes the objects they owned. Everything a ReplicaSet in history uses exists.
		for _, wl := range wls {
			for k := 1; k < n; k++ {
				cm, sec := w.exists(wl, k)
				inHistory := w.revisionRS(wl, k) != nil
				if inHistory && (!cm || !sec) && (attached(k) || s.PruneFalse) {
					w.t.Errorf("revision %d: revision %d of %s is in the history but its config is gone: %v", n, k, wl, w.state(wl, k))
				}
				if cm || sec {
					f.Kept = append(f.Kept, revisionKeys(wl, k)...)
				}
			}
			if n > 2 && attached(n-2) {
				w.waitGone(wl, n-2, time.Minute)
				f.Collected = append(f.Collected, revisionKeys(wl, n-2)...)
				// Kept was read before the collection finished: recount.
				f.Kept = removeAll(f.Kept, revisionKeys(wl, n-2)...)
			}
		}
		// Argo CD's view: after the owner references, the app is Synced and Healthy.
		st := w.refreshAndWait(fmt.Sprintf("app Synced and Healthy at revision %d", n), func(st *cluster.AppStatus) bool {
			return st.Sync.Status == "Synced" && st.Health.Status == "Healthy" && st.Sync.Revision == r.sha
		})
		for _, wl := range wls {
			for k := 1; k < n; k++ {
				for _, key := range revisionKeys(wl, k) {
					kind, name, _ := strings.Cut(key, "/")
					if res := st.Resource(kind, name); res != nil && attached(k) {
						w.t.Errorf("revision %d: Argo CD still lists owned %s of revision %d: %s", n, key, k, res)
					}
				}
			}
		}
		w.t.Logf("FIGURE %s %s", w.t.Name(), f)
		figs = append(figs, f)
	}
	return figs
}

func removeAll(list []string, drop ...string) []string {
	var out []string
	for _, x := range list {
		if !containsAny(drop, x) {
			out = append(out, x)
		}
	}
	return out
}
