package step

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// shortCreationWait replaces the 5 s wait for a listed object not created yet: the unit tests'
// fakes never create one late (unless a test says so).
const shortCreationWait = 50 * time.Millisecond

func newStep(c kubernetes.Interface) *Step {
	return &Step{Client: func() (plugin.Clients, error) { return clientsOf(c), nil }, Concurrency: 4, Log: quietLog(),
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4}, CreationWait: shortCreationWait}
}

func stepCtx(config string) *types.RpcStepContext {
	return &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: json.RawMessage(config)}
}

func TestRunAttachesToCurrentReplicaSet(t *testing.T) {
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: "keeper", UID: "uid-svc"}
	c := world(fixtures.ConfigMap("cfg-shared", other))
	// cfg-shared is mounted by the current template too.
	rs, _ := c.AppsV1().ReplicaSets(testNS).Get(t.Context(), "web-"+curHash, metav1.GetOptions{})
	rs.Spec.Template.Spec.Volumes = append(rs.Spec.Template.Spec.Volumes, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg-shared"}}}})
	if _, err := c.AppsV1().ReplicaSets(testNS).Update(t.Context(), rs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.ClearActions()

	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new","cfg-shared"],"secrets":["sec-new"]}`))
	if rerr.HasError() {
		t.Fatal(rerr)
	}
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
	if want := "attached 2 ConfigMaps and 1 Secret to ReplicaSet web-" + curHash; res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
	actions := c.Actions()
	var st Status
	if err := json.Unmarshal(res.Status, &st); err != nil || st.ReplicaSet != "web-"+curHash || st.ReplicaSetUID != "uid-cur" || len(st.ConfigMaps) != 2 || len(st.Secrets) != 1 {
		t.Errorf("status %s (%v)", res.Status, err)
	}
	for _, o := range []plugin.Object{{Kind: plugin.KindConfigMap, Name: "cfg-new"}, {Kind: plugin.KindConfigMap, Name: "cfg-shared"}, {Kind: plugin.KindSecret, Name: "sec-new"}} {
		if !hasOwner(owners(t, c, o.Kind, o.Name), "uid-cur") {
			t.Errorf("%s: owner references %v lack the current ReplicaSet", o, owners(t, c, o.Kind, o.Name))
		}
	}
	if refs := owners(t, c, plugin.KindConfigMap, "cfg-shared"); len(refs) != 2 || !(refs[0].UID == "uid-svc" || refs[1].UID == "uid-svc") {
		t.Errorf("existing owner not kept: %v", refs)
	}
	// Exactly one list and one patch per object; no get, no update.
	var lists, patches int
	for _, a := range actions {
		switch a.GetVerb() {
		case "list":
			lists++
		case "patch":
			patches++
			p := a.(k8stesting.PatchAction)
			if p.GetPatchType() != "application/strategic-merge-patch+json" {
				t.Errorf("patch type %s", p.GetPatchType())
			}
			var body map[string]map[string]any
			if err := json.Unmarshal(p.GetPatch(), &body); err != nil || len(body) != 1 || len(body["metadata"]) != 1 {
				t.Errorf("patch must carry only metadata.ownerReferences: %s", p.GetPatch())
			}
		default:
			t.Errorf("unexpected %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	// The Rollout's own ReplicaSets, then (no controller maintains the objects) the
	// namespace's users: ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
	// ControllerRevisions, Pods (metadata).
	if lists != 8 || patches != 3 {
		t.Errorf("lists=%d patches=%d, want 8 and 3", lists, patches)
	}
	cm, _ := c.CoreV1().ConfigMaps(testNS).Get(t.Context(), "cfg-new", metav1.GetOptions{})
	if cm.Data["app.yaml"] != "color: blue" || cm.Labels["team"] != "shop" || cm.Annotations["note"] != "keep" {
		t.Errorf("data, labels or annotations changed: %+v", cm)
	}
	// A second run is a no-op for the data: the same single owner entry.
	if res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`)); res.Phase != types.PhaseSuccessful {
		t.Fatal(res.Message)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "cfg-new"); len(refs) != 1 {
		t.Errorf("second run duplicated the reference: %v", refs)
	}
}

func TestRunRefusesUnreferenced(t *testing.T) {
	c := world(fixtures.ConfigMap("unrelated"))
	c.ClearActions()
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new","unrelated"]}`))
	if rerr.HasError() || res.Phase != types.PhaseFailed {
		t.Fatalf("phase %s, err %v", res.Phase, rerr)
	}
	for _, w := range []string{"ConfigMap unrelated", "allowUnreferenced: true", "web-" + curHash} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
	if n := writes(c); n != 0 {
		t.Errorf("a refused step wrote %d times", n)
	}
	// Opting out attaches it.
	res, _ = newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["unrelated"],"allowUnreferenced":true}`))
	if res.Phase != types.PhaseSuccessful || !hasOwner(owners(t, c, plugin.KindConfigMap, "unrelated"), "uid-cur") {
		t.Errorf("allowUnreferenced: %s %s", res.Phase, res.Message)
	}
}

// TestRunRollbackSkips: undo re-runs the newest list against the older ReplicaSet.
func TestRunRollbackSkips(t *testing.T) {
	c := world()
	res, rerr := newStep(c).Run(fixtures.Rollout(oldHash), stepCtx(`{"configMaps":["cfg-new","static"],"secrets":["sec-new"]}`))
	if rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("phase %s: %s %v", res.Phase, res.Message, rerr)
	}
	if !strings.Contains(res.Message, "skipped ConfigMap cfg-new") || !strings.Contains(res.Message, "web-"+curHash) {
		t.Errorf("message %q", res.Message)
	}
	if hasOwner(owners(t, c, plugin.KindConfigMap, "cfg-new"), "uid-old") || hasOwner(owners(t, c, plugin.KindSecret, "sec-new"), "uid-old") {
		t.Error("objects of the newer ReplicaSet were attached to the older one")
	}
	if !hasOwner(owners(t, c, plugin.KindConfigMap, "static"), "uid-old") {
		t.Error("static is used by the old ReplicaSet and must be attached")
	}
	var st Status
	_ = json.Unmarshal(res.Status, &st)
	if len(st.Skipped) != 2 {
		t.Errorf("status skipped %v", st.Skipped)
	}
}

func TestRunIgnoresForeignReplicaSets(t *testing.T) {
	// Same labels, other owner: must not be treated as the target.
	c := fake.NewClientset(fixtures.ReplicaSet(curHash, "uid-foreign", "other-rollout", fixtures.PodSpec([]string{"cfg-new"}, nil)), fixtures.ConfigMap("cfg-new"))
	now := time.Now()
	s := newStep(c)
	s.Now = func() time.Time { return now }
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseRunning || writes(c) != 0 {
		t.Errorf("phase %s (%s), writes %d", res.Phase, res.Message, writes(c))
	}
}

func TestRunWaitsThenTimesOut(t *testing.T) {
	c := fake.NewClientset(fixtures.ConfigMap("cfg-new"))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	s := newStep(c)
	s.Now = func() time.Time { return now }
	sc := stepCtx(`{"configMaps":["cfg-new"],"timeout":"1m"}`)
	res, rerr := s.Run(fixtures.Rollout(curHash), sc)
	if rerr.HasError() || res.Phase != types.PhaseRunning || res.RequeueAfter <= 10*time.Second {
		t.Fatalf("want Running with RequeueAfter > 10s, got %s %v %v", res.Phase, res.RequeueAfter, rerr)
	}
	if !strings.Contains(res.Message, "rollouts-pod-template-hash="+curHash) {
		t.Errorf("message %q", res.Message)
	}
	sc.Status = res.Status
	now = start.Add(30 * time.Second)
	res, _ = s.Run(fixtures.Rollout(curHash), sc)
	if res.Phase != types.PhaseRunning {
		t.Fatalf("still within the timeout: %s", res.Phase)
	}
	sc.Status = res.Status
	now = start.Add(61 * time.Second)
	res, _ = s.Run(fixtures.Rollout(curHash), sc)
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "timed out after 1m1s waiting for ReplicaSet") {
		t.Errorf("phase %s: %s", res.Phase, res.Message)
	}
	// An empty currentPodHash is waited for too.
	res, _ = s.Run(fixtures.Rollout(""), stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseRunning || !strings.Contains(res.Message, "currentPodHash") {
		t.Errorf("empty hash: %s %s", res.Phase, res.Message)
	}
}

func TestRunMissingObjects(t *testing.T) {
	c := world()
	// The current template uses two more objects that do not exist.
	rs, _ := c.AppsV1().ReplicaSets(testNS).Get(t.Context(), "web-"+curHash, metav1.GetOptions{})
	rs.Spec.Template.Spec = fixtures.PodSpec([]string{"cfg-new", "cfg-gone"}, []string{"sec-gone"})
	_, _ = c.AppsV1().ReplicaSets(testNS).Update(t.Context(), rs, metav1.UpdateOptions{})
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new","cfg-gone"],"secrets":["sec-gone"]}`))
	if rerr.HasError() || res.Phase != types.PhaseFailed {
		t.Fatalf("%s %v", res.Phase, rerr)
	}
	for _, w := range []string{"ConfigMap cfg-gone", "Secret sec-gone", "not found in namespace shop", "written before the failure, and correct: ConfigMap cfg-new ← web-7f9c2d"} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
}

