package rollouts

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// 2. Spot replacement mid-canary. Between revisions the old revisions' ConfigMaps and Secrets
// are pruned as Argo CD prunes (only those without an owner reference). Then, during the pause
// of the new revision, a pod of the stable ReplicaSet is deleted: the replacement the
// replicaset controller creates must find its ConfigMap and Secret.
//
// With the plugin (revision 1 attached by the command-line Job, revision 2 by the step) the
// stable revision's objects survive the prune and the replacement pod becomes Ready. The same
// scenario without the plugin step shows the failure the plugin prevents: the prune deletes the
// stable revision's ConfigMap and the replacement pod is stuck in CreateContainerConfigError.
func TestSpotReplacementMidCanary(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	t.Run("with-plugin", func(t *testing.T) {
		t.Parallel()
		spotReplacement(t, e, true)
	})
	t.Run("without-plugin", func(t *testing.T) {
		t.Parallel()
		spotReplacement(t, e, false)
	})
}

func spotReplacement(t *testing.T, e *env, withPlugin bool) {
	steps, pauseAt := stepsPluginFirst, int32(2)
	if !withPlugin {
		steps, pauseAt = stepsNoPlugin, 1
	}
	a := newApp(t, e, e.namespace(t), "web", steps)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	if withPlugin {
		// The initial deploy runs no step: the Job attaches revision 1.
		t.Logf("revision 1 attached by the command line: %s", a.attachWithJob(1))
	}
	for rev := 2; rev <= 3; rev++ {
		a.createConfig(rev)
		a.deploy(rev)
		if withPlugin {
			a.waitStep(0, rev)
			a.waitOwned(rev, a.rsFor(rev))
		}
		a.waitPaused(pauseAt)
		stable := a.rsFor(rev - 1)
		eventually(t, 30*time.Second, "the stable ReplicaSet at 1 available pod", func() (bool, string) {
			stable = a.rsFor(rev - 1)
			return stable.Status.AvailableReplicas == 1 && len(a.pods(stable)) == 1, fmt.Sprintf("available %d, pods %d", stable.Status.AvailableReplicas, len(a.pods(stable)))
		})

		// Argo CD sync of revision rev: prune what left Git and has no owner.
		pruned := a.pruneLikeArgoCD(rev)
		stableObjs := []string{"ConfigMap/" + a.cm(rev-1), "Secret/" + a.secret(rev-1)}
		t.Logf("revision %d: pruned %v", rev, pruned)

		// Spot replacement: a stable pod goes away; the replicaset controller replaces it.
		old := a.pods(stable)[0]
		if err := a.kube.CoreV1().Pods(a.ns).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var repl corev1.Pod
		eventually(t, 30*time.Second, "a replacement pod of the stable ReplicaSet", func() (bool, string) {
			for _, p := range a.pods(stable) {
				if p.UID != old.UID {
					repl = p
					return true, ""
				}
			}
			return false, "none yet"
		})

		if withPlugin {
			if slices.Contains(pruned, stableObjs[0]) || slices.Contains(pruned, stableObjs[1]) {
				t.Fatalf("revision %d: the prune deleted the stable revision's objects %v although the plugin attached them", rev, pruned)
			}
			a.waitOwned(rev-1, stable)
			eventually(t, 30*time.Second, "the replacement pod Ready and the stable ReplicaSet back to 1 available", func() (bool, string) {
				p, err := a.kube.CoreV1().Pods(a.ns).Get(context.Background(), repl.Name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				rs := a.rsFor(rev - 1)
				return cluster.PodReady(p) && rs.Status.AvailableReplicas == 1, fmt.Sprintf("pod phase %s ready %v, %s; stable available %d",
					p.Status.Phase, cluster.PodReady(p), e.kubelet.ConfigError(a.ns, p.Name), rs.Status.AvailableReplicas)
			})
			t.Logf("revision %d: replacement pod %s of stable ReplicaSet %s is Ready: %s and %s still exist", rev, repl.Name, stable.Name, a.cm(rev-1), a.secret(rev-1))
		} else {
			if !slices.Contains(pruned, stableObjs[0]) || !slices.Contains(pruned, stableObjs[1]) {
				t.Fatalf("revision %d: without the plugin the prune should delete the stable revision's %v, deleted %v", rev, stableObjs, pruned)
			}
			eventually(t, 30*time.Second, "the replacement pod stuck in CreateContainerConfigError", func() (bool, string) {
				p, err := a.kube.CoreV1().Pods(a.ns).Get(context.Background(), repl.Name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return cluster.HasWaitingReason(p, "CreateContainerConfigError") && !cluster.PodReady(p), fmt.Sprintf("pod phase %s ready %v", p.Status.Phase, cluster.PodReady(p))
			})
			eventually(t, 30*time.Second, "the stable ReplicaSet at 0 available", func() (bool, string) {
				rs := a.rsFor(rev - 1)
				return rs.Status.AvailableReplicas == 0, fmt.Sprintf("%d available", rs.Status.AvailableReplicas)
			})
			t.Logf("revision %d (no plugin): prune deleted %v; replacement pod %s of stable ReplicaSet %s: CreateContainerConfigError (%s)",
				rev, pruned, repl.Name, stable.Name, e.kubelet.ConfigError(a.ns, repl.Name))
		}
		a.promote()
		a.waitHealthy(rev)
	}
}
