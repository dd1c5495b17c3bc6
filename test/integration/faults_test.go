package integration

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// FaultWorld is a Rollout whose current ReplicaSet uses n ConfigMaps.
type FaultWorld struct {
	e     *Env
	ro    *v1alpha1.Rollout
	rs    *appsv1.ReplicaSet
	names []string
	data  map[string]string // name → the data it was created with
}

func NewFaultWorld(t *testing.T, e *Env, n int) *FaultWorld {
	w := &FaultWorld{e: e, ro: e.Rollout("web"), data: map[string]string{}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cfg-%03d", i)
		w.names = append(w.names, name)
		w.data[name] = e.ConfigMap(name).Data["app.yaml"]
	}
	w.rs = e.ReplicaSet(w.ro, "cur111", PodSpec(w.names, nil))
	return w
}

// Check: every object exists, is owned exactly once by the ReplicaSet, data unchanged.
func (w *FaultWorld) Check(t *testing.T) {
	t.Helper()
	list, err := w.e.Admin.CoreV1().ConfigMaps(w.e.NS).List(Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		got[cm.Name] = cm
	}
	for _, n := range w.names {
		cm, ok := got[n]
		if !ok {
			t.Errorf("%s was deleted", n)
			continue
		}
		if cm.Data["app.yaml"] != w.data[n] || len(cm.Data) != 1 {
			t.Errorf("%s data changed: %v", n, cm.Data)
		}
		count := 0
		for _, r := range cm.OwnerReferences {
			if r.UID == w.rs.UID {
				count++
			}
		}
		if count != 1 || len(cm.OwnerReferences) != 1 {
			t.Errorf("%s owners %v, want the ReplicaSet exactly once", n, cm.OwnerReferences)
		}
	}
}

// RetryLikeController calls Run until it is no longer an error result, as the controller does
// (it waits 30 s between tries; here 200 ms), and returns the final result.
func RetryLikeController(t *testing.T, call func() (types.RpcStepResult, types.RpcError)) (types.RpcStepResult, int) {
	t.Helper()
	for i := 1; i <= 60; i++ {
		res, rerr := call()
		if !rerr.HasError() {
			return res, i
		}
		t.Logf("try %d: error result (the controller retries): %v", i, rerr)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the step never stopped erroring")
	return types.RpcStepResult{}, 0
}

// TestAPIServerStoppedMidStep: the apiserver stops after some of 120 patches; the step returns
// an error result (never Failed), and once the apiserver is back the controller's retry ends
// Successful with no duplicate or missing reference and no data changed.
func TestAPIServerStoppedMidStep(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	if err := cluster.InstallRolloutCRD(c); err != nil {
		t.Fatal(err)
	}
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	w := NewFaultWorld(t, e, 120)

	var patches atomic.Int32
	var stopOnce sync.Once
	stopped := make(chan struct{})
	faulty := rest.CopyConfig(cfg)
	faulty.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return RoundTrip(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && patches.Add(1) == 30 {
				stopOnce.Do(func() {
					go func() {
						if err := c.StopAPIServer(); err != nil {
							t.Errorf("stop apiserver: %v", err)
						}
						close(stopped)
					}()
				})
			}
			return rt.RoundTrip(r)
		})
	})
	s := NewStep(faulty)
	s.Concurrency = 2 // slow enough that the stop lands mid-step
	call := func() (types.RpcStepResult, types.RpcError) {
		return s.Run(cluster.AsController(w.ro, w.rs), StepCtxFor(t, map[string]any{"configMaps": w.names}))
	}
	res, rerr := call()
	<-stopped
	if !rerr.HasError() && res.Phase == types.PhaseSuccessful {
		// All patches finished before the stop took effect: still a valid run, but say so.
		t.Logf("the step finished before the apiserver stopped")
	} else if res.Phase == types.PhaseFailed {
		t.Fatalf("an outage must not fail the step: %s", res.Message)
	}
	t.Logf("patches sent before/while stopping: %d; first result: phase %q err %v", patches.Load(), res.Phase, rerr)
	// While it is down, retries keep returning error results.
	if res, rerr := call(); !rerr.HasError() || res.Phase == types.PhaseFailed {
		t.Fatalf("with the apiserver down: phase %q err %v", res.Phase, rerr)
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	res, tries := RetryLikeController(t, call)
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("after the restart: %s: %s", res.Phase, res.Message)
	}
	t.Logf("Successful after %d controller retries", tries)
	w.Check(t)
}

