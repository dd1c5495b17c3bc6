// Package realapi is what the tests against the real control plane share beyond the cluster
// itself: Env, one test's namespace with its clients, and the helpers that create workloads,
// run each mode (the step in process, the command line, audit) and read back owner
// references. test/core, test/cli, test/audit and test/faults use it; it is a library, not a
// test package, so no test package imports another.
package realapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	rbacv1 "k8s.io/api/rbac/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/sirupsen/logrus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/plugin/step"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
	corev1 "k8s.io/api/core/v1"
)

// shared is the test package's cluster (Main). Run also reads the target's template through
// its admin client, so that a test counting the step's requests counts only the step's.
var (
	shared    *cluster.Cluster
	sharedErr error
)

// Main is the TestMain of a package of these tests: one cluster with the Rollout CRD, shared
// by its tests.
func Main(m *testing.M, name string) int {
	return cluster.Main(m, cluster.MainOptions{Name: name, RolloutCRD: true, Shared: &shared, Err: &sharedErr})
}

// Shared returns the package's cluster, or skips (fails with CI=true) without one.
func Shared(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Require(t, shared, sharedErr)
}

func RunAudit(t *testing.T, cli *cmd.Audit, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	cli.Stdout, cli.Stderr = &out, &errb
	code := cli.Main(args)
	return code, out.String(), errb.String()
}

// CountedAudit is the audit command on clients whose requests the counter sees; ConfigMaps
// and Secrets are listed through the metadata client, as the default clients do.
func CountedAudit(cfg *rest.Config, counter *cluster.Counter) *cmd.Audit {
	cfg = counter.Wrap(cfg)
	return &cmd.Audit{
		Clients: cmd.Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) { return clientset.ForConfig(cfg) }},
	}
}

func AuditJSON(t *testing.T, out string) audit.Report {
	t.Helper()
	var rep audit.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	return rep
}

// ObjectState is what must not change except the owner references -fix adds.
type ObjectState struct {
	RV     string
	Data   string
	Labels map[string]string
	Owners map[k8stypes.UID]bool // owner UID → controller
}

func (e *Env) State(kind, name string) ObjectState {
	e.T.Helper()
	var meta metav1.ObjectMeta
	var data any
	if kind == "secret" {
		s, err := e.Admin.CoreV1().Secrets(e.NS).Get(Ctx(e.T), name, metav1.GetOptions{})
		if err != nil {
			e.T.Fatal(err)
		}
		meta, data = s.ObjectMeta, s.Data
	} else {
		c, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(Ctx(e.T), name, metav1.GetOptions{})
		if err != nil {
			e.T.Fatal(err)
		}
		meta, data = c.ObjectMeta, c.Data
	}
	b, _ := json.Marshal(data)
	st := ObjectState{RV: meta.ResourceVersion, Data: string(b), Labels: meta.Labels, Owners: map[k8stypes.UID]bool{}}
	for _, r := range meta.OwnerReferences {
		st.Owners[r.UID] = r.Controller != nil && *r.Controller
	}
	return st
}

// Revisioned creates a ReplicaSet of the Rollout with the revision annotation the controller sets.
func (e *Env) Revisioned(ro *v1alpha1.Rollout, hash, rev string, spec corev1.PodSpec) *appsv1.ReplicaSet {
	e.T.Helper()
	rs := e.ReplicaSet(ro, hash, spec)
	// A patch: the ReplicaSet controller updates the status meanwhile.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, plugin.RevisionAnnotation, rev)
	rs, err := e.Admin.AppsV1().ReplicaSets(e.NS).Patch(Ctx(e.T), rs.Name, k8stypes.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return rs
}

func RsOwner(rs *appsv1.ReplicaSet, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &controller}
}

