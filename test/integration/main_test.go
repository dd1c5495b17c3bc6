// Package integration proves ownership and garbage collection against a real control plane:
// etcd, kube-apiserver and kube-controller-manager (with the garbage collector) on 127.0.0.1,
// started by test/support/cluster from binaries built from Go modules.
package integration

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin/step"

	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

var (
	shared    *cluster.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "integration", RolloutCRD: true, Shared: &shared, Err: &sharedErr}))
}

// sharedCluster returns the package's cluster, or skips (fails with CI=true) without one.
func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}

// env is one test's namespace with clients.
type env struct {
	t        *testing.T
	c        *cluster.Cluster
	ns       string
	admin    kubernetes.Interface
	rollouts rolloutsclient.Interface
}

func newEnv(t *testing.T, c *cluster.Cluster) *env {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: c, ns: c.Namespace(t), admin: c.Client(t), rollouts: rc}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// rollout creates a real Rollout object (nothing reconciles it here): its UID is what the
// ReplicaSets' controller references point at, so the garbage collector keeps them.
func (e *env) rollout(name string) *v1alpha1.Rollout {
	e.t.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
	}
	ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).Create(ctx(e.t), ro, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Rollout: %v", err)
	}
	return ro
}

// podSpec mounts the ConfigMaps as volumes and takes the Secrets through envFrom.
var podSpec = fixtures.PodSpec

// replicaSet creates a ReplicaSet of the Rollout as the controller would (label with the
// hash, controller reference to the Rollout), with 0 replicas: no pods are needed.
func (e *env) replicaSet(ro *v1alpha1.Rollout, hash string, spec corev1.PodSpec) *appsv1.ReplicaSet {
	e.t.Helper()
	return e.replicaSetWith(ro, hash, corev1.PodTemplateSpec{Spec: spec}, nil)
}

// replicaSetOf creates the ReplicaSet the Rollouts controller would create for the Rollout's
// current spec.template: the template's hash (argo-rollouts' own function) as the label, so
// FindNewReplicaSet finds it as the controller does.
func (e *env) replicaSetOf(ro *v1alpha1.Rollout) *appsv1.ReplicaSet {
	e.t.Helper()
	hash := rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, ro.Status.CollisionCount)
	return e.replicaSetWith(ro, hash, *ro.Spec.Template.DeepCopy(), nil)
}

func (e *env) replicaSetWith(ro *v1alpha1.Rollout, hash string, tmpl corev1.PodTemplateSpec, finalizers []string) *appsv1.ReplicaSet {
	e.t.Helper()
	zero := int32(0)
	labels := map[string]string{"app": ro.Name, plugin.PodTemplateHashLabel: hash}
	tmpl.Labels = map[string]string{}
	for k, v := range ro.Spec.Template.Labels {
		tmpl.Labels[k] = v
	}
	for k, v := range labels {
		tmpl.Labels[k] = v
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: ro.Name + "-" + hash, Namespace: e.ns, Labels: labels, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ro, v1alpha1.SchemeGroupVersion.WithKind("Rollout"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	rs, err := e.admin.AppsV1().ReplicaSets(e.ns).Create(ctx(e.t), rs, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ReplicaSet: %v", err)
	}
	return rs
}

func (e *env) configMap(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	e.t.Helper()
	cm, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(ctx(e.t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners, Labels: map[string]string{"configmap-attacher/revisioned": "true"}},
		Data:       map[string]string{"app.yaml": "color: " + name}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ConfigMap: %v", err)
	}
	return cm
}

func (e *env) secret(name string) *corev1.Secret {
	e.t.Helper()
	s, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx(e.t), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"token": []byte("s3cr3t-" + name)}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Secret: %v", err)
	}
	return s
}

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return l
}

// newStep returns the step as the plugin process runs it, on the given client config.
func newStep(cfg *rest.Config) *step.Step {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = plugin.DefaultQPS, plugin.DefaultBurst
	return &step.Step{Log: quietLog(), Client: func() (plugin.Clients, error) { return plugin.ClientsForConfig(cfg) }}
}

func run(t *testing.T, s *step.Step, ro *v1alpha1.Rollout, hash string, config any) types.RpcStepResult {
	t.Helper()
	raw, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	r := ro.DeepCopy()
	r.Status.CurrentPodHash = hash
	// The controller passes its Rollout, whose spec.template is the new ReplicaSet's: the step
	// finds its target from it with argo-rollouts' FindNewReplicaSet, as the controller does.
	r.Spec.Template = templateOf(t, ro.Namespace, ro.Spec.Selector, hash)
	res, rerr := s.Run(r, &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: raw})
	if rerr.HasError() {
		t.Fatalf("Run returned an error result: %v", rerr)
	}
	return res
}

func mustSucceed(t *testing.T, res types.RpcStepResult) {
	t.Helper()
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
}

// ownerUIDs returns the UIDs of an object's owners (kind "cm" or "secret").
func (e *env) ownerUIDs(kind, name string) (map[string]bool, string, error) {
	var meta metav1.ObjectMeta
	var err error
	if kind == "secret" {
		var s *corev1.Secret
		s, err = e.admin.CoreV1().Secrets(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			meta = s.ObjectMeta
		}
	} else {
		var cm *corev1.ConfigMap
		cm, err = e.admin.CoreV1().ConfigMaps(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			meta = cm.ObjectMeta
		}
	}
	if err != nil {
		return nil, "", err
	}
	uids := map[string]bool{}
	for _, r := range meta.OwnerReferences {
		uids[string(r.UID)] = true
	}
	return uids, meta.ResourceVersion, nil
}

// waitGone waits until the garbage collector has deleted the object.
func (e *env) waitGone(kind, name string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, err := e.ownerUIDs(kind, name)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s not garbage-collected after 30s (err %v)", kind, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stillThere checks, after giving the garbage collector time to act, that the object exists.
func (e *env) stillThere(kind, name string, wait time.Duration) {
	e.t.Helper()
	time.Sleep(wait)
	if _, _, err := e.ownerUIDs(kind, name); err != nil {
		e.t.Fatalf("%s %s should have survived: %v", kind, name, err)
	}
}

func (e *env) deleteRS(rs *appsv1.ReplicaSet) {
	e.t.Helper()
	if err := e.admin.AppsV1().ReplicaSets(e.ns).Delete(ctx(e.t), rs.Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete ReplicaSet %s: %v", rs.Name, err)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// templateOf is the pod template of the Rollout's ReplicaSet labelled with hash (empty when
// there is none yet: the step then waits for it).
func templateOf(t *testing.T, ns string, sel *metav1.LabelSelector, hash string) corev1.PodTemplateSpec {
	t.Helper()
	if sel == nil {
		return corev1.PodTemplateSpec{}
	}
	l, err := shared.Client(t).AppsV1().ReplicaSets(ns).List(ctx(t), metav1.ListOptions{LabelSelector: plugin.PodTemplateHashLabel + "=" + hash})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range l.Items {
		return rs.Spec.Template
	}
	return corev1.PodTemplateSpec{}
}

// waitObserved waits until kube-controller-manager has written the ReplicaSet's status for
// its generation (it does so once, shortly after the create).
func (e *env) waitObserved(rs *appsv1.ReplicaSet) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := e.admin.AppsV1().ReplicaSets(e.ns).Get(ctx(e.t), rs.Name, metav1.GetOptions{})
		if err == nil && cur.Status.ObservedGeneration == cur.Generation {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("ReplicaSet %s: status not observed after 30s (%v)", rs.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
