package step

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// The step's corner cases of "every user counts" (a late object, discovery beside
// allowUnreferenced, credentials, a Deployment orphaning its ReplicaSet, an unserved controller
// kind): each test fails on the code before it.

// TestLateObjectIsCheckedBeforeItsPatch: under --require-opt-in, a listed object that does
// not exist at the label check and is created during the grace without the opt-in label is
// refused, not patched: the object patched is the object checked.
func TestLateObjectIsCheckedBeforeItsPatch(t *testing.T) {
	c := world()
	if err := c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), testNS, "cfg-new"); err != nil {
		t.Fatal(err)
	}
	// The first GET (the label check) finds nothing; the object appears, unlabelled, right after.
	var created atomic.Bool
	c.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "cfg-new" && created.CompareAndSwap(false, true) {
			go func() {
				time.Sleep(100 * time.Millisecond)
				_ = c.Tracker().Add(fixtures.ConfigMap("cfg-new"))
			}()
		}
		return false, nil, nil
	})
	s := newStep(c)
	s.CreationWait = 2 * time.Second // long enough for the object to appear
	s.Policy = plugin.Policy{RequireOptIn: true}
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "refusing to attach ConfigMap cfg-new") {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "cfg-new"); len(refs) != 0 {
		t.Errorf("an object created without the opt-in label during the grace was adopted: %v", refs)
	}
}

// TestDiscoverKeepsAllowUnreferencedTarget: a listed, unreferenced object (allowUnreferenced)
// that discovery also finds is attached to the target, in a run and in a dry run, as the
// message says.
func TestDiscoverKeepsAllowUnreferencedTarget(t *testing.T) {
	c := world(optedIn(fixtures.ConfigMap("extra")))
	cfg := `{"configMaps":["cfg-new","extra"],"allowUnreferenced":true,"discover":{}}`
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(strings.Replace(cfg, `"discover":{}`, `"discover":{},"dryRun":true`, 1)))
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "ConfigMap extra ← web-"+curHash) {
		t.Errorf("dry run: %s %s", res.Phase, res.Message)
	}
	res, _ = newStep(c).Run(fixtures.Rollout(curHash), stepCtx(cfg))
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	if refs := owners(t, c, plugin.KindConfigMap, "extra"); !hasOwner(refs, "uid-cur") {
		t.Errorf("extra owners %v: reported as attached, not attached", refs)
	}
}

// TestCredentialMessageNamesTheSelector: the credential skip names the opt-in selector in
// force, not the default label.
func TestCredentialMessageNamesTheSelector(t *testing.T) {
	spec := fixtures.PodSpec([]string{"cfg-new"}, nil)
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	c := fake.NewClientset(fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, spec), fixtures.ConfigMap("cfg-new"), fixtures.Secret("regcred"))
	s := newStep(c)
	s.Policy = plugin.Policy{OptIn: labels.SelectorFromSet(labels.Set{"example.com/config": "revisioned"})}
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"],"secrets":["regcred"]}`))
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "skipped Secret regcred") || !strings.Contains(res.Message, "example.com/config=revisioned") {
		t.Errorf("%s %s", res.Phase, res.Message)
	}
	if refs := owners(t, c, plugin.KindSecret, "regcred"); len(refs) != 0 {
		t.Errorf("the pull secret was adopted: %v", refs)
	}
}

// TestStepEveryUserCounts: every user of the ConfigMap in the namespace counts. Deployment
// worker's ReplicaSet is another workload's: the step alone refuses, naming it, and writes
// nothing; with a live controller it attaches the Rollout's ReplicaSet only (the controller
// keeps worker's owners), never the ReplicaSet of a Rollout that is gone (another UID: deleted
// and recreated), which is no user at all. A StatefulSet that uses it is refused by name too.
func TestStepEveryUserCounts(t *testing.T) {
	worker := fixtures.ReplicaSet("w1", "uid-worker-rs", "uid-worker", fixtures.PodSpec([]string{"shared"}, nil))
	worker.Name = "worker-w1"
	worker.OwnerReferences[0].APIVersion, worker.OwnerReferences[0].Kind, worker.OwnerReferences[0].Name = "apps/v1", "Deployment", "worker"
	dead := fixtures.ReplicaSet("d1", "uid-dead-rs", "uid-dead", fixtures.PodSpec([]string{"shared"}, nil))
	dead.Name, dead.OwnerReferences[0].Name = "old-d1", "old"
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: testNS, UID: "uid-worker"}}
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
	c := fake.NewClientset(cur, worker, dead, dep, optedIn(fixtures.ConfigMap("shared")))
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "ConfigMap shared is also used by ReplicaSet worker-w1 (of Deployment worker)") ||
		strings.Contains(res.Message, "old-d1") || writes(c) != 0 {
		t.Errorf("no controller: %s %s (%d writes)", res.Phase, res.Message, writes(c))
	}

	c = fake.NewClientset(cur, worker, dead, dep, optedIn(fixtures.ConfigMap("shared")), controllerLease(time.Now(), nil))
	s := newStep(c)
	s.ControllerLeases = []plugin.LeaseRef{ctlLease}
	res, _ = s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("%s %s", res.Phase, res.Message)
	}
	refs := owners(t, c, plugin.KindConfigMap, "shared")
	if len(refs) != 1 || !hasOwner(refs, "uid-cur") {
		t.Errorf("owners %v, want the Rollout's ReplicaSet only (worker's is the controller's to add; the dead Rollout's never)", refs)
	}

	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"other"}, nil)}}}
	cur2 := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"other"}, nil))
	c = fake.NewClientset(cur2, sts, fixtures.ConfigMap("other"))
	res, _ = newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["other"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "ConfigMap other is also used by StatefulSet cache, outside Rollout shop/web") ||
		!strings.Contains(res.Message, "nothing was written") || writes(c) != 0 {
		t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
	}
}

