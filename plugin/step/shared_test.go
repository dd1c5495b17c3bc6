package step

import (
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// The step keeps true only what its own Rollout's later steps see again: config other
// workloads share is attached (to the Rollout's own ReplicaSets) only where a live controller
// maintains it, and refused otherwise.

var ctlLease = plugin.LeaseRef{Namespace: "configmap-attacher", Name: "configmap-attacher"}

// controllerLease is the controller's leader Lease as a live leader writes it, renewed at renew.
func controllerLease(renew time.Time, annotations map[string]string) *coordinationv1.Lease {
	holder, dur := "cma-0", int32(15)
	rt := metav1.NewMicroTime(renew)
	ann := plugin.ScopeAnnotations(nil, plugin.OptInSelector(), []string{"rollouts", "deployments"})
	for k, v := range annotations {
		ann[k] = v
	}
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ctlLease.Name, Namespace: ctlLease.Namespace,
		Labels: map[string]string{plugin.ControllerLeaseLabel: "true"}, Annotations: ann},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &rt}}
}

// sharedWorld: the Rollout's current ReplicaSet and Deployment worker's ReplicaSet both use
// ConfigMap app-config (opted in unless plain); extra objects are added.
func sharedWorld(plain bool, extra ...runtime.Object) *fake.Clientset {
	worker := fixtures.ReplicaSet("w1", "uid-worker-rs", "uid-worker", fixtures.PodSpec([]string{"app-config"}, nil))
	worker.Name = "worker-w1"
	worker.OwnerReferences[0].APIVersion, worker.OwnerReferences[0].Kind, worker.OwnerReferences[0].Name = "apps/v1", "Deployment", "worker"
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: testNS, UID: "uid-worker"}}
	prev := fixtures.Aged(oldHash, "uid-prev", -time.Minute, fixtures.PodSpec([]string{"app-config"}, nil))
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"app-config"}, nil))
	cm := fixtures.ConfigMap("app-config")
	if !plain {
		cm = optedIn(cm)
	}
	return fake.NewClientset(append([]runtime.Object{cur, prev, worker, dep, cm}, extra...)...)
}

