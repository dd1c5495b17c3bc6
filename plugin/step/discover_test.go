package step

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

var (
	optedIn      = fixtures.OptedIn
	historyWorld = fixtures.History
)

func TestDiscoverReconcilesHistory(t *testing.T) {
	c := historyWorld()
	c.ClearActions()
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"discover":{}}`))
	if rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s %v", res.Phase, res.Message, rerr)
	}
	want := map[plugin.Object][]string{
		{Kind: plugin.KindConfigMap, Name: "cfg-1"}: {"uid-1"}, {Kind: plugin.KindConfigMap, Name: "cfg-2"}: {"uid-2"}, {Kind: plugin.KindConfigMap, Name: "cfg-3"}: {"uid-cur"},
		{Kind: plugin.KindSecret, Name: "sec-1"}: {"uid-1", "uid-2"}, {Kind: plugin.KindSecret, Name: "sec-3"}: {"uid-cur"},
	}
	for o, uids := range want {
		refs := owners(t, c, o.Kind, o.Name)
		if len(refs) != len(uids) {
			t.Errorf("%s owners %v, want %v", o, refs, uids)
		}
		for _, u := range uids {
			if !hasOwner(refs, u) {
				t.Errorf("%s lacks owner %s", o, u)
			}
		}
	}
	if refs := owners(t, c, plugin.KindConfigMap, "static"); len(refs) != 0 {
		t.Errorf("a not-opted-in object was adopted: %v", refs)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "cfg-unused"); len(refs) != 0 {
		t.Errorf("an object no template uses was adopted: %v", refs)
	}
	if !strings.Contains(res.Message, "discover: added 6 owner reference(s)") || !strings.Contains(res.Message, "Secret sec-1 ← web-rev2, web-rev1") && !strings.Contains(res.Message, "Secret sec-1 ← web-rev1, web-rev2") {
		t.Errorf("message %q", res.Message)
	}
	var st Status
	_ = json.Unmarshal(res.Status, &st)
	if len(st.Discovered) != 5 {
		t.Errorf("status discovered %v", st.Discovered)
	}

	// A second run: 10 reads (the Rollout's own ReplicaSets; without a controller, 7 for the
	// namespace's users; a metadata list per kind), no write.
	c.ClearActions()
	res, _ = newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"discover":{}}`))
	if res.Phase != types.PhaseSuccessful || writes(c) != 0 || len(c.Actions()) != 10 || !strings.Contains(res.Message, "already has its owners (5)") {
		t.Errorf("second run: %s, %d actions, %d writes", res.Message, len(c.Actions()), writes(c))
	}
}

func TestDiscoverSelectorAndNames(t *testing.T) {
	c := historyWorld()
	// A custom selector; static listed explicitly (allowed: the current template uses it).
	cm, _ := c.CoreV1().ConfigMaps(testNS).Get(t.Context(), "cfg-2", metav1.GetOptions{})
	cm.Labels = map[string]string{"team": "web"}
	_, _ = c.CoreV1().ConfigMaps(testNS).Update(t.Context(), cm, metav1.UpdateOptions{})
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["static"],"discover":{"selector":{"matchLabels":{"team":"web"}}}}`))
	if res.Phase != types.PhaseSuccessful {
		t.Fatal(res.Message)
	}
	if !hasOwner(owners(t, c, plugin.KindConfigMap, "cfg-2"), "uid-2") || !hasOwner(owners(t, c, plugin.KindConfigMap, "static"), "uid-cur") {
		t.Error("selector or explicit name not honoured")
	}
	if len(owners(t, c, plugin.KindConfigMap, "cfg-1")) != 0 {
		t.Error("an object outside the selector was adopted")
	}
	// Bad selectors are config errors.
	for cfg, want := range map[string]string{
		`{"discover":{"selector":{}}}`:                          "discover.selector is empty",
		`{"discover":{"selecter":{}}}`:                          "discover",
		`{"discover":[]}`:                                       "discover: got a list",
		`{"discover":{"selector":{"matchLabels":{"a b":"c"}}}}`: "discover.selector",
	} {
		if _, err := plugin.ParseConfig([]byte(cfg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	c := historyWorld()
	c.ClearActions()
	res, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-3"],"secrets":["sec-3"],"discover":{},"dryRun":true}`))
	if rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %v", res.Message, rerr)
	}
	if writes(c) != 0 {
		t.Errorf("dry run wrote %d times", writes(c))
	}
	for _, w := range []string{"dry run, nothing written", "would add ConfigMap cfg-3 ← web-" + curHash + "; Secret sec-3 ← web-" + curHash, "discover would add 4 owner reference(s)"} {
		if !strings.Contains(res.Message, w) {
			t.Errorf("message %q lacks %q", res.Message, w)
		}
	}
	// After a real run, the dry run has nothing to add.
	if _, rerr := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-3"],"secrets":["sec-3"],"discover":{}}`)); rerr.HasError() {
		t.Fatalf("real run: %v", rerr)
	}
	res, _ = newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-3"],"dryRun":true}`))
	if !strings.Contains(res.Message, "no listed object lacks an owner") {
		t.Errorf("message %q", res.Message)
	}
}