// Snapshot returns the resourceVersion of every ConfigMap, Secret and ReplicaSet in ns.
func (e *Env) Snapshot() map[string]string {
	e.T.Helper()
	rvs := map[string]string{}
	cms, err := e.Admin.CoreV1().ConfigMaps(e.NS).List(Ctx(e.T), metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, o := range cms.Items {
		rvs["cm/"+o.Name] = o.ResourceVersion
	}
	secs, _ := e.Admin.CoreV1().Secrets(e.NS).List(Ctx(e.T), metav1.ListOptions{})
	for _, o := range secs.Items {
		rvs["secret/"+o.Name] = o.ResourceVersion
	}
	rss, _ := e.Admin.AppsV1().ReplicaSets(e.NS).List(Ctx(e.T), metav1.ListOptions{})
	for _, o := range rss.Items {
		rvs["rs/"+o.Name] = o.ResourceVersion
	}
	return rvs
}

func RolloutsClient(t *testing.T, cfg *rest.Config) rolloutsclient.Interface {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// SettledRollout creates Rollout "web" with the pod template tmpl, the ReplicaSet the
// controller would create for it, and the status the controller writes once it has observed
// that generation.
func (e *Env) SettledRollout(tmpl corev1.PodTemplateSpec) (*v1alpha1.Rollout, *appsv1.ReplicaSet) {
	e.T.Helper()
	ro := e.Rollout("web")
	ro.Spec.Template.Annotations = tmpl.Annotations
	ro.Spec.Template.Spec = tmpl.Spec
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(e.T), ro, metav1.UpdateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	rs := e.ReplicaSetOf(ro)
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(e.T), ro, metav1.UpdateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	return ro, rs
}

// CliRun is the command line running in the background.
type CliRun struct {
	done           chan int
	Stdout, Stderr cluster.SyncBuffer
}

func StartCLI(args ...string) *CliRun {
	r := &CliRun{done: make(chan int, 1)}
	go func() {
		r.done <- (&cmd.Job{Stdout: &r.Stdout, Stderr: &r.Stderr, PollInterval: 200 * time.Millisecond}).Main(args)
	}()
	return r
}

// ExitCode waits (bounded) for the command line to finish.
func (r *CliRun) ExitCode(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("the command line did not finish: %s", r.Stderr.String())
		return -1
	}
}

// Running fails the test if the command line has already finished.
func (r *CliRun) Running(t *testing.T, why string) {
	t.Helper()
	select {
	case code := <-r.done:
		t.Fatalf("%s, yet the command line finished (exit %d): %s %s", why, code, r.Stdout.String(), r.Stderr.String())
	default:
	}
}

// JobKubeconfig is the Job's identity with exactly examples/job.yaml's RBAC.
func JobKubeconfig(t *testing.T, c *cluster.Cluster, ns string) string {
	t.Helper()
	jobCfg := c.ServiceAccountConfig(t, ns, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "job.yaml"), ns)
	c.WaitForRBAC(t, "system:serviceaccount:"+ns+":configmap-attacher-job", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}}})
	return c.WriteKubeconfig(t, jobCfg)
}

// FaultWorld is a Rollout whose current ReplicaSet uses n ConfigMaps.
type FaultWorld struct {
	Env        *Env
	Rollout    *v1alpha1.Rollout
	ReplicaSet *appsv1.ReplicaSet
	Names      []string
	Data       map[string]string // name → the data it was created with
}

func NewFaultWorld(t *testing.T, e *Env, n int) *FaultWorld {
	w := &FaultWorld{Env: e, Rollout: e.Rollout("web"), Data: map[string]string{}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cfg-%03d", i)
		w.Names = append(w.Names, name)
		w.Data[name] = e.ConfigMap(name).Data["app.yaml"]
	}
	w.ReplicaSet = e.ReplicaSet(w.Rollout, "cur111", PodSpec(w.Names, nil))
	return w
}