func TestSharedConfigRuleTable(t *testing.T) {
	now := time.Now()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS, UID: "uid-sts"},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"app-config"}, nil)}}}
	for _, tc := range []struct {
		name    string
		c       *fake.Clientset
		leases  []plugin.LeaseRef
		phase   types.StepPhase
		want    []string // in the message
		owners  []string // UIDs of the owners after the run (none: nothing written)
		warning string   // in a Warning Event
	}{
		{name: "own users only: every own ReplicaSet, no Lease read", c: fake.NewClientset(
			fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"app-config"}, nil)),
			fixtures.Aged(oldHash, "uid-prev", -time.Minute, fixtures.PodSpec([]string{"app-config"}, nil)),
			fixtures.ConfigMap("app-config")),
			phase: types.PhaseSuccessful, want: []string{"attached 1 ConfigMap"}, owners: []string{"uid-cur", "uid-prev"}},
		{name: "shared, live controller: the Rollout's own ReplicaSets only, the rest left to it", c: sharedWorld(false, controllerLease(now.Add(-3*time.Second), nil)),
			leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseSuccessful,
			want:   []string{"attached 1 ConfigMap", "the controller of Lease configmap-attacher/configmap-attacher maintains ConfigMap app-config: any other users are its to keep (not read)"},
			owners: []string{"uid-cur", "uid-prev"}},
		{name: "shared with a StatefulSet, live controller: own ReplicaSets only", c: sharedWorld(false, sts, controllerLease(now, nil)),
			leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseSuccessful, want: []string{"maintains ConfigMap app-config"}, owners: []string{"uid-cur", "uid-prev"}},
		{name: "shared, no controller configured: refused naming the users and the fix", c: sharedWorld(false),
			phase: types.PhaseFailed, want: []string{"ConfigMap app-config is also used by ReplicaSet worker-w1 (of Deployment worker)",
				"no controller Lease is configured", "-controller-lease", "give each workload its own config", "nothing was written"}},
		{name: "shared, Lease absent", c: sharedWorld(false), leases: []plugin.LeaseRef{ctlLease},
			phase: types.PhaseFailed, want: []string{"Lease configmap-attacher/configmap-attacher: not found", "ReplicaSet worker-w1"}},
		{name: "shared, stale Lease: refused naming the users", c: sharedWorld(false, controllerLease(now.Add(-5*time.Minute), nil)), leases: []plugin.LeaseRef{ctlLease},
			phase: types.PhaseFailed, want: []string{"ReplicaSet worker-w1 (of Deployment worker)", "held by cma-0 but not renewed since", "the controller is not running"}},
		{name: "shared, released Lease (no holder)", c: sharedWorld(false, func() *coordinationv1.Lease {
			l := controllerLease(now, nil)
			l.Spec.HolderIdentity = nil
			return l
		}()), leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseFailed, want: []string{"no holder"}},
		{name: "shared, a Lease without the controller's label (another program's, an older controller)", c: sharedWorld(false, func() *coordinationv1.Lease {
			l := controllerLease(now, nil)
			l.Labels = nil
			return l
		}()), leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseFailed, want: []string{"no label configmap-attacher.io/controller=true"}},
		{name: "shared, not opted in: the controller does not maintain it", c: sharedWorld(true, controllerLease(now, nil)), leases: []plugin.LeaseRef{ctlLease},
			phase: types.PhaseFailed, want: []string{"does not match the controller's selector configmap-attacher/revisioned=true"}},
		{name: "shared, namespace not watched", c: sharedWorld(false, controllerLease(now, map[string]string{plugin.LeaseNamespacesAnnotation: "team-a,team-b"})),
			leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseFailed, want: []string{"the controller watches namespaces team-a, team-b, not shop"}},
		{name: "shared, controller acts for Deployments only", c: sharedWorld(false, controllerLease(now, map[string]string{plugin.LeaseWorkloadsAnnotation: "deployments"})),
			leases: []plugin.LeaseRef{ctlLease}, phase: types.PhaseFailed, want: []string{`-workloads is "deployments"`}},
		{name: "split install: the second Lease maintains it", c: sharedWorld(false, controllerLease(now, map[string]string{plugin.LeaseNamespacesAnnotation: "team-a"}), func() *coordinationv1.Lease {
			l := controllerLease(now, map[string]string{plugin.LeaseNamespacesAnnotation: testNS})
			l.Namespace = "cma-b"
			return l
		}()), leases: []plugin.LeaseRef{ctlLease, {Namespace: "cma-b", Name: ctlLease.Name}}, phase: types.PhaseSuccessful,
			want: []string{"Lease cma-b/configmap-attacher maintains"}, owners: []string{"uid-cur", "uid-prev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStep(tc.c)
			s.ControllerLeases = tc.leases
			res, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`))
			if rerr.HasError() || res.Phase != tc.phase {
				t.Fatalf("%s %q %v", res.Phase, res.Message, rerr)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Message, w) {
					t.Errorf("message %q lacks %q", res.Message, w)
				}
			}
			refs := owners(t, tc.c, plugin.KindConfigMap, "app-config")
			if len(refs) != len(tc.owners) {
				t.Errorf("owners %v, want %v", refs, tc.owners)
			}
			for _, uid := range tc.owners {
				if !hasOwner(refs, uid) {
					t.Errorf("owners %v lack %s", refs, uid)
				}
			}
			if hasOwner(refs, "uid-worker-rs") {
				t.Errorf("the step made Deployment worker's ReplicaSet an owner: nothing would add its later ReplicaSets")
			}
			if len(tc.owners) == 0 && writes(tc.c) != 0 {
				t.Errorf("%d writes, want none", writes(tc.c))
			}
		})
	}
}

// TestSharedConfigLeaseForbidden: a step upgraded before its RBAC may not get the Lease: it
// behaves as without a controller (refuses shared config, writes nothing) and warns, naming the
// grant; config of its own Rollout alone is attached as always, with no warning (the refused
// Lease changes nothing for it).
func TestSharedConfigLeaseForbidden(t *testing.T) {
	c := sharedWorld(false, controllerLease(time.Now(), nil))
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, ctlLease.Name, nil)
	})
	rec := &recorder{}
	s := newStep(c)
	s.ControllerLeases, s.Events = []plugin.LeaseRef{ctlLease}, rec
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "Lease configmap-attacher/configmap-attacher: may not get it (forbidden)") ||
		!strings.Contains(res.Message, "ReplicaSet worker-w1") || writes(c) != 0 {
		t.Errorf("%s %q (%d writes)", res.Phase, res.Message, writes(c))
	}
	if !rec.has(corev1.EventTypeWarning, "grant get on leases.coordination.k8s.io configmap-attacher in namespace configmap-attacher") {
		t.Errorf("no Warning naming the grant: %v", rec.events)
	}

	own := fake.NewClientset(fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"app-config"}, nil)), fixtures.ConfigMap("app-config"))
	own.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, ctlLease.Name, nil)
	})
	rec = &recorder{}
	s = newStep(own)
	s.ControllerLeases, s.Events = []plugin.LeaseRef{ctlLease}, rec
	res, _ = s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["app-config"]}`))
	if res.Phase != types.PhaseSuccessful || !hasOwner(owners(t, own, plugin.KindConfigMap, "app-config"), "uid-cur") {
		t.Errorf("%s %q", res.Phase, res.Message)
	}
	if rec.has(corev1.EventTypeWarning, "leases") {
		t.Errorf("a Warning about the Lease for config its own Rollout alone uses: %v", rec.events)
	}
}

// TestSharedConfigDiscovery: discovery leaves a shared object no controller maintains alone
// (a warning in the message, the step succeeds) and gives one a live controller maintains the
// Rollout's own ReplicaSets only.
func TestSharedConfigDiscovery(t *testing.T) {
	for _, live := range []bool{false, true} {
		var extra []runtime.Object
		if live {
			extra = append(extra, controllerLease(time.Now(), nil))
		}
		c := sharedWorld(false, extra...)
		s := newStep(c)
		s.ControllerLeases = []plugin.LeaseRef{ctlLease}
		res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"discover":{}}`))
		if res.Phase != types.PhaseSuccessful {
			t.Fatalf("live %v: %s %q", live, res.Phase, res.Message)
		}
		refs := owners(t, c, plugin.KindConfigMap, "app-config")
		switch {
		case live && (len(refs) != 2 || !hasOwner(refs, "uid-cur") || !hasOwner(refs, "uid-prev")):
			t.Errorf("live controller: owners %v, want the Rollout's two ReplicaSets", refs)
		case !live && (len(refs) != 0 || !strings.Contains(res.Message, "left alone: ConfigMap app-config is also used by ReplicaSet worker-w1")):
			t.Errorf("no controller: owners %v, message %q", refs, res.Message)
		}
	}
}

type recorder struct{ events []string }

func (r *recorder) Event(_ *v1alpha1.Rollout, eventType, reason, msg string) {
	r.events = append(r.events, eventType+" "+reason+" "+msg)
}

func (r *recorder) has(eventType, part string) bool {
	for _, e := range r.events {
		if strings.HasPrefix(e, eventType+" ") && strings.Contains(e, part) {
			return true
		}
	}
	return false
}
