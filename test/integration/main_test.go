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

// Env is one test's namespace with clients.
type Env struct {
	T        *testing.T
	C        *cluster.Cluster
	NS       string
	Admin    kubernetes.Interface
	Rollouts rolloutsclient.Interface
}

func NewEnv(t *testing.T, c *cluster.Cluster) *Env {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, C: c, NS: c.Namespace(t), Admin: c.Client(t), Rollouts: rc}
}

func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// Rollout creates a real Rollout object (nothing reconciles it here): its UID is what the
// ReplicaSets' controller references point at, so the garbage collector keeps them.
func (e *Env) Rollout(name string) *v1alpha1.Rollout {
	e.T.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
	}
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Create(Ctx(e.T), ro, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("create Rollout: %v", err)
	}
	return ro
}

// PodSpec mounts the ConfigMaps as volumes and takes the Secrets through envFrom.
var PodSpec = fixtures.PodSpec

// ReplicaSet creates a ReplicaSet of the Rollout as the controller would (label with the
// hash, controller reference to the Rollout), with 0 replicas: no pods are needed.
func (e *Env) ReplicaSet(ro *v1alpha1.Rollout, hash string, spec corev1.PodSpec) *appsv1.ReplicaSet {
	e.T.Helper()
	return e.ReplicaSetWith(ro, hash, corev1.PodTemplateSpec{Spec: spec}, nil)
}

// ReplicaSetOf creates the ReplicaSet the Rollouts controller would create for the Rollout's
// current spec.template: the template's hash (argo-rollouts' own function) as the label, so
// FindNewReplicaSet finds it as the controller does.
func (e *Env) ReplicaSetOf(ro *v1alpha1.Rollout) *appsv1.ReplicaSet {
	e.T.Helper()
	hash := rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, ro.Status.CollisionCount)
	return e.ReplicaSetWith(ro, hash, *ro.Spec.Template.DeepCopy(), nil)
}

func (e *Env) ReplicaSetWith(ro *v1alpha1.Rollout, hash string, tmpl corev1.PodTemplateSpec, finalizers []string) *appsv1.ReplicaSet {
	e.T.Helper()
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
		ObjectMeta: metav1.ObjectMeta{Name: ro.Name + "-" + hash, Namespace: e.NS, Labels: labels, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ro, v1alpha1.SchemeGroupVersion.WithKind("Rollout"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	rs, err := e.Admin.AppsV1().ReplicaSets(e.NS).Create(Ctx(e.T), rs, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("create ReplicaSet: %v", err)
	}
	return rs
}

func (e *Env) ConfigMap(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	e.T.Helper()
	cm, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(Ctx(e.T), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners, Labels: map[string]string{"configmap-attacher/revisioned": "true"}},
		Data:       map[string]string{"app.yaml": "color: " + name}}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("create ConfigMap: %v", err)
	}
	return cm
}

func (e *Env) Secret(name string) *corev1.Secret {
	e.T.Helper()
	s, err := e.Admin.CoreV1().Secrets(e.NS).Create(Ctx(e.T), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"token": []byte("s3cr3t-" + name)}}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("create Secret: %v", err)
	}
	return s
}

func QuietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return l
}

// NewStep returns the step as the plugin process runs it, on the given client config.
func NewStep(cfg *rest.Config) *step.Step {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = plugin.DefaultQPS, plugin.DefaultBurst
	return &step.Step{Log: QuietLog(), Client: func() (plugin.Clients, error) { return plugin.ClientsForConfig(cfg) }}
}

func Run(t *testing.T, s *step.Step, ro *v1alpha1.Rollout, hash string, config any) types.RpcStepResult {
	t.Helper()
	raw, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	r := ro.DeepCopy()
	r.Status.CurrentPodHash = hash
	// The controller passes its Rollout, whose spec.template is the new ReplicaSet's: the step
	// finds its target from it with argo-rollouts' FindNewReplicaSet, as the controller does.
	r.Spec.Template = TemplateOf(t, ro.Namespace, ro.Spec.Selector, hash)
	res, rerr := s.Run(r, &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: raw})
	if rerr.HasError() {
		t.Fatalf("Run returned an error result: %v", rerr)
	}
	return res
}

func MustSucceed(t *testing.T, res types.RpcStepResult) {
	t.Helper()
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
}

// OwnerUIDs returns the UIDs of an object's owners (kind "cm" or "secret").
func (e *Env) OwnerUIDs(kind, name string) (map[string]bool, string, error) {
	var meta metav1.ObjectMeta
	var err error
	if kind == "secret" {
		var s *corev1.Secret
		s, err = e.Admin.CoreV1().Secrets(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			meta = s.ObjectMeta
		}
	} else {
		var cm *corev1.ConfigMap
		cm, err = e.Admin.CoreV1().ConfigMaps(e.NS).Get(context.Background(), name, metav1.GetOptions{})
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

// WaitGone waits until the garbage collector has deleted the object.
func (e *Env) WaitGone(kind, name string) {
	e.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, err := e.OwnerUIDs(kind, name)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("%s %s not garbage-collected after 30s (err %v)", kind, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StillThere checks, after giving the garbage collector time to act, that the object exists.
func (e *Env) StillThere(kind, name string, wait time.Duration) {
	e.T.Helper()
	time.Sleep(wait)
	if _, _, err := e.OwnerUIDs(kind, name); err != nil {
		e.T.Fatalf("%s %s should have survived: %v", kind, name, err)
	}
}

func (e *Env) DeleteRS(rs *appsv1.ReplicaSet) {
	e.T.Helper()
	if err := e.Admin.AppsV1().ReplicaSets(e.NS).Delete(Ctx(e.T), rs.Name, metav1.DeleteOptions{}); err != nil {
		e.T.Fatalf("delete ReplicaSet %s: %v", rs.Name, err)
	}
}

func JSONMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TemplateOf is the pod template of the Rollout's ReplicaSet labelled with hash (empty when
// there is none yet: the step then waits for it).
func TemplateOf(t *testing.T, ns string, sel *metav1.LabelSelector, hash string) corev1.PodTemplateSpec {
	t.Helper()
	if sel == nil {
		return corev1.PodTemplateSpec{}
	}
	l, err := shared.Client(t).AppsV1().ReplicaSets(ns).List(Ctx(t), metav1.ListOptions{LabelSelector: plugin.PodTemplateHashLabel + "=" + hash})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range l.Items {
		return rs.Spec.Template
	}
	return corev1.PodTemplateSpec{}
}

// WaitObserved waits until kube-controller-manager has written the ReplicaSet's status for
// its generation (it does so once, shortly after the create).
func (e *Env) WaitObserved(rs *appsv1.ReplicaSet) {
	e.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(Ctx(e.T), rs.Name, metav1.GetOptions{})
		if err == nil && cur.Status.ObservedGeneration == cur.Generation {
			return
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("ReplicaSet %s: status not observed after 30s (%v)", rs.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
