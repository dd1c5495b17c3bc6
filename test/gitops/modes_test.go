package gitops

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// pruneFalse are the annotations docs/gitops.md recommends on revisioned objects.
var pruneFalse = map[string]string{
	"argocd.argoproj.io/sync-options":    "Prune=false",
	"argocd.argoproj.io/compare-options": "IgnoreExtraneous",
}

// TestStepPlugin runs the step plugin alone (no controller mode, no Job) through four
// revisions synced by Argo CD. From revision 2 on the step attaches each revision before its
// canary starts, so Argo CD never prunes a revision a ReplicaSet in history uses, and the
// garbage collector deletes each revision's config with its ReplicaSet.
//
// Revision 1 is the exposure: no step runs on a first deploy, and within a sync wave Argo CD
// prunes before it applies, so revision 1's objects are pruned by the sync of revision 2
// before revision 2's step (discover: {} included) can adopt them. With Prune=false and
// IgnoreExtraneous on the revisioned objects Argo CD keeps them (PruneSkipped, app Synced),
// revision 2's discover: {} attaches them to revision 1's ReplicaSet, and they go with it.
func TestStepPlugin(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	for _, tc := range []struct {
		name  string
		s     story
		annot map[string]string
	}{
		// What the README claimed covers revision 1: the next step with discover: {}.
		{"discover", story{Rollout: "web", OwnedFrom: 2, Discover: true}, nil},
		// The setting that works for step-only users.
		{"discover-prune-false", story{Rollout: "web", OwnedFrom: 2, Discover: true, PruneFalse: true}, pruneFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web", Step: "discover"}}, ConfigAnnotations: tc.annot})
			w.run(tc.s)
		})
	}
}

// TestControllerMode runs `configmap-attacher controller` (examples/controller.yaml's
// identity, watching only the test's namespace) without a step or a Job: a canary Rollout and
// a Deployment are attached from revision 1 on, revision 3 is promoted with --full, and Argo
// CD never prunes a revision a ReplicaSet in history uses.
func TestControllerMode(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web"}, {Kind: "Deployment", Name: "api"}}})
	startControllerMode(t, e, w.ns)
	w.run(story{Rollout: "web", Deployment: "api", OwnedFrom: 1, PromoteFull: 3})
}

// startControllerMode starts the controller mode for namespace ns (stopped in t.Cleanup).
func startControllerMode(t *testing.T, e *env, ns string) *cluster.ControllerProcess {
	t.Helper()
	cp, err := cluster.StartController(e.plugin, ns, filepath.Join(e.c.Dir, "controller-"+ns+".log"), time.Minute,
		[]string{"KUBECONFIG=/nonexistent"}, "-kubeconfig", e.controllerKubeconfig, "-leader-elect=false", "-namespaces", ns)
	t.Cleanup(cp.Stop)
	if err != nil {
		t.Fatal(err)
	}
	cluster.LogLinesOnFailure(t, "controller mode", cp.LogPath, cp.Log, "", 40)
	return cp
}

// TestSyncHookJob is the original tool's setup: examples/job.yaml as an Argo CD Sync hook
// (hook: Sync, BeforeHookCreation, -expect-template-annotation), no step and no controller.
// The fake kubelet runs the built binary for the Job's pod with the pod's args and a token of
// the Job's ServiceAccount and reports its exit, so the Job completes for real and Argo CD's
// sync waits for it. Every revision, revision 1 included, ends up owned by the ReplicaSet of
// the synced spec.
func TestSyncHookJob(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web"}}, Job: true})
	times := watchHookOrder(t, e, w.ns, "web")
	figs := w.run(story{Rollout: "web", OwnedFrom: 1})
	// When Argo CD starts the hook relative to the apply of the Rollout spec it waits for.
	for n := 1; n <= len(figs); n++ {
		job, ro := times.get(n)
		if job.IsZero() || ro.IsZero() {
			t.Errorf("revision %d: hook Job created at %v, Rollout spec applied at %v: want both seen", n, job, ro)
			continue
		}
		t.Logf("FIGURE hook revision=%d job_created_minus_rollout_applied=%v", n, job.Sub(ro).Round(time.Millisecond))
	}
	runs := e.kubelet.Runs(w.ns)
	if len(runs) < len(figs) {
		t.Fatalf("the fake kubelet ran %d hook pods, want at least one per revision (%d)", len(runs), len(figs))
	}
	for i, r := range runs {
		if r.ExitCode != 0 || r.Finished.IsZero() {
			t.Errorf("hook run %d (pod %s, args %v): exit %d, finished %v; log %s:\n%s", i, r.Pod, r.Args, r.ExitCode, r.Finished, r.LogPath, readFile(r.LogPath))
		}
		t.Logf("hook pod %s: args %v, ran %v, exit %d", r.Pod, r.Args, r.Finished.Sub(r.Started).Round(time.Millisecond), r.ExitCode)
	}
}

// hookOrder records, per revision (example.com/release), when the hook Job for it was first
// seen and when the Rollout's spec with that pod template annotation was first seen.
type hookOrder struct {
	mu      sync.Mutex
	job, ro map[int]time.Time
}

func (h *hookOrder) get(n int) (job, ro time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.job[n], h.ro[n]
}

