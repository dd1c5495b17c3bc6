package controllermode

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// labelRevision is the revision label of the objects these tests create.
const labelRevision = "test/revision"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20 ms; after timeout it fails with cond's last description.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// app is a workload in a test namespace whose revision N uses ConfigMap <name>-config-N
// (volume) and Secret <name>-secret-N (envFrom), both opted in.
type app struct {
	t        *testing.T
	e        *env
	ns, name string
	kube     kubernetes.Interface
	ro       rolloutsclient.Interface
	replicas int32
}

func newApp(t *testing.T, e *env, ns, name string) *app {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &app{t: t, e: e, ns: ns, name: name, kube: e.c.Client(t), ro: rc, replicas: 2}
}

// namespace creates the test's namespace; when the test fails it logs the controller's lines
// about it.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns := e.c.Namespace(t)
	cluster.LogLinesOnFailure(t, "controller", e.ctl.LogPath, e.ctl.Log, ns, 60)
	return ns
}

func (a *app) cm(rev int) string     { return fmt.Sprintf("%s-config-%d", a.name, rev) }
func (a *app) secret(rev int) string { return fmt.Sprintf("%s-secret-%d", a.name, rev) }
func (a *app) objects(rev int) []cluster.ConfigRef {
	return []cluster.ConfigRef{{Kind: "ConfigMap", Name: a.cm(rev)}, {Kind: "Secret", Name: a.secret(rev)}}
}

func (a *app) createConfig(rev int) {
	a.t.Helper()
	createConfig(a.t, a.kube, a.ns, a.cm(rev), a.secret(rev), map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: a.name, labelRevision: strconv.Itoa(rev)})
}

func createConfig(t *testing.T, kube kubernetes.Interface, ns, cm, secret string, l map[string]string) {
	t.Helper()
	ctx := ctxT(t)
	if cm != "" {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: l},
			Data: map[string]string{"app.conf": cm}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ConfigMap %s: %v", cm, err)
		}
	}
	if secret != "" {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Labels: l},
			StringData: map[string]string{"TOKEN": secret}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Secret %s: %v", secret, err)
		}
	}
}

// podSpec uses ConfigMap cm and Secret secret (an empty name: none) in pods that run.
var podSpec = fixtures.RunnablePodSpec

func (a *app) template(rev int) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: a.name}}, Spec: podSpec(a.cm(rev), a.secret(rev))}
}

// --- Rollouts ---

func pauseSteps() []v1alpha1.CanaryStep { // setWeight 50, pause {}
	w := int32(50)
	return []v1alpha1.CanaryStep{{SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{}}}
}

func (a *app) createRollout(strategy v1alpha1.RolloutStrategy, mutate func(*v1alpha1.Rollout)) {
	a.t.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: a.ns},
		Spec: v1alpha1.RolloutSpec{Replicas: &a.replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: a.name}},
			Template: a.template(1), Strategy: strategy},
	}
	if mutate != nil {
		mutate(ro)
	}
	if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Create(ctxT(a.t), ro, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("create Rollout: %v", err)
	}
}

func (a *app) update(change func(*v1alpha1.Rollout)) {
	a.t.Helper()
	if err := cluster.UpdateRollout(context.Background(), a.ro, a.ns, a.name, change); err != nil {
		a.t.Fatal(err)
	}
}

// deploy applies revision rev's pod template (as a GitOps sync does).
func (a *app) deploy(rev int) {
	a.t.Helper()
	a.update(func(ro *v1alpha1.Rollout) { ro.Spec.Template = a.template(rev) })
}

func (a *app) get() *v1alpha1.Rollout {
	a.t.Helper()
	ro, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Get(context.Background(), a.name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatalf("get Rollout: %v", err)
	}
	return ro
}

func (a *app) patchStatus(patch string) {
	a.t.Helper()
	if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Patch(context.Background(), a.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		a.t.Fatalf("patch status %s: %v", patch, err)
	}
}

