package step

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

var aged = fixtures.Aged

// timeline: rev-a (oldest, cfg-a), rev-b (cfg-b, shared), rev-c (newest, cfg-c, shared).
func timeline(extra ...runtime.Object) *fake.Clientset {
	objs := []runtime.Object{
		aged("rev-a", "uid-a", 0, fixtures.PodSpec([]string{"cfg-a"}, nil)),
		aged("rev-b", "uid-b", time.Minute, fixtures.PodSpec([]string{"cfg-b", "shared"}, nil)),
		aged("rev-c", "uid-c", 2*time.Minute, fixtures.PodSpec([]string{"cfg-c", "shared"}, nil)),
		fixtures.ConfigMap("cfg-a"), fixtures.ConfigMap("cfg-b"), fixtures.ConfigMap("cfg-c"), fixtures.ConfigMap("shared"),
	}
	return fake.NewClientset(append(objs, extra...)...)
}

func patchesOf(c *fake.Clientset) map[string]string {
	out := map[string]string{}
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out[p.GetResource().Resource+"/"+p.GetName()] = string(p.GetPatch())
		}
	}
	return out
}

// TestRuleTable runs every row of the README's table through the step.
func TestRuleTable(t *testing.T) {
	for _, tc := range []struct {
		name, target, config string
		phase                types.StepPhase
		want                 []string // in the message
		patched              []string // resource/name patched
		owners               map[string][]k8stypes.UID
	}{
		{name: "referenced by the target: target and every other user in one patch", target: "rev-b", config: `{"configMaps":["shared"]}`,
			phase: types.PhaseSuccessful, want: []string{"attached 1 ConfigMap to ReplicaSet web-rev-b"},
			patched: []string{"configmaps/shared"}, owners: map[string][]k8stypes.UID{"shared": {"uid-b", "uid-c"}}},
		{name: "used only by newer ReplicaSets: rollback, skipped", target: "rev-a", config: `{"configMaps":["cfg-a","cfg-c"]}`,
			phase: types.PhaseSuccessful, want: []string{"skipped ConfigMap cfg-c", "web-rev-c, created after it", "rollback"},
			patched: []string{"configmaps/cfg-a"}, owners: map[string][]k8stypes.UID{"cfg-a": {"uid-a"}}},
		{name: "undo where nothing listed is used by the restored ReplicaSet", target: "rev-a", config: `{"configMaps":["cfg-c","shared"]}`,
			phase: types.PhaseSuccessful, want: []string{"attached nothing to ReplicaSet web-rev-a", "skipped ConfigMap cfg-c", "skipped ConfigMap shared"}},
		{name: "used only by older ReplicaSets and nothing listed used by the target: stale", target: "rev-c", config: `{"configMaps":["cfg-a","cfg-b"]}`,
			phase: types.PhaseFailed, want: []string{"the list is stale", "ReplicaSet web-rev-c", "ConfigMap cfg-a (used by web-rev-a)", "ConfigMap cfg-b (used by web-rev-b)"}},
		{name: "an older revision's object beside the target's: successful, said so", target: "rev-c", config: `{"configMaps":["cfg-c","cfg-a"]}`,
			phase: types.PhaseSuccessful, want: []string{"attached 1 ConfigMap to ReplicaSet web-rev-c", "skipped ConfigMap cfg-a", "only by the older web-rev-a"},
			patched: []string{"configmaps/cfg-c"}},
		{name: "used by no ReplicaSet: refused", target: "rev-c", config: `{"configMaps":["cfg-c","lonely"]}`,
			phase: types.PhaseFailed, want: []string{"refusing to attach ConfigMap lonely", "allowUnreferenced"}},
		{name: "used by no ReplicaSet, allowUnreferenced: the target only", target: "rev-c", config: `{"configMaps":["lonely"],"allowUnreferenced":true}`,
			phase: types.PhaseSuccessful, patched: []string{"configmaps/lonely"}, owners: map[string][]k8stypes.UID{"lonely": {"uid-c"}}},
		{name: "absent after the grace: fails naming it, siblings attached", target: "rev-c", config: `{"configMaps":["cfg-c","ghost"],"allowUnreferenced":true}`,
			phase: types.PhaseFailed, want: []string{"not found in namespace shop: ConfigMap ghost", "written before the failure, and correct: ConfigMap cfg-c ← web-rev-c"},
			patched: []string{"configmaps/cfg-c", "configmaps/ghost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := timeline(fixtures.ConfigMap("lonely"))
			c.ClearActions()
			res, rerr := newStep(c).Run(fixtures.Rollout("rev-"+strings.TrimPrefix(tc.target, "rev-")), stepCtx(tc.config))
			if rerr.HasError() || res.Phase != tc.phase {
				t.Fatalf("phase %s (%s), err %v; want %s", res.Phase, res.Message, rerr, tc.phase)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Message, w) {
					t.Errorf("message %q lacks %q", res.Message, w)
				}
			}
			got := patchesOf(c)
			if len(got) != len(tc.patched) {
				t.Errorf("patched %v, want %v", got, tc.patched)
			}
			for _, p := range tc.patched {
				if _, ok := got[p]; !ok {
					t.Errorf("%s not patched (patches: %v)", p, got)
				}
			}
			if tc.phase == types.PhaseFailed && len(tc.patched) == 0 && writes(c) != 0 {
				t.Errorf("a failed run wrote %d times", writes(c))
			}
			for name, want := range tc.owners {
				refs := owners(t, c, plugin.KindConfigMap, name)
				if len(refs) != len(want) {
					t.Errorf("%s owners %v, want %v", name, refs, want)
					continue
				}
				for _, uid := range want {
					if !hasOwner(refs, string(uid)) {
						t.Errorf("%s owners %v lack %s", name, refs, uid)
					}
				}
			}
		})
	}
}

