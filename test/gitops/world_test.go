package gitops

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// world is one test's app: a namespace, a Git repository, an Argo CD Application syncing the
// repository's app/ directory into the namespace, and an observer of the namespace's
// ConfigMaps and Secrets.
type world struct {
	t    *testing.T
	e    *env
	ns   string
	app  string // the Application's name (the namespace's)
	repo *cluster.GitRepo
	spec appSpec
	obs  *observer
	ro   rolloutsclient.Interface
	// rev is the last committed revision and sha its commit.
	rev int
	sha string
}

// newWorld creates the namespace, the repository (no commit yet) and the observer. The
// Application is created by the first commit (commit).
func newWorld(t *testing.T, e *env, spec appSpec) *world {
	t.Helper()
	ns := e.c.Namespace(t)
	repo, err := cluster.NewGitRepo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ro, err := rolloutsclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, e: e, ns: ns, app: ns, repo: repo, spec: spec, ro: ro}
	ctx, cancel := context.WithCancel(context.Background())
	w.obs = observe(ctx, e, ns)
	t.Cleanup(cancel)
	cluster.LogLinesOnFailure(t, "argocd application-controller", e.argocd.ControllerLog, func() string { return readFile(e.argocd.ControllerLog) }, ns, 60)
	cluster.LogLinesOnFailure(t, "rollouts-controller", e.rollouts.LogPath, e.rollouts.Log, ns, 40)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.argocd.DeleteApplication(ctx, w.app); err != nil {
			t.Log(err)
		}
	})
	return w
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createApp creates the Application on the first revision, auto-sync with prune.
func (w *world) createApp(syncOptions ...string) {
	w.t.Helper()
	err := w.e.argocd.CreateApplication(ctxFor(w.t, 10*time.Second), cluster.ApplicationSpec{
		Name: w.app, RepoURL: w.repo.URL(), Path: "app", Namespace: w.ns, AutoSync: true, SyncOptions: syncOptions})
	if err != nil {
		w.t.Fatal(err)
	}
}

// syncResult is what one revision's sync did.
type syncResult struct {
	rev     int
	sha     string
	status  *cluster.AppStatus
	pruned  []string // Kind/name Argo CD pruned in this sync
	skipped []string // Kind/name whose prune was skipped (Prune=false)
	took    time.Duration
}

// commit commits revision n and, after the first, refreshes the Application; the first
// creates it. It waits until Argo CD has synced that commit (operation Succeeded).
func (w *world) commit(n int, syncOptions ...string) syncResult {
	w.t.Helper()
	start := time.Now()
	sha, err := w.repo.Commit("app", w.spec.files(w.t, n), fmt.Sprintf("revision %d", n))
	if err != nil {
		w.t.Fatal(err)
	}
	w.rev, w.sha = n, sha
	ctx := ctxFor(w.t, 3*time.Minute)
	if n == 1 {
		w.createApp(syncOptions...)
	}
	st, err := w.e.argocd.WaitSynced(ctx, w.app, sha, n > 1)
	if err != nil {
		w.t.Fatalf("revision %d: %v", n, err)
	}
	r := syncResult{rev: n, sha: sha, status: st, took: time.Since(start)}
	for _, res := range st.SyncResult() {
		switch res.Status {
		case "Pruned":
			r.pruned = append(r.pruned, res.Kind+"/"+res.Name)
		case "PruneSkipped":
			r.skipped = append(r.skipped, res.Kind+"/"+res.Name)
		}
	}
	sort.Strings(r.pruned)
	sort.Strings(r.skipped)
	w.t.Logf("revision %d (%s) synced in %v: pruned %v, prune skipped %v; app %s", n, sha[:8], r.took.Round(time.Millisecond), r.pruned, r.skipped, st.Summary())
	return r
}

