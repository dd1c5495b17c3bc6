package controllermode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// First deploy: the Rollouts controller runs no step on revision 1; the controller owns its
// config within 2 s of the ReplicaSet appearing, with no step and no Job.
func TestRolloutFirstDeploy(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "first")
	a.createConfig(1)
	a.createRollout(v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: pauseSteps()}}, nil)
	rs := a.waitRS(a.rolloutUID(), 1)
	took := waitOwned(t, a.kube, a.ns, rs, 2*time.Second, a.objects(1)...)
	t.Logf("revision 1 owned %v after its ReplicaSet was seen", took.Round(time.Millisecond))
	a.waitHealthy(1)
	if n := len(a.get().Status.Canary.StepPluginStatuses); n != 0 {
		t.Errorf("%d step plugin statuses: no step should have run", n)
	}
}

// promote --full before the first step: the new revision's config is owned anyway, and the
// previous revision keeps its own.
func TestRolloutPromoteFullBeforeStep(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "full")
	pauseFirst := []v1alpha1.CanaryStep{{Pause: &v1alpha1.RolloutPause{}}, {SetWeight: ptr32(50)}, {Pause: &v1alpha1.RolloutPause{}}}
	a.createConfig(1)
	a.createRollout(v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: pauseFirst}}, nil)
	rs1 := a.waitHealthy(1)
	a.createConfig(2)
	a.deploy(2)
	rs2 := a.waitRS(a.rolloutUID(), 2)
	waitOwned(t, a.kube, a.ns, rs2, 5*time.Second, a.objects(2)...)
	a.promoteFull()
	a.waitHealthy(2)
	waitOwned(t, a.kube, a.ns, rs1, time.Second, a.objects(1)...)
	waitOwned(t, a.kube, a.ns, rs2, time.Second, a.objects(2)...)
}

// A rollback inside rollbackWindow skips every step: revision 1's config, owned since its
// first deploy, survives an Argo CD prune at revision 2 and the rollback becomes Healthy.
func TestRolloutRollbackWindow(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "window")
	a.createConfig(1)
	a.createRollout(v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: pauseSteps()}},
		func(ro *v1alpha1.Rollout) { ro.Spec.RollbackWindow = &v1alpha1.RollbackWindowSpec{Revisions: 3} })
	rs1 := a.waitHealthy(1)
	a.deploySecond(rs1, "the prune at revision 2")
	a.promoteFull()
	a.waitHealthy(2)
	// Git reverts to revision 1 (its config is not re-applied: it was never pruned).
	a.deploy(1)
	start := time.Now()
	if rs := a.waitHealthy(1); rs.UID != rs1.UID {
		t.Errorf("the rollback made a new ReplicaSet %s instead of re-using %s", rs.Name, rs1.Name)
	}
	t.Logf("rollback to revision 1 Healthy after %v", time.Since(start).Round(time.Millisecond))
	if n := len(a.get().Status.PauseConditions); n != 0 {
		t.Errorf("the rollback paused (%d pause conditions): it should have skipped the steps", n)
	}
	waitOwned(t, a.kube, a.ns, rs1, time.Second, a.objects(1)...)
}

