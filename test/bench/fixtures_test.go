package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin/step"

	"k8s.io/client-go/metadata"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// pluginName is the step plugin's name in argo-rollouts-config.
const pluginName = "configmap-attacher/configmap-attacher"

// setLabel marks every object of a fixture set, for listing them back.
const setLabel = "bench.configmap-attacher/set"

// env is one benchmark's namespace with its admin clients (every benchmark's: the step's, the
// controller mode's and its scale model's).
type env struct {
	c        *cluster.Cluster
	ns       string
	admin    kubernetes.Interface
	rollouts rolloutsclient.Interface
}

func newEnv(b *testing.B) *env {
	b.Helper()
	c := sharedCluster(b)
	rc, err := rolloutsclient.NewForConfig(c.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	return &env{c: c, ns: c.Namespace(b), admin: c.Client(b), rollouts: rc}
}

func bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// controllerIdentity is the plugin process's identity in a real installation: a non-admin
// ServiceAccount "argo-rollouts" (token from the TokenRequest API) bound to the controller's
// ClusterRole from the argo-rollouts module plus examples/rbac-step-plugin.yaml. The returned
// config is unthrottled (QPS -1); callers that model the plugin set its limits.
func (e *env) controllerIdentity(b *testing.B) *rest.Config {
	b.Helper()
	cfg := e.c.ServiceAccountConfig(b, e.ns, "argo-rollouts", nil, nil)
	dir, err := cluster.RolloutsModuleDir()
	if err != nil {
		b.Fatal(err)
	}
	e.c.ApplyYAMLFile(b, nil, filepath.Join(dir, "manifests", "role", "argo-rollouts-clusterrole.yaml"), e.ns)
	e.c.ApplyYAML(b, nil, []byte(cluster.RolloutsControllerBinding), e.ns)
	e.c.ApplyYAMLFile(b, nil, filepath.Join(repoRoot(), "examples", "rbac-step-plugin.yaml"), e.ns)
	user := "system:serviceaccount:" + e.ns + ":argo-rollouts"
	e.c.WaitForRBAC(b, user, e.ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
		// The namespace's users (plugin/reads.go ReadUsage): examples/rbac-step-plugin.yaml
		// grants the first three, the controller's ClusterRole the rest.
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"list"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"experiments"}, Verbs: []string{"list"}},
	})
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// jobIdentity is the command-line mode's identity: ServiceAccount configmap-attacher-job with
// exactly examples/job.yaml's Role.
func (e *env) jobIdentity(b *testing.B) *rest.Config {
	b.Helper()
	cfg := e.c.ServiceAccountConfig(b, e.ns, "configmap-attacher-job", nil, nil)
	e.c.ApplyYAMLFile(b, nil, filepath.Join(repoRoot(), "examples", "job.yaml"), e.ns)
	// The Job itself would run the image; only its RBAC matters here.
	_ = e.admin.BatchV1().Jobs(e.ns).Delete(context.Background(), "configmap-attacher-web", metav1.DeleteOptions{})
	user := "system:serviceaccount:" + e.ns + ":configmap-attacher-job"
	e.c.WaitForRBAC(b, user, e.ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
	})
	return cfg
}

