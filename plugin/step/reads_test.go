package step

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

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
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// The step reads what the rule needs and no more (plugin/read.go, plugin/readusage.go): each
// read it no longer makes is shown safe here, and each it still makes is shown needed.

var yes = true

// setPod is a Pod a StatefulSet controls, running spec (its revision's template).
func setPod(name, sts string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: k8stypes.UID("uid-" + name),
		Labels:          map[string]string{"controller-revision-hash": sts + "-old"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: "uid-sts", Controller: &yes}}},
		Spec: spec}
}

// revision is a StatefulSet's ControllerRevision as the StatefulSet controller writes it: its
// data the patch {"spec":{"template":{...,"$patch":"replace"}}}.
func revision(t *testing.T, name, sts string, spec corev1.PodSpec) *appsv1.ControllerRevision {
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodTemplateSpec{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	tmpl["$patch"] = "replace"
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: k8stypes.UID("uid-" + name),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: "uid-sts", Controller: &yes}}},
		Data: runtime.RawExtension{Raw: raw}, Revision: 1}
}

// TestOldRevisionPodOfAStatefulSetBlocks: a StatefulSet mid partitioned rollout still runs a
// Pod of its older revision, whose template references the object while the current template
// does not. The step no longer reads that Pod's spec: the StatefulSet controller keeps the
// revision while a Pod carries it, and the step reads the revision instead. Without the
// ControllerRevisions (RBAC), it reads the Pod's spec as before, and warns naming the grant.
func TestOldRevisionPodOfAStatefulSetBlocks(t *testing.T) {
	world := func() *fake.Clientset {
		cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
		part := int32(1)
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS, UID: "uid-sts"},
			Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"cache-new"}, nil)},
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &part}}}}
		return fake.NewClientset(cur, sts, fixtures.ConfigMap("shared"),
			revision(t, "cache-old", "cache", fixtures.PodSpec([]string{"shared"}, nil)),
			revision(t, "cache-new", "cache", fixtures.PodSpec([]string{"cache-new"}, nil)),
			setPod("cache-0", "cache", fixtures.PodSpec([]string{"shared"}, nil)),
			setPod("cache-1", "cache", fixtures.PodSpec([]string{"cache-new"}, nil)))
	}

	c := world()
	rec := &recorder{}
	s := newStep(c)
	s.Events = rec
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "also used by StatefulSet cache (revision cache-old)") || writes(c) != 0 {
		t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
	}
	if specs := podLists(c); len(specs) != 0 {
		t.Errorf("the spec of a StatefulSet's Pod was read though its revisions were: %v", specs)
	}

	// RBAC without list on controllerrevisions: the Pods' specs, as before, and a warning.
	c = world()
	c.PrependReactor("list", "controllerrevisions", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}, "", nil)
	})
	rec = &recorder{}
	s = newStep(c)
	s.Events = rec
	res, _ = s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "also used by Pod cache-0") || writes(c) != 0 {
		t.Errorf("without revisions: %s %s (%d writes)", res.Phase, res.Message, writes(c))
	}
	if !rec.has(corev1.EventTypeWarning, "grant list on controllerrevisions.apps") {
		t.Errorf("no Warning naming the grant: %v", rec.events)
	}
}

// podLists lists the Pod lists a run sent after the first (the metadata list), which read
// specs: "name" (by name), "all" (every Pod), or "labels <selector>".
func podLists(c *fake.Clientset) (specs []string) {
	n := 0
	for _, a := range c.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" {
			n++
			if n == 1 {
				continue
			}
			r := l.GetListRestrictions()
			switch {
			case !r.Fields.Empty():
				specs = append(specs, "name")
			case !r.Labels.Empty():
				specs = append(specs, "labels "+r.Labels.String())
			default:
				specs = append(specs, "all")
			}
		}
	}
	return specs
}