type recorded struct{ typ, reason, msg string }

type fakeEvents struct {
	mu  sync.Mutex
	got []recorded
}

func (f *fakeEvents) Event(ro *v1alpha1.Rollout, typ, reason, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, recorded{typ, reason, msg})
}

func TestStepEvents(t *testing.T) {
	c := world(fixtures.ConfigMap("unrelated"))
	ev := &fakeEvents{}
	s := newStep(c)
	s.Events = ev
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	res2, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["unrelated"]}`))
	if len(ev.got) != 2 || ev.got[0] != (recorded{"Normal", plugin.ReasonAttached, res.Message}) || ev.got[1] != (recorded{"Warning", plugin.ReasonAttachFailed, res2.Message}) {
		t.Errorf("events %+v", ev.got)
	}
}

// TestAPIEvents writes a real core/v1 Event on the Rollout.
func TestAPIEvents(t *testing.T) {
	c := fake.NewClientset()
	e := &plugin.APIEvents{Client: func() (plugin.Clients, error) { return clientsOf(c), nil }}
	e.Event(fixtures.Rollout(curHash), "Warning", plugin.ReasonAttachFailed, strings.Repeat("x", 2000))
	list, _ := c.CoreV1().Events(testNS).List(t.Context(), metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Fatalf("%d events", len(list.Items))
	}
	ev := list.Items[0]
	if ev.InvolvedObject.Kind != "Rollout" || ev.InvolvedObject.UID != fixtures.RolloutUID || ev.Type != "Warning" || len(ev.Message) != 1024 || ev.Source.Component != "configmap-attacher" {
		t.Errorf("event %+v", ev)
	}
}

// TestWorkloadRefStep: in step mode the controller passes the Rollout with the selector it
// resolved from the Deployment; the step needs nothing else.
func TestWorkloadRefStep(t *testing.T) {
	c := world()
	ro := fixtures.Rollout(curHash)
	ro.Spec.WorkloadRef = &v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	res, _ := newStep(c).Run(ro, stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseSuccessful || !hasOwner(owners(t, c, plugin.KindConfigMap, "cfg-new"), "uid-cur") {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
}

// TestDiscoverWithExplicitListPatchesOnce: an object both listed and discovered for the
// current ReplicaSet gets one patch, and is counted once.
func TestDiscoverWithExplicitListPatchesOnce(t *testing.T) {
	c := historyWorld()
	c.ClearActions()
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-3"],"secrets":["sec-3"],"discover":{}}`))
	if res.Phase != types.PhaseSuccessful {
		t.Fatal(res.Message)
	}
	patches := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	// cfg-3, sec-3 (explicit) + cfg-1, cfg-2, sec-1 (discovered) = 5 objects.
	if patches != 5 || !strings.Contains(res.Message, "discover: added 4 owner reference(s)") {
		t.Errorf("%d patches, message %q", patches, res.Message)
	}
}
