package rollouts

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestUninstallOrder follows docs/install.md's uninstall section with a Rollout mid-canary
// (its plugin step done, paused at the next pause): first the step out of the Rollout, then the
// stepPlugins entry out of argo-rollouts-config and the Rollouts controller restarted. No step
// may fail: the Rollout reaches Healthy when promoted, a later revision rolls out without the
// plugin, the Rollouts controller reports no error about the plugin, and the objects the step
// attached keep their owner. The other order (the registration removed first, the step still
// in the Rollout) is run beside it and must show the failure the docs warn about, so the checks
// above are known to see one.
func TestUninstallOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		stepsFirst bool
	}{
		{"documented order", true},
		{"registration removed first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := ownEnv(t, cluster.RolloutsVersion)
			a := newApp(t, e, e.namespace(t), "web", stepsPluginFirst)
			a.createConfig(1)
			a.deploy(1)
			a.waitHealthy(1)
			a.createConfig(2)
			a.deploy(2)
			a.waitStep(0, 2)
			a.waitPaused(2)
			rs2 := a.rsFor(2)
			a.waitOwned(2, rs2)

			removeSteps := func() {
				a.update(func(ro *v1alpha1.Rollout) { ro.Spec.Strategy.Canary.Steps = stepsNoPlugin(a, 2) })
			}
			if tc.stepsFirst {
				removeSteps()
				// The controller restarts the changed step list on the same ReplicaSet:
				// setWeight 50, then the pause at index 1.
				a.waitPaused(1)
			}
			unregisterPlugin(t, e)
			if !tc.stepsFirst {
				// A new revision whose steps still name the plugin: what a GitOps sync does
				// the day after the registration went.
				a.steps = stepsPluginFirst
				a.createConfig(3)
				a.deploy(3)
				t.Logf("wrong order, as the docs warn: %s", waitPluginError(t, a, 90*time.Second))
				return
			}
			a.promote()
			a.waitHealthy(2)
			a.steps = stepsNoPlugin
			a.createConfig(3)
			a.deploy(3)
			a.waitPaused(1)
			a.promote()
			a.waitHealthy(3)
			if msg := pluginError(a); msg != "" {
				t.Errorf("the Rollouts controller reported a plugin error after the documented uninstall: %s", msg)
			}
			// Objects attached before the uninstall keep their owner: revision 2's
			// ReplicaSet is in history and still uses them.
			a.waitOwned(2, rs2)
		})
	}
}

// unregisterPlugin removes the stepPlugins entry from argo-rollouts-config and restarts the
// Rollouts controller, as the uninstall section's second step says.
func unregisterPlugin(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := e.c.Client(t)
	cm, err := cs.CoreV1().ConfigMaps(cluster.ControllerNamespace).Get(ctx, "argo-rollouts-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(cm.Data, "stepPlugins")
	if _, err := cs.CoreV1().ConfigMaps(cluster.ControllerNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctl.Restart(); err != nil {
		t.Fatal(err)
	}
}

// pluginError is the first sign that the Rollouts controller cannot run the plugin step: a
// Warning Event on the Rollout, or its status message, naming the plugin; "" when none.
func pluginError(a *app) string {
	a.t.Helper()
	list, err := a.kube.CoreV1().Events(a.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Name == a.name && strings.Contains(ev.Message, cluster.PluginName) {
			return fmt.Sprintf("Event %s: %s", ev.Reason, ev.Message)
		}
	}
	ro := a.get()
	if strings.Contains(ro.Status.Message, cluster.PluginName) {
		return "status: " + ro.Status.Message
	}
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Phase == v1alpha1.StepPluginPhaseFailed || s.Phase == v1alpha1.StepPluginPhaseError {
			return fmt.Sprintf("step %d %s: %s", s.Index, s.Phase, s.Message)
		}
	}
	return ""
}

func waitPluginError(t *testing.T, a *app, timeout time.Duration) string {
	t.Helper()
	var msg string
	eventually(t, timeout, "the Rollouts controller to report the unregistered plugin", func() (bool, string) {
		msg = pluginError(a)
		return msg != "", cluster.RolloutState(a.get())
	})
	return msg
}