// TestRollbackTieIsNotRollback: as in the controller's isRollbackWithinWindow, which compares
// creation times strictly, a ReplicaSet created in the same second as the target is not newer:
// a listed object only it uses is an older revision's, and with nothing else listed the list
// is stale (failed, nothing written), not a rollback that succeeds.
func TestRollbackTieIsNotRollback(t *testing.T) {
	c := fake.NewClientset(aged("rev-a", "uid-a", 0, fixtures.PodSpec([]string{"cfg-a"}, nil)), aged("rev-b", "uid-b", 0, fixtures.PodSpec([]string{"cfg-b"}, nil)), fixtures.ConfigMap("cfg-b"))
	res, _ := newStep(c).Run(fixtures.Rollout("rev-a"), stepCtx(`{"configMaps":["cfg-b"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "the list is stale") || writes(c) != 0 {
		t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
	}
	// One second later it is newer: a rollback, skipped.
	c = fake.NewClientset(aged("rev-a", "uid-a", 0, fixtures.PodSpec([]string{"cfg-a"}, nil)), aged("rev-b", "uid-b", time.Second, fixtures.PodSpec([]string{"cfg-b"}, nil)), fixtures.ConfigMap("cfg-b"))
	res, _ = newStep(c).Run(fixtures.Rollout("rev-a"), stepCtx(`{"configMaps":["cfg-b"]}`))
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "rollback") {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
}

func labelled(cm *corev1.ConfigMap) *corev1.ConfigMap {
	cm.Labels[plugin.OptInLabel] = "true"
	return cm
}

func TestRequireOptIn(t *testing.T) {
	c := timeline(labelled(fixtures.ConfigMap("cfg-c2")))
	rs, _ := c.AppsV1().ReplicaSets(testNS).Get(t.Context(), "web-rev-c", metav1.GetOptions{})
	rs.Spec.Template.Spec = fixtures.PodSpec([]string{"cfg-c", "cfg-c2", "shared"}, nil)
	_, _ = c.AppsV1().ReplicaSets(testNS).Update(t.Context(), rs, metav1.UpdateOptions{})
	s := newStep(c)
	s.Policy = plugin.Policy{RequireOptIn: true}
	c.ClearActions()
	res, _ := s.Run(fixtures.Rollout("rev-c"), stepCtx(`{"configMaps":["cfg-c","cfg-c2"]}`))
	if res.Phase != types.PhaseFailed {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	for _, w := range []string{"refusing to attach ConfigMap cfg-c:", "--require-opt-in", "kubectl label configmap cfg-c -n shop configmap-attacher/revisioned=true", "generatorOptions.labels"} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
	if strings.Contains(res.Message, "cfg-c2") {
		t.Errorf("the labelled object is named as refused: %s", res.Message)
	}
	if writes(c) != 0 {
		t.Errorf("refused run wrote %d times", writes(c))
	}
	// Labelled objects pass; discovery adopts only labelled objects even with its own selector.
	res, _ = s.Run(fixtures.Rollout("rev-c"), stepCtx(`{"configMaps":["cfg-c2"],"discover":{"selector":{"matchLabels":{"team":"shop"}}}}`))
	if res.Phase != types.PhaseSuccessful || !hasOwner(owners(t, c, plugin.KindConfigMap, "cfg-c2"), "uid-c") {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	for _, name := range []string{"cfg-a", "cfg-b", "cfg-c", "shared"} {
		if len(owners(t, c, plugin.KindConfigMap, name)) != 0 {
			t.Errorf("%s is not opted in but got an owner under the policy", name)
		}
	}
	// Without the policy, the same discovery selector adopts them.
	s.Policy = plugin.Policy{}
	res, _ = s.Run(fixtures.Rollout("rev-c"), stepCtx(`{"configMaps":["cfg-c2"],"discover":{"selector":{"matchLabels":{"team":"shop"}}}}`))
	if res.Phase != types.PhaseSuccessful || len(owners(t, c, plugin.KindConfigMap, "cfg-a")) != 1 {
		t.Errorf("planted check: without the policy discovery must adopt cfg-a: %s", res.Message)
	}
}

func TestCredentialsNotAttached(t *testing.T) {
	spec := fixtures.PodSpec([]string{"cfg"}, nil)
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-cred"}}}})
	labelledPull := fixtures.Secret("pull-2")
	labelledPull.Labels = map[string]string{plugin.OptInLabel: "true"}
	spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: "pull-2"})
	c := fake.NewClientset(aged("rev", "uid", 0, spec), fixtures.ConfigMap("cfg"), fixtures.Secret("pull"), fixtures.Secret("csi-cred"), labelledPull)
	c.ClearActions()
	res, _ := newStep(c).Run(fixtures.Rollout("rev"), stepCtx(`{"configMaps":["cfg"],"secrets":["pull","csi-cred","pull-2"]}`))
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	for _, w := range []string{"skipped Secret pull:", "skipped Secret csi-cred:", "only as a credential"} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
	got := patchesOf(c)
	if _, ok := got["secrets/pull"]; ok {
		t.Error("an image pull secret was attached")
	}
	if _, ok := got["secrets/csi-cred"]; ok {
		t.Error("a CSI secret was attached")
	}
	if _, ok := got["secrets/pull-2"]; !ok {
		t.Error("an opted-in pull secret must be attached")
	}
	if refs := plugin.CredentialOnly(&spec); !refs.Secrets["pull"] || !refs.Secrets["csi-cred"] || refs.Secrets["cfg"] {
		t.Errorf("CredentialOnly %v", refs.Secrets)
	}
}

// TestNeverAddDeletingOwner: a ReplicaSet with a deletionTimestamp is never added, neither for
// the explicit list nor by discovery.
func TestNeverAddDeletingOwner(t *testing.T) {
	dying := aged("rev-b", "uid-b", time.Minute, fixtures.PodSpec([]string{"shared", "cfg-b"}, nil))
	dying.DeletionTimestamp = &metav1.Time{Time: fixtures.T0.Add(time.Hour)}
	dying.Finalizers = []string{"foregroundDeletion"}
	c := fake.NewClientset(aged("rev-c", "uid-c", 2*time.Minute, fixtures.PodSpec([]string{"shared"}, nil)), dying, optedIn(fixtures.ConfigMap("shared")), optedIn(fixtures.ConfigMap("cfg-b")))
	res, _ := newStep(c).Run(fixtures.Rollout("rev-c"), stepCtx(`{"configMaps":["shared"],"discover":{}}`))
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "shared"); len(refs) != 1 || refs[0].UID != "uid-c" {
		t.Errorf("shared owners %v, want only uid-c", refs)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "cfg-b"); len(refs) != 0 {
		t.Errorf("discovery added the ReplicaSet being deleted: %v", refs)
	}
}

// TestDiscoveryProblemIsAWarning: a 404 on an older ReplicaSet's object (collected between the
// list and the patch) is reported, but the explicit list decides the phase.
func TestDiscoveryProblemIsAWarning(t *testing.T) {
	c := historyWorld()
	c.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "cfg-1" {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "cfg-1")
		}
		return false, nil, nil
	})
	ev := &recordingEvents{}
	s := newStep(c)
	s.Events = ev
	res, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-3"],"discover":{}}`))
	if rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s %v", res.Phase, res.Message, rerr)
	}
	if !strings.Contains(res.Message, "warning: could not add owner web-rev1 to ConfigMap cfg-1: it no longer exists") {
		t.Errorf("message %q", res.Message)
	}
	if strings.Contains(res.Message, "fix the name in the step config") {
		t.Errorf("tells the user to fix a name they never wrote: %q", res.Message)
	}
	if !ev.has(corev1.EventTypeWarning, plugin.ReasonDiscoverWarning) {
		t.Errorf("no Warning event: %v", ev.events)
	}
}