// Check: every object exists, is owned exactly once by the ReplicaSet, data unchanged.
func (w *FaultWorld) Check(t *testing.T) {
	t.Helper()
	list, err := w.Env.Admin.CoreV1().ConfigMaps(w.Env.NS).List(Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		got[cm.Name] = cm
	}
	for _, n := range w.Names {
		cm, ok := got[n]
		if !ok {
			t.Errorf("%s was deleted", n)
			continue
		}
		if cm.Data["app.yaml"] != w.Data[n] || len(cm.Data) != 1 {
			t.Errorf("%s data changed: %v", n, cm.Data)
		}
		count := 0
		for _, r := range cm.OwnerReferences {
			if r.UID == w.ReplicaSet.UID {
				count++
			}
		}
		if count != 1 || len(cm.OwnerReferences) != 1 {
			t.Errorf("%s owners %v, want the ReplicaSet exactly once", n, cm.OwnerReferences)
		}
	}
}

// RetryLikeController calls Run until it is no longer an error result, as the controller does
// (it waits 30 s between tries; here 200 ms), and returns the final result.
func RetryLikeController(t *testing.T, call func() (types.RpcStepResult, types.RpcError)) (types.RpcStepResult, int) {
	t.Helper()
	for i := 1; i <= 60; i++ {
		res, rerr := call()
		if !rerr.HasError() {
			return res, i
		}
		t.Logf("try %d: error result (the controller retries): %v", i, rerr)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the step never stopped erroring")
	return types.RpcStepResult{}, 0
}

type RoundTrip func(*http.Request) (*http.Response, error)

func (f RoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func StepCtxFor(t *testing.T, config map[string]any) *types.RpcStepContext {
	t.Helper()
	raw, err := JSONMarshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: raw}
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
	// The plugin's default --controller-lease, as the binary has it.
	return &step.Step{Log: QuietLog(), Client: func() (plugin.Clients, error) { return plugin.ClientsForConfig(cfg) },
		ControllerLeases: plugin.DefaultControllerLeases}
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
	r.Spec.Template = TemplateOf(t, shared.Client(t), ro.Namespace, ro.Spec.Selector, hash)
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
func TemplateOf(t *testing.T, kube kubernetes.Interface, ns string, sel *metav1.LabelSelector, hash string) corev1.PodTemplateSpec {
	t.Helper()
	if sel == nil {
		return corev1.PodTemplateSpec{}
	}
	l, err := kube.AppsV1().ReplicaSets(ns).List(Ctx(t), metav1.ListOptions{LabelSelector: plugin.PodTemplateHashLabel + "=" + hash})
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

func RepoFile(parts ...string) string {
	return filepath.Join(append([]string{cluster.RepoRoot()}, parts...)...)
}

// ControllerIdentity returns a client config for a ServiceAccount "argo-rollouts" in the
// test's namespace bound to the controller's ClusterRole plus the example RBAC files given:
// exactly what the plugin process has in a real installation.
func ControllerIdentity(t *testing.T, c *cluster.Cluster, ns string, examples ...string) *rest.Config {
	t.Helper()
	cfg := c.ServiceAccountConfig(t, ns, "argo-rollouts", nil, nil)
	dir, err := cluster.RolloutsModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyYAMLFile(t, nil, filepath.Join(dir, "manifests", "role", "argo-rollouts-clusterrole.yaml"), ns)
	c.ApplyYAML(t, nil, []byte(cluster.RolloutsControllerBinding), ns)
	for _, ex := range examples {
		c.ApplyYAMLFile(t, nil, RepoFile("examples", ex), ns)
	}
	user := "system:serviceaccount:" + ns + ":argo-rollouts"
	c.WaitForRBAC(t, user, ns, []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}}})
	if len(examples) > 0 {
		c.WaitForRBAC(t, user, ns, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}}})
	}
	return cfg
}

// PluginBinary is the configmap-attacher binary (cluster.PluginBinary: CMA_PLUGIN_BINARY, or
// built once per source tree).
func PluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatalf("the plugin binary: %v", err)
	}
	return bin
}