// TestJobMessagesNameTheFlags: the command line's refusals name its flags, not a step config.
func TestJobMessagesNameTheFlags(t *testing.T) {
	rss := []*appsv1.ReplicaSet{fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, nil))}
	users := usageOf(false, rss...)
	a := &plugin.Attacher{Client: clientset.Typed(fake.NewClientset()), Log: quietLog(), CreationWait: shortCreationWait}
	_, err := a.Reconcile(t.Context(), plugin.Request{Workload: plugin.Workload{Kind: plugin.KindRollout, Namespace: testNS, Name: "web", UID: fixtures.RolloutUID},
		Users: users, ReplicaSets: rss, Target: rss[0], Objects: []plugin.Object{{Kind: plugin.KindConfigMap, Name: "nope"}}, Source: "-configmaps/-secrets"})
	if err == nil || strings.Contains(err.Error(), "step config") || !strings.Contains(err.Error(), "-configmaps/-secrets") {
		t.Errorf("%v", err)
	}
}

// Found in review: each of these made the step attach where it must not (or not where it must).

// TestOrphaningDeploymentKeepsItsReplicaSet: a Deployment deleted with --cascade=orphan keeps
// its ReplicaSets (the garbage collector only removes their controller reference): such a
// ReplicaSet is a user like one without a controller, not a gone one.
func TestOrphaningDeploymentKeepsItsReplicaSet(t *testing.T) {
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
	kept := fixtures.ReplicaSet("k1", "uid-kept", "uid-api", fixtures.PodSpec([]string{"shared"}, nil))
	kept.Name = "api-k1"
	kept.OwnerReferences[0].APIVersion, kept.OwnerReferences[0].Kind, kept.OwnerReferences[0].Name = "apps/v1", "Deployment", "api"
	now := metav1.Now()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: testNS, UID: "uid-api", DeletionTimestamp: &now,
		Finalizers: []string{metav1.FinalizerOrphanDependents}}}
	c := fake.NewClientset(cur, kept, dep, fixtures.ConfigMap("shared"))
	// A user outside the Rollout: the step alone refuses, naming it (a gone ReplicaSet would be
	// no user, and the step would attach its own ReplicaSet alone).
	res, _ := newStep(c).Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "also used by ReplicaSet api-k1 (of Deployment api)") || writes(c) != 0 {
		t.Errorf("%s %s (%d writes): the orphaned ReplicaSet must count as a user", res.Phase, res.Message, writes(c))
	}
}

// TestUnservedControllerKindBlocks: a ReplicaSet of an Experiment while the Experiment CRD is
// not served (uninstalled, being reinstalled) still runs its pods: its controller is unknown,
// and it blocks, as in the controller mode.
func TestUnservedControllerKindBlocks(t *testing.T) {
	cur := fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"shared"}, nil))
	exp := fixtures.ReplicaSet("e1", "uid-exp-rs", "uid-exp", fixtures.PodSpec([]string{"shared"}, nil))
	exp.Name = "exp-e1"
	exp.OwnerReferences[0].Kind, exp.OwnerReferences[0].Name = "Experiment", "exp"
	c := fake.NewClientset(cur, exp, fixtures.ConfigMap("shared"))
	s := newStep(c)
	s.Client = func() (plugin.Clients, error) {
		return plugin.Clients{Kube: clientset.Typed(c), Meta: fakemeta.WithoutResources(fakemeta.New(c), "experiments")}, nil
	}
	res, _ := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["shared"]}`))
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "ReplicaSet exp-e1 (controlled by Experiment exp") || writes(c) != 0 {
		t.Errorf("%s %s (%d writes)", res.Phase, res.Message, writes(c))
	}
}