type recordingEvents struct{ events []string }

func (r *recordingEvents) Event(_ *v1alpha1.Rollout, eventType, reason, msg string) {
	r.events = append(r.events, eventType+" "+reason+" "+msg)
}

func (r *recordingEvents) has(eventType, reason string) bool {
	for _, e := range r.events {
		if strings.HasPrefix(e, eventType+" "+reason+" ") {
			return true
		}
	}
	return false
}

func TestOwnerPatchAddsOnly(t *testing.T) {
	rs := aged("rev", "uid-rev", 0, fixtures.PodSpec([]string{"cfg"}, nil))
	var body map[string]map[string][]map[string]any
	if err := json.Unmarshal(plugin.OwnerPatch(rs), &body); err != nil {
		t.Fatal(err)
	}
	ref := body["metadata"]["ownerReferences"][0]
	if _, ok := ref["controller"]; ok || len(ref) != 4 {
		t.Errorf("patch entry %v: want apiVersion, kind, name, uid only", ref)
	}
	// The original tool's controller: true entry with the same UID keeps its fields.
	yes := true
	legacy := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}
	c := fake.NewClientset(rs, fixtures.ConfigMap("cfg", legacy))
	if res, _ := newStep(c).Run(fixtures.Rollout("rev"), stepCtx(`{"configMaps":["cfg"]}`)); res.Phase != types.PhaseSuccessful {
		t.Fatal(res.Message)
	}
	refs := owners(t, c, plugin.KindConfigMap, "cfg")
	if len(refs) != 1 || refs[0].Controller == nil || !*refs[0].Controller || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
		t.Errorf("legacy entry rewritten: %+v", refs)
	}
}