// blueGreen has no steps: the preview ReplicaSet owns its config before promotion, the
// previous one keeps its own after.
func TestRolloutBlueGreen(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "bg")
	for _, svc := range []string{"bg-active", "bg-preview"} {
		if _, err := a.kube.CoreV1().Services(a.ns).Create(ctxT(t), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc},
			Spec: corev1.ServiceSpec{Selector: map[string]string{cluster.LabelApp: "bg"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	no, delay := false, int32(1)
	a.createConfig(1)
	a.createRollout(v1alpha1.RolloutStrategy{BlueGreen: &v1alpha1.BlueGreenStrategy{ActiveService: "bg-active", PreviewService: "bg-preview",
		AutoPromotionEnabled: &no, ScaleDownDelaySeconds: &delay}}, nil)
	rs1 := a.waitHealthy(1)
	waitOwned(t, a.kube, a.ns, rs1, time.Second, a.objects(1)...)
	a.createConfig(2)
	a.deploy(2)
	rs2 := a.waitRS(a.rolloutUID(), 2)
	waitOwned(t, a.kube, a.ns, rs2, 5*time.Second, a.objects(2)...)
	eventually(t, 60*time.Second, "the blueGreen Rollout paused before promotion", func() (bool, string) {
		ro := a.get()
		return len(ro.Status.PauseConditions) > 0, cluster.RolloutState(ro)
	})
	if ro := a.get(); ro.Status.StableRS == rs2.Labels[cluster.RolloutsHashLabel] {
		t.Fatalf("already promoted: %s", cluster.RolloutState(ro))
	}
	a.promote()
	a.waitHealthy(2)
	eventually(t, 30*time.Second, "the previous ReplicaSet scaled down", func() (bool, string) {
		rs, err := a.kube.AppsV1().ReplicaSets(a.ns).Get(context.Background(), rs1.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return rs.Status.Replicas == 0, fmt.Sprintf("replicas %d", rs.Status.Replicas)
	})
	waitOwned(t, a.kube, a.ns, rs1, time.Second, a.objects(1)...)
}

// The race the step loses: right after revision 2 is applied, an Argo CD prune deletes every
// unowned opted-in object not in the new Git. Nothing revision 1 uses is deleted, and a
// stable pod deleted afterwards comes back Ready (the fake kubelet starts a pod only when its
// ConfigMaps and Secrets exist).
func TestRolloutGitOpsPrune(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "prune")
	a.createConfig(1)
	a.createRollout(v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: pauseSteps()}}, nil)
	rs1 := a.waitHealthy(1)
	a.deploySecond(rs1, "the prune right after revision 2")
	eventually(t, 60*time.Second, "the canary paused", func() (bool, string) {
		ro := a.get()
		return cluster.RolloutObserved(ro) && len(ro.Status.PauseConditions) > 0, cluster.RolloutState(ro)
	})
	if deleted := a.pruneLikeArgoCD(2); len(deleted) != 0 {
		t.Fatalf("the prune during the canary deleted %v", deleted)
	}
	pods := a.pods(rs1, cluster.RolloutsHashLabel)
	if len(pods) == 0 {
		t.Fatal("no stable pod")
	}
	victim := pods[0]
	zero := int64(0)
	if err := a.kube.CoreV1().Pods(a.ns).Delete(ctxT(t), victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a replacement stable pod Ready", func() (bool, string) {
		var state string
		for _, p := range a.pods(rs1, cluster.RolloutsHashLabel) {
			if p.Name == victim.Name {
				continue
			}
			if cluster.PodReady(&p) {
				return true, ""
			}
			state += fmt.Sprintf("%s: %s %s; ", p.Name, p.Status.Phase, e.kubelet.ConfigError(a.ns, p.Name))
		}
		return false, state
	})
	a.promoteFull()
	a.waitHealthy(2)
	waitOwned(t, a.kube, a.ns, rs1, time.Second, a.objects(1)...)
}

func ptr32(v int32) *int32 { return &v }

// deploySecond deploys revision 2 after revision 1 (ReplicaSet rs1), prunes as Argo CD does
// (nothing may go: what failed to prune is named by prune), and waits until revision 2's
// ReplicaSet owns its objects. The controller tells a rollback by creationTimestamp, which has
// a resolution of one second (isRollbackWithinWindow: newRS before stableRS): revision 2's
// ReplicaSet is created in a later second than revision 1's, or a revert is not a rollback.
func (a *app) deploySecond(rs1 *appsv1.ReplicaSet, prune string) *appsv1.ReplicaSet {
	a.t.Helper()
	time.Sleep(time.Until(rs1.CreationTimestamp.Add(1100 * time.Millisecond)))
	a.createConfig(2)
	a.deploy(2)
	if deleted := a.pruneLikeArgoCD(2); len(deleted) != 0 {
		a.t.Fatalf("%s deleted %v", prune, deleted)
	}
	rs2 := a.waitRS(a.rolloutUID(), 2)
	waitOwned(a.t, a.kube, a.ns, rs2, 5*time.Second, a.objects(2)...)
	return rs2
}
