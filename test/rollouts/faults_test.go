package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestPluginProcessKilledMidStep: the plugin process is SIGKILLed while a step is patching
// 200 ConfigMaps. The controller records an Error, restarts the plugin on its next try, and the
// step ends Successful: every object owned exactly once by the ReplicaSet, data unchanged.
// Not parallel: it kills the shared plugin process.
func TestPluginProcessKilledMidStep(t *testing.T) {
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "bulk", stepsPluginFirst)
	a.replicas = 1
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)

	for attempt, rev := 1, 2; attempt <= 3; attempt, rev = attempt+1, rev+1 {
		var bulk []string
		for i := 0; i < 200; i++ {
			name := fmt.Sprintf("bulk-r%d-%03d", rev, i)
			bulk = append(bulk, name)
			if _, err := a.kube.CoreV1().ConfigMaps(a.ns).Create(testCtx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
				Data: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		a.createConfig(rev)

		// Kill the plugin at the first owner reference written for this revision.
		w, err := a.kube.CoreV1().ConfigMaps(a.ns).Watch(testCtx(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var killed []int
		var mu sync.Mutex
		go func() {
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if ev.Type != watch.Modified || !ok || !strings.HasPrefix(cm.Name, fmt.Sprintf("bulk-r%d-", rev)) || len(cm.OwnerReferences) == 0 {
					continue
				}
				mu.Lock()
				for _, pid := range e.ctl.PluginPIDs() {
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						killed = append(killed, pid)
					}
				}
				mu.Unlock()
				w.Stop()
				return
			}
		}()

		a.update(func(ro *v1alpha1.Rollout) {
			ro.Spec.Template = a.template(rev)
			for _, n := range bulk {
				ro.Spec.Template.Spec.Volumes = append(ro.Spec.Template.Spec.Volumes, corev1.Volume{Name: n,
					VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
			}
			cfg, _ := json.Marshal(map[string]any{"configMaps": append([]string{a.cm(rev)}, bulk...), "secrets": []string{a.secret(rev)}})
			steps := stepsPluginFirst(a, rev)
			steps[0].Plugin.Config = cfg
			ro.Spec.Strategy.Canary.Steps = steps
		})

		// Wait (past the controller's 30 s backoff after an Error) for Successful.
		var final *v1alpha1.StepPluginStatus
		sawError := false
		deadline := time.Now().Add(120 * time.Second)
		for time.Now().Before(deadline) {
			ro := a.get()
			rs := a.rsFor(rev)
			if s := stepRun(ro, 0); s != nil && rs != nil {
				sawError = sawError || s.Phase == v1alpha1.StepPluginPhaseError
				if s.Phase == v1alpha1.StepPluginPhaseFailed {
					t.Fatalf("the step failed: %s", s.Message)
				}
				var st stepStatus
				_ = json.Unmarshal(s.Status, &st)
				if s.Phase == v1alpha1.StepPluginPhaseSuccessful && st.ReplicaSet == rs.Name {
					final = s
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		w.Stop()
		if final == nil {
			t.Fatalf("revision %d: the step did not end Successful after the plugin was killed: %s\ncontroller log:\n%s", rev, cluster.RolloutState(a.get()), e.ctl.LogTail(40))
		}
		mu.Lock()
		pids := append([]int(nil), killed...)
		mu.Unlock()
		t.Logf("revision %d: killed plugin pids %v mid-step; saw Error: %v; executions: %d; final: %s", rev, pids, sawError, final.Executions, final.Message)

		// Every object owned exactly once by this revision's ReplicaSet, data unchanged.
		rs := a.rsFor(rev)
		list, err := a.kube.CoreV1().ConfigMaps(a.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owned := 0
		for _, cm := range list.Items {
			if !strings.HasPrefix(cm.Name, fmt.Sprintf("bulk-r%d-", rev)) {
				continue
			}
			if cm.Data["k"] != cm.Name || len(cm.Data) != 1 {
				t.Errorf("%s data changed: %v", cm.Name, cm.Data)
			}
			if len(cm.OwnerReferences) != 1 || !ownedBy(cm.OwnerReferences, rs) {
				t.Errorf("%s owners %v, want %s once", cm.Name, cm.OwnerReferences, rs.Name)
			}
			owned++
		}
		if owned != 200 {
			t.Errorf("%d of 200 objects present", owned)
		}
		if len(pids) > 0 && sawError && final.Executions > 1 {
			if len(e.ctl.PluginPIDs()) == 0 {
				t.Error("no plugin process after the controller's retry")
			}
			return // the kill landed mid-step and the step recovered
		}
		t.Logf("attempt %d: the kill did not land mid-step (the step finished first); trying another revision", attempt)
		a.promoteFull()
		a.waitHealthy(rev)
	}
	t.Fatal("the plugin could not be killed mid-step in 3 attempts")
}