// clientset builds a clientset for cfg.
func clientset(b testing.TB, cfg *rest.Config) kubernetes.Interface {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// objectSet is one Rollout with one ReplicaSet (the current one) whose pod template uses
// every object of the set.
type objectSet struct {
	name    string
	ro      *v1alpha1.Rollout // status.currentPodHash set, as the controller passes it
	rs      *appsv1.ReplicaSet
	cms     []string
	secrets []string
	config  json.RawMessage // the step config listing every object
}

func (s *objectSet) size() int { return len(s.cms) + len(s.secrets) }

// splitObjects splits n objects into ConfigMaps and Secrets: 1 → 1 ConfigMap, otherwise
// four ConfigMaps for each Secret (10 → 8+2, 100 → 80+20).
func splitObjects(n int) (cms, secrets int) {
	if n < 5 {
		return n, 0
	}
	return n - n/5, n / 5
}

// payload is the data of each fixture object: 1 KiB, so that responses carry realistic bodies.
var payload = strings.Repeat("x", 1024)

// newObjectSet creates a Rollout named name, its ConfigMaps and Secrets (with 1 KiB of data
// each) and its current ReplicaSet (0 replicas) whose pod template mounts the ConfigMaps as
// volumes and takes the Secrets through envFrom.
func (e *env) newObjectSet(b testing.TB, name string, nCM, nSecret int, extraLabels map[string]string) *objectSet {
	b.Helper()
	ctx, cancel := bg()
	defer cancel()
	s, err := e.createObjectSet(ctx, name, nCM, nSecret, extraLabels)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// createObjectSet is newObjectSet for any goroutine.
func (e *env) createObjectSet(ctx context.Context, name string, nCM, nSecret int, extraLabels map[string]string) (*objectSet, error) {
	s := &objectSet{name: name}
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
				{Plugin: &v1alpha1.PluginStep{Name: pluginName}}}}},
		},
	}
	ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).Create(ctx, ro, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Rollout %s: %w", name, err)
	}
	labels := map[string]string{setLabel: name}
	for k, v := range extraLabels {
		labels[k] = v
	}
	for i := 0; i < nCM; i++ {
		n := fmt.Sprintf("%s-cfg-%03d", name, i)
		if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: labels},
			Data: map[string]string{"app.yaml": payload}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create ConfigMap %s: %w", n, err)
		}
		s.cms = append(s.cms, n)
	}
	for i := 0; i < nSecret; i++ {
		n := fmt.Sprintf("%s-sec-%03d", name, i)
		if _, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: labels},
			Data: map[string][]byte{"token": []byte(payload)}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create Secret %s: %w", n, err)
		}
		s.secrets = append(s.secrets, n)
	}
	hash := "h" + strings.ReplaceAll(name, "-", "")
	if len(hash) > 20 {
		hash = hash[len(hash)-20:]
	}
	if s.rs, err = e.createReplicaSet(ctx, ro, hash, podSpec(s.cms, s.secrets)); err != nil {
		return nil, err
	}
	s.ro = cluster.AsController(ro, s.rs)
	cfg := map[string]any{"configMaps": s.cms}
	if len(s.secrets) > 0 {
		cfg["secrets"] = s.secrets
	}
	if s.config, err = json.Marshal(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// replicaSet creates a ReplicaSet of the Rollout as the controller would (hash label,
// controller reference to the Rollout), with 0 replicas.
func (e *env) replicaSet(b testing.TB, ctx context.Context, ro *v1alpha1.Rollout, hash string, spec corev1.PodSpec) *appsv1.ReplicaSet {
	b.Helper()
	rs, err := e.createReplicaSet(ctx, ro, hash, spec)
	if err != nil {
		b.Fatal(err)
	}
	return rs
}

func (e *env) createReplicaSet(ctx context.Context, ro *v1alpha1.Rollout, hash string, spec corev1.PodSpec) (*appsv1.ReplicaSet, error) {
	zero := int32(0)
	labels := map[string]string{"app": ro.Name, plugin.PodTemplateHashLabel: hash}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: ro.Name + "-" + hash, Namespace: e.ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ro, v1alpha1.SchemeGroupVersion.WithKind("Rollout"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
	}
	rs, err := e.admin.AppsV1().ReplicaSets(e.ns).Create(ctx, rs, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create ReplicaSet %s-%s: %w", ro.Name, hash, err)
	}
	return rs, nil
}

// podSpec mounts the ConfigMaps as volumes and takes the Secrets through envFrom.
var podSpec = fixtures.PodSpec

// objRef names one ConfigMap or Secret.
type objRef struct {
	secret bool
	name   string
}

func (s *objectSet) objects() []objRef {
	out := make([]objRef, 0, s.size())
	for _, n := range s.cms {
		out = append(out, objRef{false, n})
	}
	for _, n := range s.secrets {
		out = append(out, objRef{true, n})
	}
	return out
}

var clearOwners = []byte(`{"metadata":{"ownerReferences":null}}`)

// resetOwners removes every owner reference from the objects (as admin, 16 at a time), so
// that the next step really adds one. Never timed.
func (e *env) resetOwners(b testing.TB, objs []objRef) {
	b.Helper()
	ctx, cancel := bg()
	defer cancel()
	var g errgroup.Group
	g.SetLimit(16)
	for _, o := range objs {
		g.Go(func() error {
			var err error
			if o.secret {
				_, err = e.admin.CoreV1().Secrets(e.ns).Patch(ctx, o.name, ktypes.MergePatchType, clearOwners, metav1.PatchOptions{})
			} else {
				_, err = e.admin.CoreV1().ConfigMaps(e.ns).Patch(ctx, o.name, ktypes.MergePatchType, clearOwners, metav1.PatchOptions{})
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("resetting owner references: %v", err)
	}
}

// verifyOwned checks, with one list per kind, that every object of the sets (by label) has
// exactly its set's ReplicaSet as owner: the step did its work. Never timed.
func (e *env) verifyOwned(b testing.TB, sets ...*objectSet) {
	b.Helper()
	ctx, cancel := bg()
	defer cancel()
	want := map[string]ktypes.UID{}
	count := 0
	for _, s := range sets {
		want[s.name] = s.rs.UID
		count += s.size()
	}
	sel := setLabel
	if len(sets) == 1 {
		sel = setLabel + "=" + sets[0].name
	}
	cms, err := e.admin.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	secs, err := e.admin.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	seen := 0
	check := func(kind string, m metav1.ObjectMeta) {
		uid, ok := want[m.Labels[setLabel]]
		if !ok {
			return
		}
		seen++
		if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != uid {
			b.Fatalf("%s %s: owners %+v, want only ReplicaSet %s", kind, m.Name, m.OwnerReferences, uid)
		}
	}
	for _, o := range cms.Items {
		check("ConfigMap", o.ObjectMeta)
	}
	for _, o := range secs.Items {
		check("Secret", o.ObjectMeta)
	}
	if seen != count {
		b.Fatalf("found %d objects of the sets, want %d", seen, count)
	}
}

// ownerPatch is the body the plugin sends (plugin/ownership.go ownerPatchFor), for the floor.
func ownerPatch(rs *appsv1.ReplicaSet) []byte { return plugin.OwnerPatch(rs) }

// floorMetaPatches sends the step's patches straight through client-go, 8 at a time (the
// plugin's concurrency), through the metadata client: exactly the plugin's requests (PATCH
// with Accept: PartialObjectMetadata, so only metadata comes back), with no read, no
// planning, no event and no RPC.
func floorMetaPatches(ctx context.Context, m metadata.Interface, ns string, objs []objRef, body []byte) error {
	return floorSend(ctx, objs, func(ctx context.Context, o objRef) error {
		res := "configmaps"
		if o.secret {
			res = "secrets"
		}
		_, err := m.Resource(corev1.SchemeGroupVersion.WithResource(res)).Namespace(ns).Patch(ctx, o.name, ktypes.StrategicMergePatchType, body, metav1.PatchOptions{})
		return err
	})
}

func floorSend(ctx context.Context, objs []objRef, send func(context.Context, objRef) error) error {
	var g errgroup.Group
	g.SetLimit(8)
	for _, o := range objs {
		g.Go(func() error { return send(ctx, o) })
	}
	return g.Wait()
}

func metaClient(b testing.TB, cfg *rest.Config) metadata.Interface {
	b.Helper()
	m, err := metadata.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// floorList is the step's first list: the Rollout's ReplicaSets by its selector, consistent
// (resourceVersion "", as the step lists them before it reads any user).
func floorList(ctx context.Context, cs kubernetes.Interface, s *objectSet) error {
	return floorListRV(ctx, cs, s, "")
}

// floorListRV is floorList at resourceVersion rv ("0": whatever the watch cache holds).
func floorListRV(ctx context.Context, cs kubernetes.Interface, s *objectSet, rv string) error {
	sel, err := metav1.LabelSelectorAsSelector(s.ro.Spec.Selector)
	if err != nil {
		return err
	}
	_, err = cs.AppsV1().ReplicaSets(s.ro.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: rv})
	return err
}

// usersControllers are the ReplicaSet controller kinds whose existence the step confirms
// (plugin/users.go checkedControllers), in its order: group, kind, resource.
var usersControllers = []struct {
	group, kind string
	gvr         schema.GroupVersionResource
}{
	{"apps", "Deployment", appsv1.SchemeGroupVersion.WithResource("deployments")},
	{"argoproj.io", "Rollout", v1alpha1.SchemeGroupVersion.WithResource("rollouts")},
	{"argoproj.io", "Experiment", v1alpha1.SchemeGroupVersion.WithResource("experiments")},
}

// floorUsers sends the reads the step makes before any write straight through client-go, in
// the step's order: first its own Rollout's ReplicaSets (a list by the Rollout's selector,
// floorListRV: the step reads users only once its target exists), then, concurrently as
// plugin/readusage.go ReadUsage does (every user of an object in the namespace counts), every
// ReplicaSet of the namespace (typed: the pod templates), then, metadata only and one after the
// other, each checked controller kind (Deployment, Rollout, Experiment) that controls a
// ReplicaSet other than the step's own Rollout's; beside it every StatefulSet, DaemonSet, Job,
// CronJob and ControllerRevision (typed) and the Pods' metadata. The fixtures hold no bare Pod,
// so the step lists none by name. No decoding beyond client-go's, no planning.
//
// rv is the lists' resourceVersion: "" (consistent, as the step lists) or "0" (whatever the
// watch cache holds).
func floorUsers(ctx context.Context, cs kubernetes.Interface, m metadata.Interface, s *objectSet, rv string) error {
	if err := floorListRV(ctx, cs, s, rv); err != nil {
		return err
	}
	ns, rollout := s.ro.Namespace, s.ro.UID
	opts := metav1.ListOptions{ResourceVersion: rv}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { _, err := cs.AppsV1().StatefulSets(ns).List(ctx, opts); return err })
	g.Go(func() error { _, err := cs.AppsV1().DaemonSets(ns).List(ctx, opts); return err })
	g.Go(func() error { _, err := cs.BatchV1().Jobs(ns).List(ctx, opts); return err })
	g.Go(func() error { _, err := cs.BatchV1().CronJobs(ns).List(ctx, opts); return err })
	g.Go(func() error { _, err := cs.AppsV1().ControllerRevisions(ns).List(ctx, opts); return err })
	g.Go(func() error {
		_, err := m.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns).List(ctx, opts)
		return err
	})
	g.Go(func() error {
		l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, opts)
		if err != nil {
			return err
		}
		need := map[string]bool{}
		for i := range l.Items {
			ref := metav1.GetControllerOfNoCopy(&l.Items[i])
			if ref == nil || ref.UID == rollout {
				continue
			}
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil {
				continue
			}
			need[gv.Group+"/"+ref.Kind] = true
		}
		for _, k := range usersControllers {
			if !need[k.group+"/"+k.kind] {
				continue
			}
			if _, err := m.Resource(k.gvr).Namespace(ns).List(ctx, opts); err != nil {
				return err
			}
		}
		return nil
	})
	return g.Wait()
}

func stepContext(s *objectSet) *types.RpcStepContext {
	return &types.RpcStepContext{PluginName: pluginName, Config: s.config}
}

// checkResult turns a step's result into an error unless it succeeded.
func checkResult(res types.RpcStepResult, rerr types.RpcError) error {
	if rerr.HasError() {
		return fmt.Errorf("RpcError: %s", rerr.ErrorString)
	}
	if res.Phase != types.PhaseSuccessful {
		return fmt.Errorf("phase %s: %s", res.Phase, res.Message)
	}
	return nil
}

// discardLogger logs at info level, as the plugin does, into nothing: the formatting cost
// stays, the output does not.
func discardLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.InfoLevel)
	return l
}

