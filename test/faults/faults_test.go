package faults

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestAPIServerStoppedMidStep: the apiserver stops after some of 120 patches; the step returns
// an error result (never Failed), and once the apiserver is back the controller's retry ends
// Successful with no duplicate or missing reference and no data changed.
func TestAPIServerStoppedMidStep(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	if err := cluster.InstallRolloutCRD(c); err != nil {
		t.Fatal(err)
	}
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	w := realapi.NewFaultWorld(t, e, 120)

	var patches atomic.Int32
	var stopOnce sync.Once
	stopped := make(chan struct{})
	faulty := rest.CopyConfig(cfg)
	faulty.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return realapi.RoundTrip(func(r *http.Request) (*http.Response, error) {
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
	s := realapi.NewStep(faulty)
	s.Concurrency = 2 // slow enough that the stop lands mid-step
	call := func() (types.RpcStepResult, types.RpcError) {
		return s.Run(cluster.AsController(w.Rollout, w.ReplicaSet), realapi.StepCtxFor(t, map[string]any{"configMaps": w.Names}))
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
	res, tries := realapi.RetryLikeController(t, call)
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
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	w := realapi.NewFaultWorld(t, e, 100)
	counter := cluster.NewCounter()
	var throttled atomic.Int32
	counted := counter.Wrap(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return realapi.RoundTrip(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				throttled.Add(1)
			}
			return resp, err
		})
	})
	s := realapi.NewStep(counted)
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
					_, _ = e.Admin.CoreV1().ConfigMaps(e.NS).List(realapi.Ctx(t), metav1.ListOptions{})
				}
			}
		}()
	}
	res, tries := realapi.RetryLikeController(t, func() (types.RpcStepResult, types.RpcError) {
		return s.Run(cluster.AsController(w.Rollout, w.ReplicaSet), realapi.StepCtxFor(t, map[string]any{"configMaps": w.Names}))
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
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	var names []string
	for i := 0; i < 40; i++ {
		names = append(names, fmt.Sprintf("cfg-%02d", i))
	}
	gone := e.ReplicaSet(ro, "gone00", realapi.PodSpec(names, nil))
	keep := e.ReplicaSet(ro, "keep00", realapi.PodSpec(names, nil))
	cur := e.ReplicaSet(ro, "cur000", realapi.PodSpec(names, nil))
	for _, n := range names {
		f := false
		e.ConfigMap(n,
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: gone.Name, UID: gone.UID, Controller: &f},
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: keep.Name, UID: keep.UID, Controller: &f})
	}
	// Delete "gone" and run the step at the same time.
	done := make(chan types.RpcStepResult)
	go func() {
		done <- realapi.Run(t, realapi.NewStep(cfg), ro, "cur000", map[string]any{"configMaps": names})
	}()
	e.DeleteRS(gone)
	realapi.MustSucceed(t, <-done)
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