// promoteFull is `kubectl argo rollouts promote --full`.
func (a *app) promoteFull() { a.t.Helper(); a.patchStatus(`{"status":{"promoteFull":true}}`) }

// promote is `kubectl argo rollouts promote` on a paused Rollout.
func (a *app) promote() {
	a.t.Helper()
	a.patchStatus(`{"status":{"pauseConditions":null}}`)
	if a.get().Spec.Paused {
		if _, err := a.ro.ArgoprojV1alpha1().Rollouts(a.ns).Patch(context.Background(), a.name, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
			a.t.Fatal(err)
		}
	}
}

// owned returns the workload's ReplicaSets (controller reference to it).
func (a *app) replicaSets(uid types.UID) []appsv1.ReplicaSet {
	a.t.Helper()
	rss, err := cluster.ControlledReplicaSets(context.Background(), a.kube, a.ns, a.name, uid)
	if err != nil {
		a.t.Fatal(err)
	}
	return rss
}

func (a *app) rolloutUID() types.UID { return a.get().UID }

// rsFor returns the workload's ReplicaSet whose template uses revision rev's ConfigMap (nil if none).
func (a *app) rsFor(uid types.UID, rev int) *appsv1.ReplicaSet {
	a.t.Helper()
	return cluster.ReplicaSetUsingConfigMap(a.replicaSets(uid), a.cm(rev))
}

func (a *app) waitRS(uid types.UID, rev int) *appsv1.ReplicaSet {
	a.t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(a.t, 60*time.Second, fmt.Sprintf("a ReplicaSet of %s for revision %d", a.name, rev), func() (bool, string) {
		rs = a.rsFor(uid, rev)
		return rs != nil, ""
	})
	return rs
}

// waitHealthy waits until revision rev is the Rollout's stable, current and fully available.
func (a *app) waitHealthy(rev int) *appsv1.ReplicaSet {
	a.t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(a.t, 90*time.Second, fmt.Sprintf("Rollout %s Healthy at revision %d", a.name, rev), func() (bool, string) {
		ro := a.get()
		rs = a.rsFor(ro.UID, rev)
		if rs == nil {
			return false, cluster.RolloutState(ro) + "; no ReplicaSet for the revision"
		}
		return cluster.RolloutHealthyAt(ro, rs, a.replicas), fmt.Sprintf("%s; rs %s available %d", cluster.RolloutState(ro), rs.Name, rs.Status.AvailableReplicas)
	})
	return rs
}

// --- ownership ---

// meta returns an object's metadata (nil when it does not exist).
func getMeta(t *testing.T, kube kubernetes.Interface, ns string, r cluster.ConfigRef) *metav1.ObjectMeta {
	t.Helper()
	var m metav1.ObjectMeta
	var err error
	if r.Kind == "Secret" {
		var s *corev1.Secret
		if s, err = kube.CoreV1().Secrets(ns).Get(context.Background(), r.Name, metav1.GetOptions{}); err == nil {
			m = s.ObjectMeta
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = kube.CoreV1().ConfigMaps(ns).Get(context.Background(), r.Name, metav1.GetOptions{}); err == nil {
			m = cm.ObjectMeta
		}
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", r, err)
	}
	return &m
}

// hasOwner reports whether refs has the reference the controller writes for rs: apps/v1
// ReplicaSet, name and UID, not a controller, no blockOwnerDeletion.
func hasOwner(refs []metav1.OwnerReference, rs *appsv1.ReplicaSet) bool {
	for _, r := range refs {
		if r.UID == rs.UID {
			return r.APIVersion == "apps/v1" && r.Kind == "ReplicaSet" && r.Name == rs.Name &&
				(r.Controller == nil || !*r.Controller) && r.BlockOwnerDeletion == nil
		}
	}
	return false
}

func ownerNames(refs []metav1.OwnerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Kind+"/"+r.Name)
	}
	sort.Strings(out)
	return out
}