func TestRunForbidden(t *testing.T) {
	c := world()
	c.PrependReactor("patch", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "sec-new", errors.New("RBAC: access denied"))
	})
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"],"secrets":["sec-new"]}`))
	if rerr.HasError() || res.Phase != types.PhaseFailed {
		t.Fatalf("%s %v", res.Phase, rerr)
	}
	for _, w := range []string{"forbidden to patch Secret sec-new", "verb patch on secrets", plugin.RBACHint} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
}

// TestRunTransientErrors: transient failures are retried inside the call; if they persist
// the result is an error (the controller retries), never Failed.
func TestRunTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "cfg-new", errors.New("changed"))},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1)},
		{"server error", apierrors.NewInternalError(errors.New("etcd hiccup"))},
		{"unavailable", apierrors.NewServiceUnavailable("restarting")},
		{"connection refused", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := world()
			var calls atomic.Int32
			c.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if calls.Add(1) <= 2 {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
			if rerr.HasError() || res.Phase != types.PhaseSuccessful {
				t.Fatalf("two transient errors must be retried within the call: %s %s %v", res.Phase, res.Message, rerr)
			}
			c2 := world()
			c2.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			res, rerr = newStep(c2).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
			if !rerr.HasError() || res.Phase == types.PhaseFailed {
				t.Fatalf("a persistent transient error must be an error result, got %s %v", res.Phase, rerr)
			}
		})
	}
	// A list that keeps failing is an error result too.
	c := world()
	c.PrependReactor("list", "replicasets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "replicasets"}, "list", 1)
	})
	if _, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`)); !rerr.HasError() {
		t.Error("list timeout must be an error result")
	}
}

func TestRunClientErrorAndBadConfig(t *testing.T) {
	calls := 0
	s := &Step{Client: func() (plugin.Clients, error) { calls++; return plugin.Clients{}, errors.New("no kubeconfig") }, Log: quietLog(),
		CreationWait: shortCreationWait}
	res, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["a"]}`))
	if !rerr.HasError() || !strings.Contains(rerr.Error(), "no kubeconfig") || res.Phase == types.PhaseFailed {
		t.Errorf("client error: %s %v", res.Phase, rerr)
	}
	// Bad config fails before any client is needed.
	res, rerr = s.Run(fixtures.Rollout(curHash), stepCtx(`{"configmaps":["a"]}`))
	if rerr.HasError() || res.Phase != types.PhaseFailed || !strings.Contains(res.Message, `did you mean "configMaps"`) {
		t.Errorf("bad config: %s %s %v", res.Phase, res.Message, rerr)
	}
	if calls != 1 {
		t.Errorf("client built %d times, want 1", calls)
	}
	if res, rerr := s.Run(nil, nil); rerr.HasError() || res.Phase != types.PhaseFailed {
		t.Errorf("nil input: %s %v", res.Phase, rerr)
	}
}

