package gitops

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestArgoCDListensOnLoopback: miniredis, the repo server and the application controller (its
// metrics listener patched from 0.0.0.0 in the build) listen on 127.0.0.1 only.
func TestArgoCDListensOnLoopback(t *testing.T) {
	e := sharedEnv(t)
	for _, pid := range e.argocd.PIDs() {
		addrs, err := cluster.ListeningAddrs(pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) == 0 {
			t.Errorf("pid %d listens nowhere (expected its port)", pid)
		}
		for _, a := range addrs {
			if !cluster.IsLoopbackAddr(a) {
				t.Errorf("pid %d listens on %s, not loopback", pid, a)
			}
		}
		t.Logf("pid %d listens on %v", pid, addrs)
	}
}

// TestPruneOptions checks docs/gitops.md's table for objects that were never attached (no
// mode runs here) and leave Git at the next revision: Prune=false alone keeps the object but
// leaves the app OutOfSync (requires pruning); IgnoreExtraneous alone does not stop the prune;
// both keep it and the app Synced.
func TestPruneOptions(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	for _, tc := range []struct {
		name       string
		annot      map[string]string
		wantKept   bool
		wantSynced bool
	}{
		{"prune-false", map[string]string{"argocd.argoproj.io/sync-options": "Prune=false"}, true, false},
		{"ignore-extraneous", map[string]string{"argocd.argoproj.io/compare-options": "IgnoreExtraneous"}, false, true},
		{"both", pruneFalse, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Deployment", Name: "api"}}, ConfigAnnotations: tc.annot})
			w.commit(1)
			w.waitDeploymentAt("api", 1)
			r := w.commit(2)
			w.waitDeploymentAt("api", 2)
			old := revisionKeys("api", 1)
			cm, sec := w.exists("api", 1)
			if kept := cm && sec; kept != tc.wantKept {
				t.Errorf("revision 1's objects kept %v (ConfigMap %v, Secret %v), want %v; pruned %v, skipped %v", kept, cm, sec, tc.wantKept, r.pruned, r.skipped)
			}
			if tc.wantKept && !containsAll(r.skipped, old...) {
				t.Errorf("sync result: prune skipped %v, want %v", r.skipped, old)
			}
			if !tc.wantKept && !containsAll(r.pruned, old...) {
				t.Errorf("sync result: pruned %v, want %v", r.pruned, old)
			}
			want := "OutOfSync"
			if tc.wantSynced {
				want = "Synced"
			}
			w.refreshAndWait("app reconciled and Healthy", func(s *cluster.AppStatus) bool {
				return s.Sync.Revision == r.sha && s.Sync.Status != "" && s.Health.Status == "Healthy"
			})
			// A second look after a full resync period: the status is not a transient one.
			time.Sleep(6 * time.Second)
			st := w.refreshAndWait("app "+want, func(s *cluster.AppStatus) bool { return s.Sync.Revision == r.sha && s.Sync.Status != "" })
			if st.Sync.Status != want {
				t.Errorf("app is %s, want %s: %s", st.Sync.Status, want, st.Summary())
			}
			if res := st.Resource("ConfigMap", "api-config-"+old[0][len("ConfigMap/api-config-"):]); tc.wantKept && !tc.wantSynced && (res == nil || !res.RequiresPruning) {
				t.Errorf("kept ConfigMap %s: want listed as requiring pruning, got %v", old[0], res)
			}
			t.Logf("FIGURE prune-options %s: revision 1 kept=%v pruned=%v prune_skipped=%v app=%s", tc.name, cm && sec, r.pruned, r.skipped, st.Sync.Status)
		})
	}
}

// TestReplaceDropsOwnerReferences: a sync with Replace=true writes the manifest over the live
// object, so the owner references an attacher added are gone after the next sync, while the
// same sync's default (client-side apply) keeps them on an object without the option. Both
// objects are in Git, used by the Deployment's ReplicaSet, and owned by it before the sync.
func TestReplaceDropsOwnerReferences(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{})
	files := func(marker int) map[string]string {
		return map[string]string{"app.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: replaced
  labels: {configmap-attacher/revisioned: "true", app: api}
  annotations:
    argocd.argoproj.io/sync-options: Replace=true
data: {a: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
  labels: {configmap-attacher/revisioned: "true", app: api}
data: {a: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: marker
data: {marker: "%d"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: app
          image: nginx:1.27
          volumeMounts: [{name: a, mountPath: /a}, {name: b, mountPath: /b}]
      volumes:
        - {name: a, configMap: {name: replaced}}
        - {name: b, configMap: {name: applied}}
`, marker)}
	}
	commit := func(marker int) string {
		sha, err := w.repo.Commit("app", files(marker), fmt.Sprintf("marker %d", marker))
		if err != nil {
			t.Fatal(err)
		}
		return sha
	}
	sha := commit(1)
	w.createApp()
	w.waitApp("first sync", 2*time.Minute, func(s *cluster.AppStatus) bool { return s.Succeeded(sha) })
	var rsUID types.UID
	var rsName string
	cluster.WaitUntil(t, ctxFor(t, time.Minute), 100*time.Millisecond, "the Deployment's ReplicaSet", func() (bool, string) {
		rss := w.replicaSets("api")
		if len(rss) != 1 {
			return false, fmt.Sprintf("%d ReplicaSets", len(rss))
		}
		rsUID, rsName = rss[0].UID, rss[0].Name
		return true, ""
	})
	// Attach both, as any mode does: one merge patch adding the owner reference.
	ctx := ctxFor(t, time.Minute)
	for _, name := range []string{"replaced", "applied"} {
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":%q,"uid":%q}]}}`, rsName, rsUID)
		if _, err := e.kube.CoreV1().ConfigMaps(w.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st := w.refreshAndWait("app Synced with owner references", func(s *cluster.AppStatus) bool { return s.Sync.Status == "Synced" })
	t.Logf("after attaching: %s", st.Summary())
	sha = commit(2)
	if _, err := e.argocd.WaitSynced(ctxFor(t, 2*time.Minute), w.app, sha, true); err != nil {
		t.Fatal(err)
	}
	owners := func(name string) []metav1.OwnerReference {
		cm, err := e.kube.CoreV1().ConfigMaps(w.ns).Get(ctxFor(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.OwnerReferences
	}
	if o := owners("replaced"); len(o) != 0 {
		t.Errorf("Replace=true: owner references after the sync: %v, want none (the manifest replaced them)", o)
	}
	if o := owners("applied"); !ownedBy(o, rsUID) {
		t.Errorf("default apply: owner references after the sync: %v, want ReplicaSet %s kept", o, rsName)
	}
	t.Logf("FIGURE replace: Replace=true owners after sync %v; default apply owners %v", owners("replaced"), owners("applied"))
}