// waitOwned waits until every object carries rs's owner reference, and returns how long it took.
func waitOwned(t *testing.T, kube kubernetes.Interface, ns string, rs *appsv1.ReplicaSet, timeout time.Duration, objs ...cluster.ConfigRef) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("%v owned by ReplicaSet %s", objs, rs.Name), func() (bool, string) {
		var state []string
		ok := true
		for _, r := range objs {
			m := getMeta(t, kube, ns, r)
			if m == nil {
				t.Fatalf("%s was deleted", r)
			}
			ok = ok && hasOwner(m.OwnerReferences, rs)
			state = append(state, fmt.Sprintf("%s owners %v", r, ownerNames(m.OwnerReferences)))
		}
		return ok, strings.Join(state, "; ")
	})
}

func waitGone(t *testing.T, kube kubernetes.Interface, ns string, objs ...cluster.ConfigRef) {
	t.Helper()
	for _, r := range objs {
		eventually(t, 60*time.Second, fmt.Sprintf("%s garbage-collected", r), func() (bool, string) {
			m := getMeta(t, kube, ns, r)
			if m == nil {
				return true, ""
			}
			return false, fmt.Sprintf("owners %v", ownerNames(m.OwnerReferences))
		})
	}
}

// pruneLikeArgoCD deletes this app's opted-in objects that are not in the new "Git" (revision
// < current) and carry no owner reference (cluster.PruneLikeArgoCD). It returns what it deleted.
func (a *app) pruneLikeArgoCD(current int) []string {
	return cluster.PruneLikeArgoCD(a.t, ctxT(a.t), a.kube, a.ns, a.name, labelRevision, current)
}

// pods lists the live pods of a ReplicaSet (by its pod-template-hash label).
func (a *app) pods(rs *appsv1.ReplicaSet, hashLabel string) []corev1.Pod {
	a.t.Helper()
	pods, err := cluster.LivePods(context.Background(), a.kube, a.ns,
		labels.SelectorFromSet(map[string]string{hashLabel: rs.Labels[hashLabel]}).String())
	if err != nil {
		a.t.Fatal(err)
	}
	return pods
}

// --- ReplicaSets created directly ---

// holder is a paused Deployment with 0 replicas: the controller (and owner) of ReplicaSets a
// test creates itself. Paused, the Deployment controller creates no ReplicaSet of its own; with
// revisionHistoryLimit 100 it deletes none of ours.
func holder(t *testing.T, kube kubernetes.Interface, ns, name string) *appsv1.Deployment {
	t.Helper()
	zero, keep := int32(0), int32(100)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Paused: true, RevisionHistoryLimit: &keep,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/holder:1"}}}}}}
	d, err := kube.AppsV1().Deployments(ns).Create(ctxT(t), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment %s: %v", name, err)
	}
	return d
}

// directRS creates a ReplicaSet (0 replicas) controlled by d, as the Deployment controller
// would, with the given pod spec.
func directRS(t *testing.T, kube kubernetes.Interface, d *appsv1.Deployment, hash string, spec corev1.PodSpec, mutate ...func(*appsv1.ReplicaSet)) *appsv1.ReplicaSet {
	t.Helper()
	zero := int32(0)
	l := map[string]string{cluster.LabelApp: d.Name, "pod-template-hash": hash}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-" + hash, Namespace: d.Namespace, Labels: l,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec}},
	}
	for _, m := range mutate {
		m(rs)
	}
	rs, err := kube.AppsV1().ReplicaSets(d.Namespace).Create(ctxT(t), rs, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ReplicaSet: %v", err)
	}
	return rs
}

func envFromCM(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func optionalEnvFromCM(name string) corev1.EnvFromSource {
	yes := true
	s := envFromCM(name)
	s.ConfigMapRef.Optional = &yes
	return s
}