// TestPodsNoKnownControllerStandsForBlock: a bare Pod, a Pod of a controller kind
// configmap-attacher does not know (an Argo Workflow's), and a Pod that copies a ReplicaSet's
// labels but has no controller reference each still block: their own specs are read, by name
// when few, by one list of the Pods that share their label keys when those are many, by one
// list of every Pod when many have label keys of their own. A ReplicaSet's or Job's Pod is never
// read by name: its template stands for it.
func TestPodsNoKnownControllerStandsForBlock(t *testing.T) {
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
	pod := func(name string, ref *metav1.OwnerReference, labels map[string]string, cms ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: k8stypes.UID("uid-" + name), Labels: labels},
			Spec: fixtures.PodSpec(cms, nil)}
		if ref != nil {
			p.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		return p
	}
	rsRef := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: cur.Name, UID: cur.UID, Controller: &yes}
	jobRef := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "batch", UID: "uid-job", Controller: &yes}
	wfRef := &metav1.OwnerReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Workflow", Name: "wf", UID: "uid-wf", Controller: &yes}
	wfLabels := func(i int) map[string]string {
		return map[string]string{"workflows.argoproj.io/workflow": "wf", "step": fmt.Sprint(i)}
	}
	const wfSel = "step in (%s),workflows.argoproj.io/workflow in (wf)"
	for _, tc := range []struct {
		name string
		user *corev1.Pod
		// many: 64 more Pods of the Workflow (labels: with the user's label keys, else none).
		many, labelled bool
		// relabel: the user's labels change between the metadata read and the specs' list.
		relabel bool
		who     string
		specs   []string // the spec lists, sorted
	}{
		{"bare Pod", pod("debug", nil, nil, "shared"), false, false, false, "Pod debug", []string{"name"}},
		{"Pod of an unknown controller kind", pod("wf-1", wfRef, nil, "shared"), false, false, false, "Pod wf-1", []string{"name"}},
		{"Pod copying a ReplicaSet's labels, no controller reference", pod("copy", nil, cur.Labels, "shared"), false, false, false, "Pod copy", []string{"name"}},
		{"many such Pods without labels: one list of every Pod", pod("debug", nil, nil, "shared"), true, false, false, "Pod debug", []string{"all"}},
		{"many Pods with the same label keys: one list by their labels", pod("wf-1", wfRef, wfLabels(1), "shared"), true, true, false, "Pod wf-1", nil},
		{"a Pod relabelled before the list by labels: read by name after", pod("wf-1", wfRef, wfLabels(1), "shared"), true, true, true, "Pod wf-1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{cur, fixtures.ConfigMap("shared"), tc.user,
				pod("rs-pod", rsRef, cur.Labels, "shared"), pod("job-pod", jobRef, nil, "other")}
			var steps []string
			if tc.many {
				for i := 10; i < 74; i++ { // manyPods (64) + the user
					var ls map[string]string
					if tc.labelled {
						ls = wfLabels(i)
						steps = append(steps, fmt.Sprint(i))
					}
					objs = append(objs, pod(fmt.Sprintf("wf-%d", i), wfRef, ls, "other"))
				}
			}
			if tc.labelled {
				steps = append(steps, "1")
				slices.Sort(steps)
				tc.specs = []string{"labels " + fmt.Sprintf(wfSel, strings.Join(steps, ","))}
				if tc.relabel {
					tc.specs = append(tc.specs, "name")
				}
			}
			c := fake.NewClientset(objs...)
			if tc.relabel {
				relabelled := false
				c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if !relabelled && !a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
						relabelled = true
						p := tc.user.DeepCopy()
						p.Labels = map[string]string{"workflows.argoproj.io/workflow": "wf-retried"}
						if err := c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, testNS); err != nil {
							t.Error(err)
						}
					}
					return false, nil, nil
				})
			}
			res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
			if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "also used by "+tc.who) || writes(c) != 0 {
				t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
			}
			specs := podLists(c)
			slices.Sort(specs)
			if !slices.Equal(specs, tc.specs) {
				t.Errorf("Pod spec lists\n  %s\nwant\n  %s", strings.Join(specs, "\n  "), strings.Join(tc.specs, "\n  "))
			}
		})
	}
}

// TestPodsOfTwoLabelSchemes: the Pods of two unknown controllers with label keys of their own
// (Workflows', TaskRuns') take one list each, read one after the other, and a user among either
// is found.
func TestPodsOfTwoLabelSchemes(t *testing.T) {
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
	for _, user := range []string{"wf-3", "run-2"} {
		t.Run(user, func(t *testing.T) {
			objs := []runtime.Object{cur, fixtures.ConfigMap("shared")}
			add := func(name, kind string, labels map[string]string) {
				cms := []string{"other"}
				if name == user {
					cms = []string{"shared"}
				}
				objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: k8stypes.UID("uid-" + name), Labels: labels,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.io/v1", Kind: kind, Name: kind, UID: k8stypes.UID("uid-" + kind), Controller: &yes}}},
					Spec: fixtures.PodSpec(cms, nil)})
			}
			for i := range 5 {
				add(fmt.Sprint("wf-", i), "Workflow", map[string]string{"workflow": "wf"})
				add(fmt.Sprint("run-", i), "TaskRun", map[string]string{"tekton.dev/taskRun": "run"})
			}
			c := fake.NewClientset(objs...)
			res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
			if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "also used by Pod "+user) || writes(c) != 0 {
				t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
			}
			specs := podLists(c)
			slices.Sort(specs)
			if want := []string{"labels tekton.dev/taskRun in (run)", "labels workflow in (wf)"}; !slices.Equal(specs, want) {
				t.Errorf("Pod spec lists %v, want %v", specs, want)
			}
		})
	}
}