func watchHookOrder(t *testing.T, e *env, ns, rollout string) *hookOrder {
	h := &hookOrder{job: map[int]time.Time{}, ro: map[int]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rc, err := rolloutsclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mark := func(m map[int]time.Time, v string) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return
		}
		h.mu.Lock()
		if _, ok := m[n]; !ok {
			m[n] = time.Now()
		}
		h.mu.Unlock()
	}
	var ready sync.WaitGroup
	ready.Add(2)
	go func() {
		var once sync.Once
		for ctx.Err() == nil {
			wi, err := e.kube.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			once.Do(ready.Done)
			for ev := range wi.ResultChan() {
				if j, ok := ev.Object.(*batchv1.Job); ok && ev.Type == watch.Added && len(j.Spec.Template.Spec.Containers) > 0 {
					args := j.Spec.Template.Spec.Containers[0].Args
					for i, a := range args {
						if a == "-expect-template-annotation" && i+1 < len(args) {
							mark(h.job, strings.TrimPrefix(args[i+1], "example.com/release="))
						}
					}
				}
			}
		}
	}()
	go func() {
		var once sync.Once
		for ctx.Err() == nil {
			wi, err := rc.ArgoprojV1alpha1().Rollouts(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			once.Do(ready.Done)
			for ev := range wi.ResultChan() {
				if ro, ok := ev.Object.(*v1alpha1.Rollout); ok && ro.Name == rollout {
					mark(h.ro, ro.Spec.Template.Annotations["example.com/release"])
				}
			}
		}
	}()
	ready.Wait()
	return h
}

// TestControllerModeBlueGreen is TestControllerMode for a blueGreen Rollout (no steps at all,
// autoPromotionEnabled false, a preview of each revision paused until promoted): the controller mode attaches every revision, revision 1
// included, and Argo CD prunes none of them.
func TestControllerModeBlueGreen(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "bg", BlueGreen: true}}})
	startControllerMode(t, e, w.ns)
	w.run(story{Rollout: "bg", OwnedFrom: 1})
}

// TestStepPluginPruneLast is the other setting for step-only users: the Application's
// PruneLast=true sync option. It moves the prunes to a wave after the Rollout's, and Argo CD
// starts that wave only once the Rollout is Healthy; a paused canary is Suspended, so the sync
// of revision 2 cannot prune revision 1's objects before revision 2's step (discover: {}) has
// attached them to revision 1's ReplicaSet. Once attached they are a ReplicaSet's dependents,
// which Argo CD never counts as the app's own: on its next pass over the operation the prune
// wave is empty and the sync succeeds, mid-canary, with nothing pruned. (An earlier version
// said the sync holds until the promotion; it holds only until the step has attached, and a
// check that read the operation once happened to pass while Argo CD had not passed again.)
func TestStepPluginPruneLast(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web", Step: "discover"}}})
	sha1, err := w.repo.Commit("app", w.spec.files(t, 1), "revision 1")
	if err != nil {
		t.Fatal(err)
	}
	w.createApp("PruneLast=true")
	if _, err := e.argocd.WaitSynced(ctxFor(t, 2*time.Minute), w.app, sha1, false); err != nil {
		t.Fatal(err)
	}
	w.waitRolloutHealthy("web", 1)
	rs1 := w.revisionRS("web", 1)
	sha2, err := w.repo.Commit("app", w.spec.files(t, 2), "revision 2")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.argocd.Refresh(ctxFor(t, 10*time.Second), w.app); err != nil {
		t.Fatal(err)
	}
	w.waitRolloutPaused("web", 2)
	// The step attached revision 1's objects (discover) and revision 2's while the sync waits.
	w.waitOwned("web", 2, time.Minute)
	for _, k := range revisionKeys("web", 1) {
		cluster.WaitUntil(t, ctxFor(t, time.Minute), 50*time.Millisecond, k+" owned by revision 1's ReplicaSet", func() (bool, string) {
			r, ok := w.obs.get(k)
			return ok && r.Deleted.IsZero() && ownedBy(r.Owners, rs1.UID), w.state("web", 1)[0]
		})
	}
	attached := time.Now()
	// The sync of revision 2 ends while the canary is still paused, and prunes nothing.
	st := w.waitApp("the sync of revision 2 to finish mid-canary", 2*time.Minute, func(s *cluster.AppStatus) bool {
		return s.Succeeded(sha2) || (s.OperationState != nil && s.OperationState.Phase != "Running" && s.OperationState.Phase != "")
	})
	if !st.Succeeded(sha2) {
		t.Fatalf("the sync of revision 2 did not succeed: %s", st.Summary())
	}
	finished := time.Since(attached)
	if ro := w.rollout("web"); len(ro.Status.PauseConditions) == 0 || ro.Status.StableRS != rs1.Labels[cluster.RolloutsHashLabel] {
		t.Errorf("the sync finished but the canary is no longer paused on revision 1 as stable: %s", cluster.RolloutState(ro))
	}
	if p := prunedBy(st); len(p) > 0 {
		t.Errorf("the sync of revision 2 pruned %v; want nothing pruned", p)
	}
	pod, msg := w.restartPodOf(rs1)
	if msg != "" {
		t.Errorf("restarted stable pod %s of revision 1 cannot start: %s", pod.Name, msg)
	}
	w.promote("web", 2, false)
	cm, sec := w.exists("web", 1)
	if !cm || !sec {
		t.Errorf("after the promotion: revision 1's ConfigMap exists %v, Secret %v; want both until its ReplicaSet goes", cm, sec)
	}
	t.Logf("FIGURE %s rev=2 pruned=0 kept=2 (revision 1's, owned by %s); the sync succeeded mid-canary %s after the attach", t.Name(), rs1.Name, finished.Round(100*time.Millisecond))
}

// prunedBy lists what the last sync operation pruned, as Kind/name.
func prunedBy(st *cluster.AppStatus) []string {
	var pruned []string
	for _, r := range st.SyncResult() {
		if r.Status == "Pruned" {
			pruned = append(pruned, r.Kind+"/"+r.Name)
		}
	}
	return pruned
}