func TestForbiddenByWebhook(t *testing.T) {
	c := world()
	c.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cfg-new", errors.New(`admission webhook "validate.kyverno.svc-fail" denied the request: owner changes are not allowed`))
	})
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, `admission webhook "validate.kyverno.svc-fail" denied`) || strings.Contains(res.Message, "needs verb patch") {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
}

func TestAsyncEventsDoNotBlockAndCountDrops(t *testing.T) {
	block := make(chan struct{})
	inner := &blockingEvents{block: block}
	e := plugin.NewAsyncEvents(inner, 2, quietLog())
	ro := fixtures.Rollout(curHash)
	start := time.Now()
	for range 10 {
		e.Event(ro, corev1.EventTypeNormal, plugin.ReasonAttached, "x")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Event blocked for %s", d)
	}
	// One in the writer, two queued, seven dropped.
	if e.Dropped() < 7 {
		t.Errorf("dropped %d, want >= 7", e.Dropped())
	}
	close(block)
}

type blockingEvents struct{ block chan struct{} }

func (b *blockingEvents) Event(*v1alpha1.Rollout, string, string, string) { <-b.block }

// usageOf is a fresh view of the namespace: the ReplicaSets, the fixture Rollout alive.
func usageOf(stale bool, rss ...*appsv1.ReplicaSet) *plugin.NamespaceUsage {
	in := plugin.UsageInput{Controllers: []plugin.ControllerRef{{Kind: plugin.KindRollout, Name: "web", UID: fixtures.RolloutUID}}, ListedKinds: []string{plugin.KindRollout, plugin.KindDeployment}, Stale: stale}
	for _, rs := range rss {
		in.ReplicaSets = append(in.ReplicaSets, *rs)
	}
	return plugin.NewUsage(testNS, in)
}