// waitApp waits for a condition on the Application.
func (w *world) waitApp(what string, d time.Duration, cond func(*cluster.AppStatus) bool) *cluster.AppStatus {
	w.t.Helper()
	st, err := w.e.argocd.WaitApp(ctxFor(w.t, d), w.app, what, cond)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// refreshAndWait refreshes the Application and waits until it has been reconciled after now
// and cond holds.
func (w *world) refreshAndWait(what string, cond func(*cluster.AppStatus) bool) *cluster.AppStatus {
	w.t.Helper()
	before := metav1.Now().Rfc3339Copy()
	ctx := ctxFor(w.t, time.Minute)
	if err := w.e.argocd.Refresh(ctx, w.app); err != nil {
		w.t.Fatal(err)
	}
	return w.waitApp(what, time.Minute, func(s *cluster.AppStatus) bool {
		return s.ReconciledAt != nil && !s.ReconciledAt.Before(&before) && cond(s)
	})
}

// rollout returns Rollout name.
func (w *world) rollout(name string) *v1alpha1.Rollout {
	w.t.Helper()
	ro, err := w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctxFor(w.t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatalf("get Rollout %s: %v", name, err)
	}
	return ro
}

// replicaSets lists workload wl's ReplicaSets (label app=wl).
func (w *world) replicaSets(wl string) []appsv1.ReplicaSet {
	w.t.Helper()
	list, err := w.e.kube.AppsV1().ReplicaSets(w.ns).List(ctxFor(w.t, 10*time.Second), metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(map[string]string{cluster.LabelApp: wl}).String()})
	if err != nil {
		w.t.Fatalf("list ReplicaSets: %v", err)
	}
	return list.Items
}

// revisionRS returns the ReplicaSet of workload wl whose template uses revision n's ConfigMap
// (nil when there is none).
func (w *world) revisionRS(wl string, n int) *appsv1.ReplicaSet {
	cm, _ := configNames(wl, n)
	return cluster.ReplicaSetUsingConfigMap(w.replicaSets(wl), cm)
}

// waitRolloutPaused waits until Rollout wl runs revision n as its canary and is paused.
func (w *world) waitRolloutPaused(wl string, n int) {
	w.t.Helper()
	cluster.WaitUntil(w.t, ctxFor(w.t, 2*time.Minute), 100*time.Millisecond, fmt.Sprintf("Rollout %s paused at revision %d", wl, n), func() (bool, string) {
		ro := w.rollout(wl)
		rs := w.revisionRS(wl, n)
		return rs != nil && cluster.RolloutObserved(ro) && ro.Status.CurrentPodHash == rs.Labels[cluster.RolloutsHashLabel] &&
			len(ro.Status.PauseConditions) > 0 && ro.Status.StableRS != ro.Status.CurrentPodHash, cluster.RolloutState(ro)
	})
}

// promote is `kubectl argo rollouts promote` (or --full): it waits until revision n is stable
// and Healthy.
func (w *world) promote(wl string, n int, full bool) {
	w.t.Helper()
	ctx := ctxFor(w.t, 2*time.Minute)
	ro := w.rollout(wl)
	patch := cluster.PromotePatch(ro)
	if full {
		patch = `{"status":{"promoteFull":true}}`
	}
	if patch != "" {
		if _, err := w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Patch(ctx, wl, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			w.t.Fatalf("promote %s: %v", wl, err)
		}
	}
	w.waitRolloutHealthy(wl, n)
}

// waitRolloutHealthy waits until Rollout wl is Healthy at revision n.
func (w *world) waitRolloutHealthy(wl string, n int) {
	w.t.Helper()
	ctx := ctxFor(w.t, 2*time.Minute)
	cluster.WaitUntil(w.t, ctx, 100*time.Millisecond, fmt.Sprintf("Rollout %s Healthy at revision %d", wl, n), func() (bool, string) {
		ro := w.rollout(wl)
		rs := w.revisionRS(wl, n)
		if rs == nil {
			return false, "no ReplicaSet of revision yet; " + cluster.RolloutState(ro)
		}
		// promote patches may need another round when a step was still running
		if len(ro.Status.PauseConditions) > 0 {
			if p := cluster.PromotePatch(ro); p != "" {
				_, _ = w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Patch(ctx, wl, types.MergePatchType, []byte(p), metav1.PatchOptions{}, "status")
			}
		}
		return cluster.RolloutHealthyAt(ro, rs, 2), cluster.RolloutState(ro)
	})
}