func TestAbortTerminateChangeNothing(t *testing.T) {
	c := world()
	s := newStep(c)
	for _, f := range []func() (types.RpcStepResult, types.RpcError){
		func() (types.RpcStepResult, types.RpcError) { return s.Abort(fixtures.Rollout(curHash), stepCtx(`{}`)) },
		func() (types.RpcStepResult, types.RpcError) {
			return s.Terminate(fixtures.Rollout(curHash), stepCtx(`{}`))
		},
	} {
		res, rerr := f()
		if rerr.HasError() || res.Phase != types.PhaseSuccessful {
			t.Errorf("%s %v", res.Phase, rerr)
		}
	}
	if len(c.Actions()) != 0 {
		t.Errorf("Abort/Terminate made API calls: %v", c.Actions())
	}
}

func TestRunTerminatingReplicaSet(t *testing.T) {
	rs := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, nil))
	rs.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	rs.Finalizers = []string{"x"}
	c := fake.NewClientset(rs, fixtures.ConfigMap("cfg-new"))
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseFailed || writes(c) != 0 {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
}

// TestRunConcurrent: one Step serves many Rollouts at once (run with -race).
func TestRunConcurrent(t *testing.T) {
	c := world()
	s := newStep(c)
	done := make(chan types.RpcStepResult)
	for i := 0; i < 20; i++ {
		go func(i int) {
			hash := curHash
			if i%2 == 0 {
				hash = oldHash
			}
			res, _ := s.Run(fixtures.Rollout(hash), stepCtx(`{"configMaps":["static"]}`))
			done <- res
		}(i)
	}
	for i := 0; i < 20; i++ {
		if res := <-done; res.Phase != types.PhaseSuccessful {
			t.Errorf("%s %s", res.Phase, res.Message)
		}
	}
	refs := owners(t, c, plugin.KindConfigMap, "static")
	if !hasOwner(refs, "uid-cur") || !hasOwner(refs, "uid-old") || len(refs) != 2 {
		t.Errorf("static owners %v", refs)
	}
}