// TestMaintainedObjectsReadNoOtherUsers: where a live controller maintains every object of the
// run, the step reads its own ReplicaSets, the Lease and the objects' metadata, and no
// namespace-wide list: the controller keeps the other users (here a StatefulSet, a bare Pod and
// another Deployment's ReplicaSet), which the step does not need to see.
func TestMaintainedObjectsReadNoOtherUsers(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS, UID: "uid-sts"},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"app-config"}, nil)}}}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: testNS, UID: "uid-debug"}, Spec: fixtures.PodSpec([]string{"app-config"}, nil)}
	c := sharedWorld(false, sts, bare, controllerLease(time.Now(), nil))
	s := newStep(c)
	s.ControllerLeases = []plugin.LeaseRef{ctlLease}
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`))
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "maintains ConfigMap app-config") {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	var got []string
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "list":
			l := a.(k8stesting.ListAction)
			got = append(got, "list "+a.GetResource().Resource+" "+l.GetListRestrictions().Labels.String())
		case "get":
			got = append(got, "get "+a.GetResource().Resource+" "+a.(k8stesting.GetAction).GetName())
		}
	}
	// The own list and the Lease at once (any order: Step.run reads the Lease beside the list),
	// then the object's metadata.
	want := []string{"get leases " + ctlLease.Name, "list replicasets app=web", "get configmaps app-config"}
	if len(got) > 1 {
		slices.Sort(got[:2])
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("reads\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if refs := owners(t, c, plugin.KindConfigMap, "app-config"); len(refs) != 2 || !hasOwner(refs, "uid-cur") || !hasOwner(refs, "uid-prev") {
		t.Errorf("owners %v, want the Rollout's two ReplicaSets", refs)
	}
}

// TestWaitingStepListsOnlyItsReplicaSets: while the target does not exist, a step reads the
// list of its Rollout's ReplicaSets by its selector and, on its first call only, the
// controller's Lease beside it (what a step that goes on reads next); from the call after a
// wait on, the list alone.
func TestWaitingStepListsOnlyItsReplicaSets(t *testing.T) {
	c := sharedWorld(false, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: testNS}})
	s := newStep(c)
	s.ControllerLeases = []plugin.LeaseRef{ctlLease}
	ro := fixtures.Rollout("not-yet")
	sc := stepCtx(`{"configMaps":["app-config"]}`)
	var calls [][]string
	for range 2 {
		c.ClearActions()
		res, _ := s.Run(ro, sc)
		if res.Phase != types.PhaseRunning {
			t.Fatalf("%s %s", res.Phase, res.Message)
		}
		sc.Status = res.Status
		var got []string
		for _, a := range c.Actions() {
			switch a.GetVerb() {
			case "list":
				got = append(got, "list "+a.GetResource().Resource+" "+a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
			case "get":
				got = append(got, "get "+a.GetResource().Resource+" "+a.(k8stesting.GetAction).GetName())
			default:
				got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
			}
		}
		slices.Sort(got)
		calls = append(calls, got)
	}
	want := [][]string{{"get leases " + ctlLease.Name, "list replicasets app=web"}, {"list replicasets app=web"}}
	for i := range want {
		if strings.Join(calls[i], "; ") != strings.Join(want[i], "; ") {
			t.Errorf("waiting call %d sent %v, want %v", i+1, calls[i], want[i])
		}
	}
}

// TestStepReadsIsTheFormula: the requests a step sends before its writes are exactly
// plugin.StepReads (the formula the docs state and the benchmark mirrors), where a live
// controller maintains the objects and where none does.
func TestStepReadsIsTheFormula(t *testing.T) {
	ro := fixtures.Rollout(curHash)
	wl := plugin.Workload{Kind: plugin.KindRollout, Namespace: testNS, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector}
	cfg := []plugin.Object{{Kind: plugin.KindConfigMap, Name: "app-config"}}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: testNS, UID: "uid-debug"}}
	for _, tc := range []struct {
		name  string
		c     *fake.Clientset
		shape plugin.StepShape
	}{
		{"maintained", sharedWorld(false, bare, controllerLease(time.Now(), nil)),
			plugin.StepShape{Workload: wl, Objects: cfg, Leases: []plugin.LeaseRef{ctlLease}, Maintained: true}},
		{"step only", func() *fake.Clientset {
			c := sharedWorld(false, bare)
			// The worker's ReplicaSet no longer uses the object: the step attaches it.
			_ = c.AppsV1().ReplicaSets(testNS).Delete(t.Context(), "worker-w1", metav1.DeleteOptions{})
			w := fixtures.ReplicaSet("w1", "uid-worker-rs", "uid-worker", fixtures.PodSpec([]string{"other"}, nil))
			w.Name = "worker-w1"
			w.OwnerReferences[0].APIVersion, w.OwnerReferences[0].Kind, w.OwnerReferences[0].Name = "apps/v1", "Deployment", "worker"
			_, _ = c.AppsV1().ReplicaSets(testNS).Create(t.Context(), w, metav1.CreateOptions{})
			return c
		}(), plugin.StepShape{Workload: wl, Objects: cfg, Leases: []plugin.LeaseRef{ctlLease}, ControllerKinds: []string{plugin.KindDeployment}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.shape.Maintained {
				pods, err := tc.c.CoreV1().Pods(testNS).List(t.Context(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for i := range pods.Items {
					tc.shape.Pods.Add(&pods.Items[i])
				}
			}
			tc.c.ClearActions()
			s := newStep(tc.c)
			s.ControllerLeases = []plugin.LeaseRef{ctlLease}
			res, _ := s.Run(ro, stepCtx(`{"configMaps":["app-config"]}`))
			if res.Phase != types.PhaseSuccessful {
				t.Fatalf("%s %s", res.Phase, res.Message)
			}
			var got, want []string
			for _, a := range tc.c.Actions() {
				switch a.GetVerb() {
				case "list":
					r := a.(k8stesting.ListAction).GetListRestrictions()
					got = append(got, fmt.Sprintf("list %s labels=%q fields=%q", a.GetResource().Resource, r.Labels.String(), r.Fields.String()))
				case "get":
					got = append(got, "get "+a.GetResource().Resource+" "+a.(k8stesting.GetAction).GetName())
				}
			}
			for _, r := range plugin.StepReads(tc.shape) {
				if r.Verb == "get" {
					want = append(want, "get "+r.Resource.Resource+" "+r.Name)
					continue
				}
				want = append(want, fmt.Sprintf("list %s labels=%q fields=%q", r.Resource.Resource, r.ListOptions.LabelSelector, r.ListOptions.FieldSelector))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("reads\n  %s\nformula\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// TestPrefetchedReadsAreNotRepeated: once a step found a live controller in its namespace, the
// next step there reads the Lease and its objects' labels beside the list of its ReplicaSets
// (plugin.Prefetch), so even a step whose list fails has read them, and not again after it:
// every step sends each read once. Where no controller lives (a step-only install), no step
// reads labels it would not use.
func TestPrefetchedReadsAreNotRepeated(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("controller=%v", live), func(t *testing.T) {
			var extra []runtime.Object
			if live {
				extra = append(extra, controllerLease(time.Now(), nil))
			}
			c := sharedWorld(false, extra...)
			failList := false
			c.PrependReactor("list", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failList {
					return true, nil, apierrors.NewServiceUnavailable("planted")
				}
				return false, nil, nil
			})
			s := newStep(c)
			s.ControllerLeases = []plugin.LeaseRef{ctlLease}
			gets := func() map[string]int {
				out := map[string]int{}
				for _, a := range c.Actions() {
					if a.GetVerb() == "get" {
						out["get "+a.GetResource().Resource]++
					}
				}
				return out
			}
			want := map[string]int{"get leases": 1}
			if live {
				want["get configmaps"] = 1
			}
			for call := 1; call <= 3; call++ {
				c.ClearActions()
				res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`))
				if live && res.Phase != types.PhaseSuccessful || !live && res.Phase != types.PhaseFailed {
					t.Fatalf("call %d: %s %s", call, res.Phase, res.Message)
				}
				if got := gets(); !maps.Equal(got, want) {
					t.Errorf("call %d: gets %v, want %v", call, got, want)
				}
			}
			// A step whose list fails has read beside it what a step that goes on needs.
			c.ClearActions()
			failList = true
			if _, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`)); rerr.ErrorString == "" {
				t.Fatal("the planted list error did not reach the result")
			}
			if got := gets(); !maps.Equal(got, want) {
				t.Errorf("a step whose list failed read %v beside it, want %v", got, want)
			}
		})
	}
}