// waitDeploymentAt waits until Deployment wl has rolled out revision n (2 available pods).
func (w *world) waitDeploymentAt(wl string, n int) {
	w.t.Helper()
	cluster.WaitUntil(w.t, ctxFor(w.t, 2*time.Minute), 100*time.Millisecond, fmt.Sprintf("Deployment %s at revision %d", wl, n), func() (bool, string) {
		d, err := w.e.kube.AppsV1().Deployments(w.ns).Get(ctxFor(w.t, 10*time.Second), wl, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rs := w.revisionRS(wl, n)
		ok := rs != nil && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 &&
			d.Status.Replicas == 2 && rs.Status.AvailableReplicas == 2
		return ok, fmt.Sprintf("gen %d observed %d updated %d available %d replicas %d", d.Generation, d.Status.ObservedGeneration,
			d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas)
	})
}

// restartPodOf deletes one live pod of ReplicaSet rs (a spot replacement, an eviction) and
// waits until the ReplicaSet's replacement pod is either Ready or stuck with
// CreateContainerConfigError; it returns the replacement and the fake kubelet's message ("" when
// it started).
func (w *world) restartPodOf(rs *appsv1.ReplicaSet) (*corev1.Pod, string) {
	w.t.Helper()
	ctx := ctxFor(w.t, time.Minute)
	sel := labels.SelectorFromSet(map[string]string{cluster.RolloutsHashLabel: rs.Labels[cluster.RolloutsHashLabel], cluster.LabelApp: rs.Labels[cluster.LabelApp]}).String()
	if _, ok := rs.Labels[cluster.RolloutsHashLabel]; !ok {
		sel = labels.SelectorFromSet(map[string]string{"pod-template-hash": rs.Labels["pod-template-hash"], cluster.LabelApp: rs.Labels[cluster.LabelApp]}).String()
	}
	pods, err := cluster.LivePods(ctx, w.e.kube, w.ns, sel)
	if err != nil || len(pods) == 0 {
		w.t.Fatalf("pods of ReplicaSet %s: %v (%d)", rs.Name, err, len(pods))
	}
	before := map[types.UID]bool{}
	for _, p := range pods {
		before[p.UID] = true
	}
	victim := pods[0]
	zero := int64(0)
	if err := w.e.kube.CoreV1().Pods(w.ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		w.t.Fatalf("delete pod %s: %v", victim.Name, err)
	}
	var repl *corev1.Pod
	var msg string
	cluster.WaitUntil(w.t, ctx, 100*time.Millisecond, "a replacement pod of ReplicaSet "+rs.Name+" Ready or failing", func() (bool, string) {
		pods, err := cluster.LivePods(ctx, w.e.kube, w.ns, sel)
		if err != nil {
			return false, err.Error()
		}
		for i := range pods {
			p := &pods[i]
			if before[p.UID] || metav1.GetControllerOf(p) == nil || metav1.GetControllerOf(p).UID != rs.UID {
				continue
			}
			if cluster.HasWaitingReason(p, "CreateContainerConfigError") {
				repl, msg = p, w.e.kubelet.ConfigError(w.ns, p.Name)
				return true, ""
			}
			if cluster.PodReady(p) {
				repl = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d live pods", len(pods))
	})
	return repl, msg
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// ownedBy reports whether the object's owner references include the UID.
func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// objectRecord is what the observer saw of one ConfigMap or Secret.
type objectRecord struct {
	Kind, Name string
	Added      time.Time // first seen (Argo CD's apply: the object is new per revision)
	Owned      time.Time // first seen with an owner reference (zero: never)
	Deleted    time.Time // seen deleted (zero: still there)
	Owners     []metav1.OwnerReference
}

// observer watches a namespace's ConfigMaps, Secrets and ReplicaSets and records when each appeared, got
// its first owner and was deleted, with watch-event precision (not the apiserver's one-second
// timestamps).
type observer struct {
	mu      sync.Mutex
	objects map[string]*objectRecord // Kind/name
	synced  chan struct{}
}

func observe(ctx context.Context, e *env, ns string) *observer {
	o := &observer{objects: map[string]*objectRecord{}, synced: make(chan struct{})}
	var ready sync.WaitGroup
	ready.Add(3)
	for _, kind := range []string{"ConfigMap", "Secret", "ReplicaSet"} {
		go o.watch(ctx, e, ns, kind, &ready)
	}
	go func() { ready.Wait(); close(o.synced) }()
	select {
	case <-o.synced:
	case <-time.After(10 * time.Second):
	}
	return o
}

func (o *observer) watch(ctx context.Context, e *env, ns, kind string, ready *sync.WaitGroup) {
	var once sync.Once
	for ctx.Err() == nil {
		var w watch.Interface
		var err error
		switch kind {
		case "Secret":
			w, err = e.kube.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{})
		case "ReplicaSet":
			w, err = e.kube.AppsV1().ReplicaSets(ns).Watch(ctx, metav1.ListOptions{})
		default:
			w, err = e.kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		}
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		once.Do(ready.Done)
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(metav1.Object)
			if !ok {
				break
			}
			o.record(kind, m, ev.Type == watch.Deleted)
		}
		w.Stop()
	}
}

func (o *observer) record(kind string, m metav1.Object, deleted bool) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	key := kind + "/" + m.GetName()
	r := o.objects[key]
	if r == nil || (!r.Deleted.IsZero() && !deleted) {
		r = &objectRecord{Kind: kind, Name: m.GetName(), Added: now}
		o.objects[key] = r
	}
	if len(m.GetOwnerReferences()) > 0 && r.Owned.IsZero() {
		r.Owned = now
	}
	r.Owners = m.GetOwnerReferences()
	if deleted && r.Deleted.IsZero() {
		r.Deleted = now
	}
}

// get returns a copy of the record of Kind/name (ok false when never seen).
func (o *observer) get(key string) (objectRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.objects[key]
	if r == nil {
		return objectRecord{}, false
	}
	return *r, true
}

// revisionKeys are the "Kind/name" keys of workload wl's revision-n objects.
func revisionKeys(wl string, n int) []string {
	cm, sec := configNames(wl, n)
	return []string{"ConfigMap/" + cm, "Secret/" + sec}
}

// waitOwned waits until both of workload wl's revision-n objects are owned by that revision's
// ReplicaSet and returns the time from the first of them appearing (Argo CD's apply) to the
// last owner reference, and from the ReplicaSet appearing to the last owner reference.
func (w *world) waitOwned(wl string, n int, d time.Duration) (took, afterRS time.Duration) {
	w.t.Helper()
	cluster.WaitUntil(w.t, ctxFor(w.t, d), 50*time.Millisecond, fmt.Sprintf("revision %d of %s owned by its ReplicaSet", n, wl), func() (bool, string) {
		rs := w.revisionRS(wl, n)
		if rs == nil {
			return false, "no ReplicaSet yet"
		}
		var first, last time.Time
		for _, k := range revisionKeys(wl, n) {
			r, ok := w.obs.get(k)
			if !ok || !r.Deleted.IsZero() || !ownedBy(r.Owners, rs.UID) {
				return false, fmt.Sprintf("%s: seen %v, record %+v, want owner %s", k, ok, r, rs.Name)
			}
			if first.IsZero() || r.Added.Before(first) {
				first = r.Added
			}
			if r.Owned.After(last) {
				last = r.Owned
			}
		}
		took = last.Sub(first)
		if r, ok := w.obs.get("ReplicaSet/" + rs.Name); ok {
			afterRS = last.Sub(r.Added)
		}
		return true, ""
	})
	return took, afterRS
}

// state describes workload wl's revision-n objects: "exists, owned by [...]" or "deleted".
func (w *world) state(wl string, n int) []string {
	var out []string
	for _, k := range revisionKeys(wl, n) {
		r, ok := w.obs.get(k)
		switch {
		case !ok:
			out = append(out, k+": never seen")
		case !r.Deleted.IsZero():
			out = append(out, k+": deleted")
		default:
			var owners []string
			for _, o := range r.Owners {
				owners = append(owners, o.Kind+"/"+o.Name)
			}
			out = append(out, k+": exists, owners "+strings.Join(owners, ","))
		}
	}
	return out
}

// exists reports whether both of the revision's objects exist now (read from the apiserver).
func (w *world) exists(wl string, n int) (cmOK, secOK bool) {
	w.t.Helper()
	cm, sec := configNames(wl, n)
	ctx := ctxFor(w.t, 10*time.Second)
	_, err := w.e.kube.CoreV1().ConfigMaps(w.ns).Get(ctx, cm, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatal(err)
	}
	cmOK = err == nil
	_, err = w.e.kube.CoreV1().Secrets(w.ns).Get(ctx, sec, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatal(err)
	}
	return cmOK, err == nil
}

// waitGone waits until both of the revision's objects are deleted (the garbage collector).
func (w *world) waitGone(wl string, n int, d time.Duration) {
	w.t.Helper()
	cluster.WaitUntil(w.t, ctxFor(w.t, d), 100*time.Millisecond, fmt.Sprintf("revision %d of %s collected", n, wl), func() (bool, string) {
		cm, sec := w.exists(wl, n)
		return !cm && !sec, fmt.Sprintf("ConfigMap exists %v, Secret exists %v", cm, sec)
	})
}

func containsAll(list []string, want ...string) bool {
	for _, x := range want {
		found := false
		for _, y := range list {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

func containsAny(list []string, want ...string) bool {
	for _, x := range want {
		for _, y := range list {
			if x == y {
				return true
			}
		}
	}
	return false
}