// TestAdoptAcrossWorkloads: a candidate gets, in one patch, every live ReplicaSet that uses it,
// whichever workload it belongs to; under the policy, only opted-in candidates; a ReplicaSet
// being deleted never.
func TestAdoptAcrossWorkloads(t *testing.T) {
	a1 := aged("a1", "uid-a1", 0, fixtures.PodSpec([]string{"shared", "plain"}, nil))
	b1 := aged("b1", "uid-b1", 0, fixtures.PodSpec([]string{"shared"}, nil))
	dying := aged("b0", "uid-b0", 0, fixtures.PodSpec([]string{"shared"}, nil))
	dying.DeletionTimestamp = &metav1.Time{Time: fixtures.T0}
	c := fake.NewClientset(optedIn(fixtures.ConfigMap("shared")), fixtures.ConfigMap("plain"))
	a := &plugin.Attacher{Client: clientset.Typed(c), Meta: clientsOf(c).Meta, Log: quietLog(), CreationWait: shortCreationWait}
	users := usageOf(false, a1, b1, dying)
	cands := []plugin.Candidate{
		{Object: plugin.Object{Kind: plugin.KindConfigMap, Name: "shared"}, Labels: map[string]string{plugin.OptInLabel: "true"}},
		{Object: plugin.Object{Kind: plugin.KindConfigMap, Name: "plain"}, Labels: map[string]string{"team": "shop"}},
	}
	adopt := func(cands []plugin.Candidate, p plugin.Policy) (plugin.Result, error) {
		return a.Reconcile(t.Context(), plugin.Request{Namespace: testNS, Users: users, Candidates: cands, Policy: p})
	}
	res, err := adopt(cands, plugin.Policy{RequireOptIn: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := patchesOf(c); len(got) != 1 || got["configmaps/shared"] == "" {
		t.Fatalf("patches %v, want one on shared", got)
	}
	refs := owners(t, c, plugin.KindConfigMap, "shared")
	if len(refs) != 2 || !hasOwner(refs, "uid-a1") || !hasOwner(refs, "uid-b1") {
		t.Errorf("shared owners %v, want a1 and b1", refs)
	}
	if len(res.Added) != 1 || len(res.Added[0].Owners) != 2 {
		t.Errorf("added %+v", res.Added)
	}
	// Again: nothing to do, no request.
	c.ClearActions()
	cands[0].Owners = refs
	if res, _ = adopt(cands, plugin.Policy{RequireOptIn: true}); writes(c) != 0 || res.Owned != 1 {
		t.Errorf("repeat wrote %d times, owned %d", writes(c), res.Owned)
	}
	// Without the policy, plain is adopted too.
	if _, err := adopt(cands[1:], plugin.Policy{}); err != nil || len(owners(t, c, plugin.KindConfigMap, "plain")) != 1 {
		t.Errorf("plain: %v %v", err, owners(t, c, plugin.KindConfigMap, "plain"))
	}
}

func TestPositive(t *testing.T) {
	for sel, want := range map[string]bool{"": false, "!a": false, "a!=b": false, "a notin (b)": false, "a": true, "a=b": true, "a in (b)": true, "!a,b=c": true} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if plugin.Positive(s) != want {
			t.Errorf("Positive(%q) = %v, want %v", sel, !want, want)
		}
	}
	if _, err := plugin.ParseConfig([]byte(`{"discover":{"selector":{"matchExpressions":[{"key":"a","operator":"DoesNotExist"}]}}}`)); err == nil || !strings.Contains(err.Error(), "has no label objects must carry") {
		t.Errorf("a DoesNotExist-only discover selector: %v", err)
	}
}
