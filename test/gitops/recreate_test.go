package gitops

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// recreateGrace is the controller's -anchor-grace in TestControllerModeRolloutRecreate.
const recreateGrace = 15 * time.Second

// TestControllerModeRolloutRecreate: a Rollout deleted and applied again with its config
// unchanged (`kubectl delete` + `apply`, Argo CD Replace=true,Force=true) keeps its ConfigMap
// and Secret while the garbage collector deletes the old ReplicaSets, because the anchor of the
// Rollout's template was among their owners before the delete: with the controller running,
// and with it stopped across the delete and the re-apply (so that no timing can pass it).
// Deleted for good, the config is collected once the anchor grace has passed.
func TestControllerModeRolloutRecreate(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	w := newWorld(t, e, appSpec{Workloads: []workload{{Kind: "Rollout", Name: "web"}}})
	start := func() *cluster.ControllerProcess {
		t.Helper()
		cp, err := cluster.StartController(e.plugin, w.ns, filepath.Join(e.c.Dir, "controller-"+w.ns+".log"), time.Minute,
			[]string{"KUBECONFIG=/nonexistent"}, "-kubeconfig", e.controllerKubeconfig, "-leader-elect=false", "-namespaces", w.ns,
			"-anchor-grace", recreateGrace.String())
		t.Cleanup(cp.Stop)
		if err != nil {
			t.Fatal(err)
		}
		cluster.LogLinesOnFailure(t, "controller mode", cp.LogPath, cp.Log, "", 40)
		return cp
	}
	cp := start()
	w.commit(1)
	w.waitRolloutHealthy("web", 1)
	w.waitOwned("web", 1, time.Minute)
	w.waitAnchorOwns("web", 1)

	recreate := func(why string) {
		t.Helper()
		old := w.revisionRS("web", 1)
		ro := w.rollout("web")
		ctx := ctxFor(t, 30*time.Second)
		bg := metav1.DeletePropagationBackground
		if err := w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatalf("delete Rollout web: %v", err)
		}
		again := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: ro.Name, Namespace: ro.Namespace, Labels: ro.Labels}, Spec: ro.Spec}
		cluster.WaitUntil(t, ctx, 100*time.Millisecond, "Rollout web created again", func() (bool, string) {
			_, err := w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Create(ctx, again, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err) // AlreadyExists while the old one is being deleted
		})
		cluster.WaitUntil(t, ctxFor(t, time.Minute), 100*time.Millisecond, "the old ReplicaSet collected", func() (bool, string) {
			for _, rs := range w.replicaSets("web") {
				if rs.UID == old.UID {
					return false, "ReplicaSet " + rs.Name + " still exists"
				}
			}
			return true, ""
		})
		// The collector deletes a dependent right after its last owner; give it the time it
		// takes to get there before reading.
		time.Sleep(3 * time.Second)
		if cm, sec := w.exists("web", 1); !cm || !sec {
			t.Fatalf("%s: the config was collected with the old ReplicaSet (ConfigMap exists %v, Secret exists %v): %v", why, cm, sec, w.state("web", 1))
		}
		t.Logf("%s: the old ReplicaSet was collected, the config kept: %v", why, w.state("web", 1))
	}

	recreate("controller running")
	w.waitRolloutHealthy("web", 1)
	w.waitOwned("web", 1, time.Minute)
	w.waitAnchorOwns("web", 1)

	cp.Stop()
	recreate("controller stopped")
	start()
	w.waitRolloutHealthy("web", 1)
	w.waitOwned("web", 1, time.Minute)

	// Deleted for good: kept for the grace, then collected with the anchor.
	bg := metav1.DeletePropagationBackground
	if err := w.ro.ArgoprojV1alpha1().Rollouts(w.ns).Delete(ctxFor(t, 10*time.Second), "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	time.Sleep(recreateGrace / 3)
	if cm, sec := w.exists("web", 1); !cm || !sec {
		t.Fatalf("collected before the anchor grace (%v): ConfigMap exists %v, Secret exists %v", recreateGrace, cm, sec)
	}
	w.waitGone("web", 1, recreateGrace+90*time.Second)
	t.Logf("deleted for good: the config was collected %v after the Rollout (grace %v)", time.Since(deleted).Round(time.Second), recreateGrace)
}

// waitAnchorOwns waits until both of workload wl's revision-n objects are owned by an anchor of
// Rollout wl (the controller's: a labelled ControllerRevision whose controller is the Namespace).
func (w *world) waitAnchorOwns(wl string, n int) {
	w.t.Helper()
	cluster.WaitUntil(w.t, ctxFor(w.t, time.Minute), 100*time.Millisecond, fmt.Sprintf("revision %d of %s owned by the anchor of Rollout %s", n, wl, wl), func() (bool, string) {
		list, err := w.e.kube.AppsV1().ControllerRevisions(w.ns).List(ctxFor(w.t, 10*time.Second), metav1.ListOptions{LabelSelector: plugin.AnchorLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		var anchors []types.UID
		for i := range list.Items {
			cr := &list.Items[i]
			if a, ok := plugin.ParseAnchor(cr); ok && a.Kind == plugin.KindRollout && a.Name == wl && plugin.NamespaceController(metav1.GetControllerOfNoCopy(cr), w.ns) {
				anchors = append(anchors, cr.UID)
			}
		}
		for _, k := range revisionKeys(wl, n) {
			r, ok := w.obs.get(k)
			owned := false
			for _, uid := range anchors {
				owned = owned || ok && ownedBy(r.Owners, uid)
			}
			if !owned {
				return false, fmt.Sprintf("%d anchors of Rollout %s; %v", len(anchors), wl, w.state(wl, n))
			}
		}
		return true, ""
	})
}