// ControllerMode runs `configmap-attacher controller` (the real binary, examples/
// controller.yaml's identity) watching only the test's namespace, until the test ends.
func (e *Env) ControllerMode(extra ...string) *cluster.ControllerProcess {
	e.T.Helper()
	bin := PluginBinary(e.T)
	// The shared cluster has only the Rollout CRD; the controller mode is tested with the
	// Experiment CRD installed too, as Argo Rollouts installs it.
	dir, err := cluster.RolloutsModuleDir()
	if err != nil {
		e.T.Fatal(err)
	}
	if err := cluster.InstallCRDFiles(e.C, filepath.Join(dir, "manifests", "crds", "experiment-crd.yaml")); err != nil {
		e.T.Fatal(err)
	}
	idCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := cluster.ControllerModeIdentity(idCtx, e.C, e.Admin)
	if err != nil {
		e.T.Fatal(err)
	}
	logPath := filepath.Join(e.C.Dir, "controller-"+e.NS+".log")
	args := append([]string{"-kubeconfig", kc, "-leader-elect=false", "-namespace", e.NS, "-log-level", "debug"}, extra...)
	cp, err := cluster.LaunchController(bin, e.NS, logPath, []string{"KUBECONFIG=/nonexistent"}, args...)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(cp.Stop)
	cluster.LogLinesOnFailure(e.T, "controller mode", logPath, cp.Log, "", 60)
	if err := cp.WaitReady(90 * time.Second); err != nil {
		e.T.Fatal(err)
	}
	return cp
}

// OwnerHistory records every ownerReferences list a ConfigMap shows on a watch: what each
// write put there, so a test can say that no write ever named some ReplicaSet.
type OwnerHistory struct {
	mu   sync.Mutex
	seen [][]metav1.OwnerReference
}

func (h *OwnerHistory) Named(uid k8stypes.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, refs := range h.seen {
		for _, r := range refs {
			if r.UID == uid {
				return true
			}
		}
	}
	return false
}

func (h *OwnerHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s []string
	for _, refs := range h.seen {
		var n []string
		for _, r := range refs {
			n = append(n, r.Kind+"/"+r.Name)
		}
		s = append(s, "["+strings.Join(n, ",")+"]")
	}
	return strings.Join(s, " ")
}

// WatchOwners starts recording the ConfigMap's owner references from resourceVersion rv.
func (e *Env) WatchOwners(name, rv string) *OwnerHistory {
	e.T.Helper()
	wctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(cancel)
	w, err := e.Admin.CoreV1().ConfigMaps(e.NS).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	if err != nil {
		e.T.Fatal(err)
	}
	h := &OwnerHistory{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				h.mu.Lock()
				h.seen = append(h.seen, cm.OwnerReferences)
				h.mu.Unlock()
			}
		}
	}()
	return h
}