// TestThrottledAPIServer: with very low in-flight limits the apiserver answers 429s; the plugin
// on a non-admin identity (system:masters is exempt from these limits) retries and ends right.
func TestThrottledAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{ExtraAPIServerArgs: []string{
		"--enable-priority-and-fairness=false", "--max-requests-inflight=1", "--max-mutating-requests-inflight=1"}})
	if err := cluster.InstallRolloutCRD(c); err != nil {
		t.Fatal(err)
	}
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	w := NewFaultWorld(t, e, 100)
	counter := cluster.NewCounter()
	var throttled atomic.Int32
	counted := counter.Wrap(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return RoundTrip(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				throttled.Add(1)
			}
			return resp, err
		})
	})
	s := NewStep(counted)
	s.Concurrency = 16
	// Other clients load the apiserver at the same time, as other controllers would.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = e.Admin.CoreV1().ConfigMaps(e.NS).List(Ctx(t), metav1.ListOptions{})
				}
			}
		}()
	}
	res, tries := RetryLikeController(t, func() (types.RpcStepResult, types.RpcError) {
		return s.Run(cluster.AsController(w.ro, w.rs), StepCtxFor(t, map[string]any{"configMaps": w.names}))
	})
	close(stop)
	wg.Wait()
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s: %s", res.Phase, res.Message)
	}
	t.Logf("429 answers: %d; controller tries: %d; requests: %s", throttled.Load(), tries, counter)
	if throttled.Load() == 0 {
		t.Log("no 429 was provoked this time (the limits were not hit)")
	}
	w.Check(t)
}

// TestConflictWithGarbageCollector: while the step adds owners, the garbage collector edits
// the same owner lists (removing a deleted ReplicaSet's references). The merge by UID never
// loses either side's edit, and no object is deleted.
func TestConflictWithGarbageCollector(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	var names []string
	for i := 0; i < 40; i++ {
		names = append(names, fmt.Sprintf("cfg-%02d", i))
	}
	gone := e.ReplicaSet(ro, "gone00", PodSpec(names, nil))
	keep := e.ReplicaSet(ro, "keep00", PodSpec(names, nil))
	cur := e.ReplicaSet(ro, "cur000", PodSpec(names, nil))
	for _, n := range names {
		f := false
		e.ConfigMap(n,
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: gone.Name, UID: gone.UID, Controller: &f},
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: keep.Name, UID: keep.UID, Controller: &f})
	}
	// Delete "gone" and run the step at the same time.
	done := make(chan types.RpcStepResult)
	go func() {
		done <- Run(t, NewStep(cfg), ro, "cur000", map[string]any{"configMaps": names})
	}()
	e.DeleteRS(gone)
	MustSucceed(t, <-done)
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range names {
		for {
			uids, _, err := e.OwnerUIDs("cm", n)
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if !uids[string(gone.UID)] {
				if !uids[string(keep.UID)] || !uids[string(cur.UID)] || len(uids) != 2 {
					t.Errorf("%s owners %v, want keep and cur", n, uids)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the garbage collector did not remove the deleted owner: %v", n, uids)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

type RoundTrip func(*http.Request) (*http.Response, error)

func (f RoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func StepCtxFor(t *testing.T, config map[string]any) *types.RpcStepContext {
	t.Helper()
	raw, err := JSONMarshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: raw}
}