// inProcessStep is step.Step built as stepplugin.Command builds it (info logging, events on the
// Rollout), on cfg, without the process boundary. events=false leaves the events out.
func inProcessStep(b testing.TB, cfg *rest.Config, events bool) *step.Step {
	cl, err := plugin.ClientsForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	client := func() (plugin.Clients, error) { return cl, nil }
	log := discardLogger().WithField("plugin", "configmap-attacher")
	s := &step.Step{Client: client, Log: log, Concurrency: 8}
	if events {
		// As stepplugin.Command builds it: the Event is queued and sent in the background.
		s.Events = plugin.NewAsyncEvents(&plugin.APIEvents{Client: client, Log: log}, 64, log)
	}
	return s
}

// pluginProc is the built binary serving the step plugin, started exactly as the Argo
// Rollouts controller starts it (cluster.StartStepPlugin).
type pluginProc struct {
	client *goplugin.Client
	step   rolloutsrpc.StepPlugin
	pid    int
	args   []string
	// bucket mirrors the plugin's client-side rate limiter (--qps, --burst) so that a
	// latency benchmark can wait, outside the timer, until a step will not be throttled.
	bucket *tokenBucket
}

func startPlugin(b testing.TB, qps float64, burst int, args ...string) *pluginProc {
	b.Helper()
	return startPluginBinary(b, stepBin, qps, burst, args...)
}