// ClearOwners removes every owner reference (admin), so that the next mode starts from an
// unowned object.
func (e *Env) ClearOwners(kind, name string) {
	e.T.Helper()
	patch := []byte(`{"metadata":{"ownerReferences":null}}`)
	var err error
	if kind == "secret" {
		_, err = e.Admin.CoreV1().Secrets(e.NS).Patch(Ctx(e.T), name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = e.Admin.CoreV1().ConfigMaps(e.NS).Patch(Ctx(e.T), name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		e.T.Fatal(err)
	}
}

// WaitOwners waits until the object's owner UIDs are exactly want.
func (e *Env) WaitOwners(kind, name string, timeout time.Duration, want ...k8stypes.UID) {
	e.T.Helper()
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cluster.WaitUntil(e.T, c, 100*time.Millisecond, fmt.Sprintf("%s %s owned by exactly %v", kind, name, want), func() (bool, string) {
		uids, _, err := e.OwnerUIDs(kind, name)
		if err != nil {
			return false, err.Error()
		}
		if len(uids) != len(want) {
			return false, fmt.Sprintf("owners %v", uids)
		}
		for _, u := range want {
			if !uids[string(u)] {
				return false, fmt.Sprintf("owners %v", uids)
			}
		}
		return true, ""
	})
}

// WaitOwnersAndAnchors waits until the object's owners are want plus, beside them, at least
// one anchor (the controller mode: every user owns, a workload's current template through its
// anchor) and nothing else.
func (e *Env) WaitOwnersAndAnchors(kind, name string, timeout time.Duration, want ...k8stypes.UID) {
	e.T.Helper()
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cluster.WaitUntil(e.T, c, 100*time.Millisecond, fmt.Sprintf("%s %s owned by %v and anchors", kind, name, want), func() (bool, string) {
		uids, _, err := e.OwnerUIDs(kind, name)
		if err != nil {
			return false, err.Error()
		}
		anchors, err := e.Admin.AppsV1().ControllerRevisions(e.NS).List(context.Background(), metav1.ListOptions{LabelSelector: plugin.AnchorLabel + "=true"})
		if err != nil {
			return false, err.Error()
		}
		isAnchor := map[string]bool{}
		for _, a := range anchors.Items {
			isAnchor[string(a.UID)] = true
		}
		rest, seenAnchor := map[string]bool{}, false
		for u := range uids {
			rest[u] = true
		}
		for _, u := range want {
			if !rest[string(u)] {
				return false, fmt.Sprintf("owners %v", uids)
			}
			delete(rest, string(u))
		}
		for u := range rest {
			if !isAnchor[u] {
				return false, fmt.Sprintf("owners %v (%s is no anchor)", uids, u)
			}
			seenAnchor = true
		}
		return seenAnchor, fmt.Sprintf("owners %v", uids)
	})
}

// ExactOwners fails unless the object's owner UIDs are exactly want.
func (e *Env) ExactOwners(what, kind, name string, want ...k8stypes.UID) {
	e.T.Helper()
	uids, _, err := e.OwnerUIDs(kind, name)
	if err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
	ok := len(uids) == len(want)
	for _, u := range want {
		ok = ok && uids[string(u)]
	}
	if !ok {
		e.T.Errorf("%s: %s %s owners %v, want exactly %v", what, kind, name, uids, want)
	}
}

// FreezeControllerManager stops kube-controller-manager (the garbage collector, the
// ReplicaSet and Deployment controllers) with SIGSTOP; the returned func (also run in
// cleanup) resumes it. Only this cluster's own PID is signalled.
func FreezeControllerManager(t *testing.T, c *cluster.Cluster) (resume func()) {
	t.Helper()
	pid := c.PIDs()["kube-controller-manager"]
	if pid == 0 || !cluster.PIDAlive(pid) {
		t.Fatalf("kube-controller-manager is not running (pid %d)", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT kube-controller-manager: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	// Confirm the stop took effect (state T in /proc/<pid>/stat).
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'T' {
			return resume
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-controller-manager did not stop: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func MustRS(t *testing.T, e *Env, name string) *appsv1.ReplicaSet {
	t.Helper()
	rs, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(Ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ReplicaSet %s: %v", name, err)
	}
	return rs
}

func AttacherFor(t *testing.T, e *Env) *plugin.Attacher {
	t.Helper()
	cl, err := plugin.ClientsForConfig(e.C.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &plugin.Attacher{Client: cl.Kube, Meta: cl.Meta, Log: QuietLog()}
}

func (e *Env) Candidate(name string) plugin.Candidate {
	e.T.Helper()
	cm, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(Ctx(e.T), name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return plugin.Candidate{Object: plugin.Object{Kind: plugin.KindConfigMap, Name: name}, UID: cm.UID, Labels: cm.Labels, Owners: cm.OwnerReferences}
}

func WritesName(ws []plugin.Write, uid k8stypes.UID) bool {
	for _, w := range ws {
		for _, rs := range w.Owners {
			if rs.UID == uid {
				return true
			}
		}
	}
	return false
}

// Deployment creates Deployment name (0 replicas; kube-controller-manager's Deployment
// controller creates its ReplicaSet) and returns it with that ReplicaSet.
func (e *Env) Deployment(name string, spec corev1.PodSpec) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	e.T.Helper()
	zero := int32(0)
	lbl := map[string]string{"app": name}
	d, err := e.Admin.AppsV1().Deployments(e.NS).Create(Ctx(e.T), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster.WaitUntil(e.T, c, 200*time.Millisecond, "the Deployment's ReplicaSet", func() (bool, string) {
		rss, err := cluster.ControlledReplicaSets(c, e.Admin, e.NS, name, d.UID)
		if err != nil || len(rss) == 0 {
			return false, fmt.Sprintf("%d ReplicaSets (%v)", len(rss), err)
		}
		rs = &rss[0]
		return true, ""
	})
	return d, rs
}

func (e *Env) StatefulSet(name string, spec corev1.PodSpec) *appsv1.StatefulSet {
	e.T.Helper()
	zero := int32(0)
	lbl := map[string]string{"app": name}
	s, err := e.Admin.AppsV1().StatefulSets(e.NS).Create(Ctx(e.T), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &zero, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return s
}

// JobUsersKubeconfig is the Job's identity with exactly examples/job.yaml's RBAC, once the
// authorizer grants the lists of the namespace's users too (jobKubeconfig waits only for get
// on rollouts and patch on configmaps).
func JobUsersKubeconfig(t *testing.T, c *cluster.Cluster, ns string) string {
	t.Helper()
	kc := JobKubeconfig(t, c, ns)
	c.WaitForRBAC(t, "system:serviceaccount:"+ns+":configmap-attacher-job", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"experiments"}, Verbs: []string{"list"}}})
	return kc
}

// RunJob runs the Job mode (the command line) to its end with the Job's example RBAC.
func RunJob(t *testing.T, kubeconfig string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr cluster.SyncBuffer
	code := (&cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 200 * time.Millisecond}).Main(
		append(args, "-kubeconfig", kubeconfig, "-timeout", "60s"))
	return code, stdout.String(), stderr.String()
}

func HasString(list []string, parts ...string) bool {
	for _, s := range list {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(s, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// Excerpt is the text around each mention of what in s.
func Excerpt(s, what string) string {
	var out []string
	for i := 0; i < len(s) && len(out) < 4; {
		j := strings.Index(s[i:], what)
		if j < 0 {
			break
		}
		lo, hi := max(0, i+j-150), min(len(s), i+j+250)
		out = append(out, s[lo:hi])
		i += j + len(what)
	}
	return strings.Join(out, " … ")
}

func AddedNames(fix *audit.FixResult) []string {
	var out []string
	for _, a := range fix.Added {
		out = append(out, fmt.Sprintf("%s %s ← %s", a.Kind, a.Name, strings.Join(a.ReplicaSets, ",")))
	}
	return out
}

// StepRollout creates a Rollout whose canary steps run configmap-attacher with config (JSON)
// and whose template has spec; its status says the controller observed it.
func (e *Env) StepRollout(name, config string, spec corev1.PodSpec) *v1alpha1.Rollout {
	e.T.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
				{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: json.RawMessage(config)}},
				{Pause: &v1alpha1.RolloutPause{}},
			}}},
		},
	}
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Create(Ctx(e.T), ro, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return ro
}

// DeploymentReplicaSets are the ReplicaSets the deployment controller made for d.
func DeploymentReplicaSets(t *testing.T, e *Env, d *appsv1.Deployment) []string {
	t.Helper()
	l, err := e.Admin.AppsV1().ReplicaSets(e.NS).List(Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rs := range l.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs.Name)
		}
	}
	return out
}
