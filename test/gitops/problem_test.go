package gitops

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProblemWithoutAttacher is the failure every other test is measured against: a canary
// Rollout and a Deployment whose config is a content-hashed ConfigMap and Secret per revision,
// synced by the real Argo CD through four revisions with auto-prune and no configmap-attacher.
// At the sync of revision N+1 Argo CD prunes revision N's ConfigMap and Secret, while revision
// N's ReplicaSet is still the Rollout's stable one (and the Deployment's rollback target); a
// stable pod that restarts mid-canary then cannot start (CreateContainerConfigError).
func TestProblemWithoutAttacher(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web"}, {Kind: "Deployment", Name: "api"}}})
	w.commit(1)
	w.waitRolloutHealthy("web", 1)
	w.waitDeploymentAt("api", 1)
	for n := 2; n <= 4; n++ {
		stable := w.revisionRS("web", n-1)
		r := w.commit(n)
		want := append(revisionKeys("web", n-1), revisionKeys("api", n-1)...)
		if !containsAll(r.pruned, want...) {
			t.Errorf("revision %d: Argo CD pruned %v, want revision %d's %v among them", n, r.pruned, n-1, want)
		}
		w.waitRolloutPaused("web", n)
		// Revision N-1's ReplicaSet still runs the stable pods; its config is gone.
		for _, k := range want {
			if rec, _ := w.obs.get(k); rec.Deleted.IsZero() {
				t.Errorf("revision %d: %s not deleted: %+v", n, k, rec)
			}
		}
		if _, err := e.kube.AppsV1().ReplicaSets(w.ns).Get(ctxFor(t, 10*time.Second), stable.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("revision %d: stable ReplicaSet %s: %v", n, stable.Name, err)
		}
		pod, msg := w.restartPodOf(stable)
		if msg == "" || !strings.Contains(msg, "not found") {
			t.Errorf("revision %d: a restarted stable pod of revision %d started (pod %s), want CreateContainerConfigError", n, n-1, pod.Name)
		} else {
			t.Logf("revision %d: stable pod %s of revision %d: CreateContainerConfigError: %s", n, pod.Name, n-1, msg)
		}
		w.promote("web", n, false)
		w.waitDeploymentAt("api", n)
		// The Deployment's previous ReplicaSet is still in its history (the rollback target), its
		// config pruned.
		if rs := w.revisionRS("api", n-1); rs == nil {
			t.Errorf("revision %d: the Deployment's revision %d ReplicaSet left the history", n, n-1)
		}
		kept := 0
		for _, k := range want {
			if rec, _ := w.obs.get(k); rec.Deleted.IsZero() {
				kept++
			}
		}
		t.Logf("FIGURE %s rev=%d owned_after_apply=not owned pruned=%d %v kept=%d restart=%q", t.Name(), n, len(r.pruned), r.pruned, kept, "CreateContainerConfigError: "+msg)
	}
}
