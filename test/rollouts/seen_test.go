package rollouts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestWhatAUserSees pins the rows of docs/step.md's "What a user sees where" that the Rollout
// object carries, with the real Rollouts controller: for a successful and for a failed step
// first in the canary, the step's own status, the Rollout's phase and message (what
// `kubectl argo rollouts get`, the dashboard and Argo CD's health check show), the step index,
// and the Events on the Rollout, ours and the controller's.
func TestWhatAUserSees(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	for _, failing := range []bool{false, true} {
		name := map[bool]string{false: "successful", true: "failed"}[failing]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			steps := func(a *app, rev int) []v1alpha1.CanaryStep {
				s := stepsPluginFirst(a, rev)
				if failing && rev >= 2 {
					// Revision 2's step names revision 1's objects, which its pod template
					// does not use: the plugin refuses.
					s[0] = a.pluginStep(rev - 1)
				}
				return s
			}
			a := newApp(t, e, e.namespace(t), "web", steps)
			a.createConfig(1)
			a.deploy(1)
			a.waitHealthy(1)
			a.createConfig(2)
			a.deploy(2)
			eventually(t, 90*time.Second, "the step's outcome", func() (bool, string) {
				ro := a.get()
				if failing {
					return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, string(ro.Status.Phase)
				}
				return ro.Status.Phase == v1alpha1.RolloutPhasePaused && len(ro.Status.PauseConditions) > 0, string(ro.Status.Phase)
			})
			ro := a.get()
			run := stepPluginStatus(ro, "Run", 0)
			if run == nil {
				t.Fatalf("no Run status of step 0 in %+v", ro.Status.Canary.StepPluginStatuses)
			}
			plugins := fmt.Sprintf("(%s)", cluster.PluginName)
			var wantEvents []string
			if failing {
				if run.Phase != v1alpha1.StepPluginPhaseFailed || !strings.Contains(run.Message, "nothing was written") || run.Status != nil {
					t.Errorf("step status: phase %s, message %q, status %s; want Failed, our refusal (… nothing was written …), no status", run.Phase, run.Message, run.Status)
				}
				want := "RolloutAborted: Rollout aborted update to revision 2: Step Plugin 1 " + plugins + " failed: " + run.Message
				if ro.Status.Message != want {
					t.Errorf("status.message\n%q\nwant\n%q", ro.Status.Message, want)
				}
				if ro.Status.CurrentStepIndex == nil || *ro.Status.CurrentStepIndex != 0 {
					t.Errorf("currentStepIndex %v, want 0 (get rollout: Step 0/3)", ro.Status.CurrentStepIndex)
				}
				wantEvents = []string{
					"Warning " + plugin.ReasonAttachFailed + " " + run.Message,
					"Warning StepPluginTransition Step plugin " + cluster.PluginName + " (step 1) transitioned to Failed",
					"Warning RolloutAborted " + strings.TrimPrefix(want, "RolloutAborted: "),
				}
			} else {
				if run.Phase != v1alpha1.StepPluginPhaseSuccessful || !strings.HasPrefix(run.Message, "attached ") || run.Status == nil {
					t.Errorf("step status: phase %s, message %q, status %s; want Successful, attached …, a status", run.Phase, run.Message, run.Status)
				}
				if ro.Status.Message != "CanaryPauseStep" {
					t.Errorf("status.message %q, want CanaryPauseStep (our message is not shown)", ro.Status.Message)
				}
				if ro.Status.CurrentStepIndex == nil || *ro.Status.CurrentStepIndex != 2 {
					t.Errorf("currentStepIndex %v, want 2 (get rollout: Step 2/3)", ro.Status.CurrentStepIndex)
				}
				wantEvents = []string{
					"Normal " + plugin.ReasonAttached + " " + run.Message,
					"Normal RolloutStepCompleted Rollout step 1/3 completed (plugin: " + cluster.PluginName + ")",
				}
			}
			// Events are written asynchronously by both processes, and their timestamps have
			// seconds only (an order within a second is not kept): wait for each.
			eventually(t, 30*time.Second, "the Events of docs/step.md", func() (bool, string) {
				got := rolloutEvents(t, a)
				for _, w := range wantEvents {
					if !slices.Contains(got, w) {
						return false, fmt.Sprintf("no %q in %q", w, got)
					}
				}
				return true, ""
			})
		})
	}
}

func stepPluginStatus(ro *v1alpha1.Rollout, op v1alpha1.StepPluginOperation, index int32) *v1alpha1.StepPluginStatus {
	for i, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Operation == op && s.Index == index {
			return &ro.Status.Canary.StepPluginStatuses[i]
		}
	}
	return nil
}

// rolloutEvents are the Events on a's Rollout, as "type reason message".
func rolloutEvents(t *testing.T, a *app) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := a.kube.CoreV1().Events(a.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Rollout,involvedObject.name=" + a.name})
	if err != nil {
		t.Fatalf("listing Events: %v", err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Type+" "+ev.Reason+" "+ev.Message)
	}
	return out
}