// startPluginBinary starts bin as the Argo Rollouts controller starts a step plugin (our
// binary, or argo-rollouts' own sample beside it) and calls InitPlugin.
func startPluginBinary(b testing.TB, bin string, qps float64, burst int, args ...string) *pluginProc {
	b.Helper()
	// The controller's default logger (hclog, level trace) re-logs every plugin line; the
	// lines are parsed and formatted as there, then dropped.
	c, step := cluster.StartStepPlugin(b, exec.Command(bin, args...),
		hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: io.Discard, Level: hclog.Trace}))
	p := &pluginProc{client: c, step: step, pid: c.ReattachConfig().Pid, args: args, bucket: newTokenBucket(qps, burst)}
	if rerr := p.step.InitPlugin(); rerr.HasError() {
		b.Fatalf("InitPlugin: %v", rerr)
	}
	return p
}

// kubeconfigArgs are the plugin args with --kubeconfig of cfg's identity.
func (e *env) kubeconfigArgs(b testing.TB, cfg *rest.Config) []string {
	return []string{"--kubeconfig", e.c.WriteKubeconfig(b, cfg)}
}

// tokenBucket is the token bucket client-go uses (golang.org/x/time/rate via
// flowcontrol.NewTokenBucketRateLimiter): burst tokens at start, qps per second refill.
type tokenBucket struct {
	mu     sync.Mutex
	qps    float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(qps float64, burst int) *tokenBucket {
	return &tokenBucket{qps: qps, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// waitFor sleeps until n tokens are available, then takes them. It returns the time slept.
func (t *tokenBucket) waitFor(n int) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.tokens = min(t.burst, t.tokens+now.Sub(t.last).Seconds()*t.qps)
	t.last = now
	var slept time.Duration
	if lack := float64(n) - t.tokens; lack > 0 {
		slept = time.Duration(lack/t.qps*float64(time.Second)) + time.Millisecond
		time.Sleep(slept)
		t.tokens += slept.Seconds() * t.qps
		t.last = time.Now()
	}
	t.tokens -= float64(n)
	return slept
}

// rssKiB reads a /proc/<pid>/status field in KiB (VmRSS, VmHWM).
func rssKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("%s: %q: %v", field, line, err)
			}
			return kb, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