// TestRunPanicInPatchGoroutine: a panic in a patch goroutine is outside the RPC layer's
// recover; it must become an error result, not kill the shared plugin process.
func TestRunPanicInPatchGoroutine(t *testing.T) {
	c := world()
	c.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) { panic("bug") })
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	if !rerr.HasError() || !strings.Contains(rerr.Error(), "internal error patching ConfigMap cfg-new") || res.Phase == types.PhaseFailed {
		t.Errorf("%s %v", res.Phase, rerr)
	}
}

// TestRunStopsAfterPersistentTransientError: when the apiserver is unreachable, the patches
// not yet sent are abandoned instead of each waiting out its own retries.
func TestRunStopsAfterPersistentTransientError(t *testing.T) {
	var names []string
	var objs []runtime.Object
	for i := 0; i < 50; i++ {
		n := "cfg-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		names = append(names, n)
		objs = append(objs, fixtures.ConfigMap(n))
	}
	objs = append(objs, fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec(names, nil)))
	c := fake.NewClientset(objs...)
	var calls atomic.Int32
	c.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	})
	cfg, _ := json.Marshal(map[string]any{"configMaps": names})
	s := newStep(c)
	s.Concurrency = 2
	_, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(string(cfg)))
	if !rerr.HasError() {
		t.Fatal("want an error result")
	}
	if n := calls.Load(); n > 2*4+2 {
		t.Errorf("%d patch attempts for 50 objects: the rest should have been abandoned", n)
	}
}

// Shorthands for the shared fixtures.
const (
	curHash = fixtures.CurHash
	oldHash = fixtures.OldHash
)

var (
	world    = fixtures.World
	quietLog = fixtures.QuietLog
	hasOwner = fixtures.HasOwner
	writes   = fixtures.Writes
)

func owners(t *testing.T, c kubernetes.Interface, kind plugin.Kind, name string) []metav1.OwnerReference {
	return fixtures.Owners(t, c, kind == plugin.KindSecret, name)
}
