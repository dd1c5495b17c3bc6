package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

const ns = "shop"

var optIn = map[string]string{plugin.OptInLabel: "true"}

func ptr[T any](v T) *T { return &v }

// spec is the shared pod-spec builder: ConfigMaps as volumes, Secrets through envFrom.
var spec = fixtures.PodSpec

// rs is a ReplicaSet controlled by a workload of kind ("Rollout", "Deployment", "StatefulSet").
func rs(name, kind string, s corev1.PodSpec) *appsv1.ReplicaSet {
	api := map[string]string{"Rollout": "argoproj.io/v1alpha1", "Deployment": "apps/v1"}[kind]
	if api == "" {
		api = "example.com/v1"
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Unix(int64(len(name)), 0)),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: api, Kind: kind, Name: "web", UID: types.UID("uid-" + kind), Controller: ptr(true)}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: s}},
	}
}

// liveWorkload is the metadata of the workload rs(…, kind, …) names as controller.
func liveWorkload(kind string) *metav1.PartialObjectMetadata {
	ref := metav1.GetControllerOf(rs("x", kind, corev1.PodSpec{}))
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ns, UID: ref.UID}}
}

func meta(kind, name string, labels map[string]string, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: labels, OwnerReferences: owners,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"hunter2"}}`}}}
}

func ownerOf(r *appsv1.ReplicaSet) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: r.Name, UID: r.UID}
}

type harness struct {
	t      *testing.T
	kube   *fake.Clientset
	md     *metadatafake.FakeMetadataClient
	ctl    *Controller
	m      *Metrics
	events *record.FakeRecorder
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg Config, rss []*appsv1.ReplicaSet, objs ...*metav1.PartialObjectMetadata) *harness {
	t.Helper()
	var kobjs []runtime.Object
	for _, r := range rss {
		kobjs = append(kobjs, r)
	}
	return startWith(t, cfg, kobjs, objs...)
}

// startWith is start with any typed objects (ReplicaSets, StatefulSets, Pods, ...).
func startWith(t *testing.T, cfg Config, kobjs []runtime.Object, objs ...*metav1.PartialObjectMetadata) *harness {
	t.Helper()
	return startServed(t, cfg, true, kobjs, objs...)
}

// startServed is startWith, with the Rollout and Experiment CRDs served or not.
func startServed(t *testing.T, cfg Config, served bool, kobjs []runtime.Object, objs ...*metav1.PartialObjectMetadata) *harness {
	t.Helper()
	sch := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	var mobjs []runtime.Object
	for _, o := range objs {
		mobjs = append(mobjs, o)
	}
	// The workloads that control rs's ReplicaSets exist (every user counts: a ReplicaSet whose
	// controller is gone never becomes an owner).
	// Deployments are cached typed (their template's references: the anchor) and confirmed as
	// metadata, as a real apiserver serves both.
	for _, kind := range []string{"Rollout", "Deployment"} {
		if h := liveWorkload(kind); h != nil {
			mobjs = append(mobjs, h)
		}
	}
	kobjs = append(kobjs, &appsv1.Deployment{ObjectMeta: liveWorkload("Deployment").ObjectMeta},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: "uid-ns-" + ns}})
	cfg.RolloutsServed, cfg.ExperimentsServed = served, served
	h := &harness{t: t, kube: fake.NewClientset(kobjs...), md: metadatafake.NewSimpleMetadataClient(sch, mobjs...),
		m: NewMetrics(), events: record.NewFakeRecorder(100), done: make(chan error, 1)}
	cfg.Kube, cfg.Meta, cfg.Metrics, cfg.Events = h.kube, h.md, h.m, h.events
	// The controller's anchors, created through the typed client, are confirmed through the
	// metadata client, as one apiserver serves both.
	h.kube.PrependReactor("create", "controllerrevisions", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cr := a.(k8stesting.CreateAction).GetObject().(*appsv1.ControllerRevision)
		m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"}, ObjectMeta: *cr.ObjectMeta.DeepCopy()}
		if m.UID == "" {
			m.UID = types.UID("uid-" + cr.Name)
			cr.UID = m.UID
		}
		m.Namespace = a.GetNamespace()
		if err := h.md.Tracker().Add(m); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	if cfg.Selector == nil {
		cfg.Selector = plugin.OptInSelector()
	}
	if !cfg.Rollouts && !cfg.Deployments {
		cfg.Rollouts, cfg.Deployments = true, true
	}
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(testWriter{t})
	cfg.Log = log
	ctl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.ctl = ctl
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- ctl.Run(ctx) }()
	t.Cleanup(h.stop)
	h.eventually("leading with synced caches", func() bool { return ctl.Ready() && ctl.Leading() })
	return h
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		if err := <-h.done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
		h.cancel = nil
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settle waits until the queue is empty and nothing is being processed.
func (h *harness) settle() {
	h.t.Helper()
	time.Sleep(50 * time.Millisecond)
	h.eventually("an idle queue", func() bool {
		return h.ctl.QueueLen() == 0 && value(h.m.queue.depth.WithLabelValues("objects")) == 0
	})
	time.Sleep(50 * time.Millisecond)
}

// patches returns "Kind/name: owner names" for every metadata patch sent, sorted.
func (h *harness) patches() []string {
	var out []string
	for _, a := range h.md.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		if p.GetPatchType() != types.StrategicMergePatchType {
			h.t.Errorf("patch type %s, want strategic merge", p.GetPatchType())
		}
		var body struct {
			Metadata struct {
				OwnerReferences []map[string]any `json:"ownerReferences"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			h.t.Fatal(err)
		}
		var names []string
		for _, r := range body.Metadata.OwnerReferences {
			if _, ok := r["controller"]; ok {
				h.t.Errorf("patch sets controller: %s", p.GetPatch())
			}
			names = append(names, fmt.Sprint(r["name"]))
		}
		kind := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret"}[p.GetResource().Resource]
		out = append(out, fmt.Sprintf("%s/%s: %s", kind, p.GetName(), strings.Join(names, ",")))
	}
	sort.Strings(out)
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// Start-up reconcile: one patch per opted-in object, carrying every live ReplicaSet that uses
// it and lacks its reference; unlabelled objects and ReplicaSets being deleted are left alone;
// an object already owned costs nothing; an object that a ReplicaSet of a controller kind whose
// existence is not checked also uses is blocked (an Event, adoptions_blocked_total).
func TestReconcileAtStart(t *testing.T) {
	old := rs("web-old", "Rollout", spec([]string{"shared", "plain", "odd"}, []string{"sec-1"}))
	cur := rs("web-new", "Rollout", spec([]string{"shared", "new"}, nil))
	dep := rs("api-1", "Deployment", spec([]string{"shared"}, nil))
	gone := rs("web-gone", "Rollout", spec([]string{"shared"}, nil))
	gone.DeletionTimestamp = ptr(metav1.Now())
	other := rs("sts-1", "StatefulSet", spec([]string{"odd"}, nil)) // example.com/v1 StatefulSet: not checked
	h := start(t, Config{}, []*appsv1.ReplicaSet{old, cur, dep, gone, other},
		meta("ConfigMap", "shared", optIn),
		meta("ConfigMap", "plain", nil),               // not opted in
		meta("ConfigMap", "new", optIn, ownerOf(cur)), // nothing missing
		meta("ConfigMap", "odd", optIn),               // blocked by sts-1
		meta("Secret", "sec-1", optIn))
	h.settle()
	equal(t, "patches", h.patches(), []string{
		"ConfigMap/shared: api-1,web-new,web-old",
		"Secret/sec-1: web-old",
	})
	if got := value(h.m.OwnerReferencesAdded.WithLabelValues("ConfigMap")); got != 3 {
		t.Errorf("owner_references_added_total{ConfigMap} = %v, want 3", got)
	}
	if got := value(h.m.Blocked.WithLabelValues("ConfigMap")); got < 1 {
		t.Errorf("adoptions_blocked_total{ConfigMap} = %v, want at least 1 (odd)", got)
	}
	if got := value(h.m.Leader); got != 1 {
		t.Errorf("leader = %v", got)
	}
}

// TestWorkloadKinds: -workloads picks whose ReplicaSets the controller acts for (an object only
// a Deployment uses is left to others with -workloads rollouts), but every user counts: an
// object a Rollout and a Deployment share gets both as owners, or a change to the Rollout's
// history alone would get it collected under the Deployment's pods.
func TestWorkloadKinds(t *testing.T) {
	ro := rs("web-1", "Rollout", spec([]string{"a"}, nil))
	dep := rs("api-1", "Deployment", spec([]string{"a", "b"}, nil))
	h := start(t, Config{Rollouts: true}, []*appsv1.ReplicaSet{ro, dep}, meta("ConfigMap", "a", optIn), meta("ConfigMap", "b", optIn))
	h.settle()
	equal(t, "patches with -workloads rollouts", h.patches(), []string{"ConfigMap/a: api-1,web-1"})
}

// Events: a new ReplicaSet enqueues the objects it references; an object created after its
// ReplicaSet enqueues itself; a label added later is adopted; the cache lagging behind our
// own patch does not make a second patch.
func TestEvents(t *testing.T) {
	h := start(t, Config{}, nil, meta("ConfigMap", "cm-1", optIn), meta("ConfigMap", "late-label", nil))
	h.settle()
	equal(t, "patches with no ReplicaSet", h.patches(), nil)

	r1 := rs("web-1", "Rollout", spec([]string{"cm-1", "cm-later", "late-label"}, nil))
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), r1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch of cm-1", func() bool { return len(h.patches()) == 1 })
	h.settle()
	equal(t, "after the ReplicaSet", h.patches(), []string{"ConfigMap/cm-1: web-1"})
	if got := histCount(t, h.m); got != 1 {
		t.Errorf("reaction observations %d, want 1", got)
	}

	if _, err := h.fakeMeta("configmaps").CreateFake(meta("ConfigMap", "cm-later", optIn), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch of cm-later", func() bool { return len(h.patches()) == 2 })

	// The label arrives later: adopted.
	if _, err := h.fakeMeta("configmaps").UpdateFake(meta("ConfigMap", "late-label", optIn), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch of late-label", func() bool { return len(h.patches()) == 3 })
	h.settle()
	equal(t, "after the label", h.patches(), []string{"ConfigMap/cm-1: web-1", "ConfigMap/cm-later: web-1", "ConfigMap/late-label: web-1"})

	// A status update of the ReplicaSet is not an event for its objects.
	before := len(h.md.Actions())
	r1.Status.Replicas = 3
	r1.ResourceVersion = "2"
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Update(context.Background(), r1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if after := len(h.md.Actions()); after != before {
		t.Errorf("a ReplicaSet status update made %d metadata requests", after-before)
	}
}

func (h *harness) fakeMeta(resource string) fakeWriter {
	return h.md.Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).(fakeWriter)
}

type fakeWriter interface {
	CreateFake(obj *metav1.PartialObjectMetadata, opts metav1.CreateOptions, subresources ...string) (*metav1.PartialObjectMetadata, error)
	UpdateFake(obj *metav1.PartialObjectMetadata, opts metav1.UpdateOptions, subresources ...string) (*metav1.PartialObjectMetadata, error)
}

func httpRequest(method, target string) (*http.Request, error) {
	return http.NewRequest(method, "https://apiserver"+target, nil)
}

// value reads a gauge or counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

func histCount(t *testing.T, m *Metrics) uint64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == MetricPrefix+"reaction_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// The fake metadata tracker does not apply the strategic merge patch to the watched object,
// which is what a slow cache looks like: a second event for the object right after the patch
// must not patch again (pending references).
func TestNoRepatchWhileCacheLags(t *testing.T) {
	h := start(t, Config{}, nil, meta("ConfigMap", "cm-1", optIn))
	h.md.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, meta("ConfigMap", a.(k8stesting.PatchAction).GetName(), optIn), nil // the patch "succeeds", the cache does not see it
	})
	r1 := rs("web-1", "Rollout", spec([]string{"cm-1"}, nil))
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), r1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch", func() bool { return len(h.patches()) == 1 })
	h.ctl.enqueueAll()
	h.settle()
	equal(t, "patches", h.patches(), []string{"ConfigMap/cm-1: web-1"})
}

func TestDryRun(t *testing.T) {
	r1 := rs("web-1", "Rollout", spec([]string{"cm-1"}, []string{"s-1"}))
	h := start(t, Config{DryRun: true}, []*appsv1.ReplicaSet{r1}, meta("ConfigMap", "cm-1", optIn), meta("Secret", "s-1", optIn))
	h.settle()
	equal(t, "patches in dry run", h.patches(), nil)
	if got := value(h.m.OwnerReferencesWouldAdd.WithLabelValues("Secret")); got != 1 {
		t.Errorf("would_add{Secret} = %v, want 1", got)
	}
}

// A forbidden patch is permanent: a Warning Event on the Rollout, the error counted by
// reason, and no hot retry loop.
func TestForbidden(t *testing.T) {
	sch := schema.GroupResource{Resource: "configmaps"}
	r1 := rs("web-1", "Rollout", spec([]string{"cm-1"}, nil))
	h := start(t, Config{}, nil, meta("ConfigMap", "cm-1", optIn))
	h.md.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(sch, "cm-1", fmt.Errorf("RBAC: nope"))
	})
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), r1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-h.events.Events:
		if !strings.HasPrefix(e, "Warning OwnerReferenceFailed cannot make ReplicaSet web-1 an owner of ConfigMap cm-1") {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Warning event")
	}
	h.settle()
	if got := value(h.m.ReconcileErrors.WithLabelValues("forbidden")); got != 1 {
		t.Errorf("reconcile_errors_total{forbidden} = %v, want 1 (no retries of a permanent error)", got)
	}
}

// A transient error is retried with backoff until it succeeds.
func TestTransientRetried(t *testing.T) {
	h := start(t, Config{}, nil, meta("ConfigMap", "cm-1", optIn))
	fails := 6 // more than the core's own retries of one call
	h.md.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewInternalError(fmt.Errorf("etcd hiccup"))
		}
		return false, nil, nil
	})
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), rs("web-1", "Rollout", spec([]string{"cm-1"}, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("a successful patch", func() bool { return value(h.m.OwnerReferencesAdded.WithLabelValues("ConfigMap")) == 1 })
	if got := value(h.m.ReconcileErrors.WithLabelValues("server")); got < 1 {
		t.Errorf("reconcile_errors_total{server} = %v", got)
	}
}

// The gauges: unowned (opted in, used by a live ReplicaSet, owned by none) and lost (a
// required object that does not exist; optional references do not count).
func TestAuditGauges(t *testing.T) {
	s := spec([]string{"owned", "unowned", "missing"}, nil)
	s.Volumes = append(s.Volumes, corev1.Volume{Name: "opt", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "missing-optional"}, Optional: ptr(true)}}})
	r1 := rs("web-1", "Rollout", s)
	h := start(t, Config{DryRun: true}, []*appsv1.ReplicaSet{r1},
		meta("ConfigMap", "owned", optIn, ownerOf(r1)), meta("ConfigMap", "unowned", optIn))
	unowned, lost := h.ctl.gaps()
	if unowned[ns] != 1 || lost[ns] != 1 {
		t.Errorf("unowned %v lost %v, want 1 and 1", unowned, lost)
	}
	h.ctl.UpdateGauges()
	if got := value(h.m.Unowned.WithLabelValues(ns)); got != 1 {
		t.Errorf("unowned gauge %v", got)
	}
}

// TestGaugesSkipDeadWorkloads: a ReplicaSet whose workload is gone (the app was deleted; the
// garbage collector has not deleted the ReplicaSet yet) counts for neither gauge, as audit
// counts only the ReplicaSets of workloads that exist.
func TestGaugesSkipDeadWorkloads(t *testing.T) {
	orphan := rs("old-1", "Rollout", spec([]string{"gone-cfg", "unowned"}, nil))
	orphan.OwnerReferences[0].Name, orphan.OwnerReferences[0].UID = "old", "uid-old-rollout"
	h := start(t, Config{DryRun: true}, []*appsv1.ReplicaSet{orphan}, meta("ConfigMap", "unowned", optIn))
	if unowned, lost := h.ctl.gaps(); unowned[ns] != 0 || lost[ns] != 0 {
		t.Errorf("unowned %v lost %v, want 0 and 0 for a dead workload's ReplicaSet", unowned, lost)
	}
}

// TestWorkloadSeenAfterItsReplicaSet: the ReplicaSet of a recreated app reaches the cache
// before its Rollout does; it cannot own yet (its controller looks gone), and the Rollout's own
// add event brings its objects back at once, not at the next resync.
func TestWorkloadSeenAfterItsReplicaSet(t *testing.T) {
	h := start(t, Config{}, nil, meta("ConfigMap", "cfg", optIn))
	h.settle()
	fresh := rs("web2-1", "Rollout", spec([]string{"cfg"}, nil))
	fresh.OwnerReferences[0].Name, fresh.OwnerReferences[0].UID = "web2", "uid-web2"
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	equal(t, "patches before the Rollout is seen", h.patches(), nil)
	ro := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Name: "web2", Namespace: ns, UID: "uid-web2"}}
	if _, err := h.md.Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}).Namespace(ns).(fakeWriter).CreateFake(ro, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch once the Rollout is seen", func() bool { return len(h.patches()) == 1 })
	equal(t, "patches", h.patches(), []string{"ConfigMap/cfg: web2-1"})
}

func TestTransforms(t *testing.T) {
	c, err := New(Config{Kube: fake.NewClientset(), Meta: metadatafake.NewSimpleMetadataClient(runtime.NewScheme()), Selector: plugin.OptInSelector(), Rollouts: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rs("web-1", "Rollout", spec([]string{"cm"}, []string{"sec"}))
	r.Annotations = map[string]string{"rollout.argoproj.io/revision": "3", "big": strings.Repeat("x", 1000)}
	r.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PLAIN", Value: "v"},
		{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "key-sec"}, Key: "k"}}}}
	r.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-cm"}}}}}}
	r.Spec.Template.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	r.Spec.Template.Spec.Volumes = append(r.Spec.Template.Spec.Volumes, corev1.Volume{Name: "o", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "opt"}, Optional: ptr(true)}}})
	out, _ := c.compactReplicaSet(r)
	cr := out.(*cachedReplicaSet)
	if got, want := fmt.Sprint(cr.references()), fmt.Sprint(plugin.TemplateReferences(&r.Spec.Template.Spec)); got != want {
		t.Errorf("references: %s, want %s", got, want)
	}
	if got := len(cr.Required); got != 4 { // cm, sec, key-sec, init-cm; not pull, not opt
		t.Errorf("required %v", cr.Required)
	}
	if cr.Annotations != nil || cr.Labels != nil || len(cr.OwnerReferences) != 1 || cr.UID != r.UID {
		t.Errorf("compact ReplicaSet kept too much or too little: %+v", cr.ObjectMeta)
	}
	again, _ := c.compactReplicaSet(cr)
	if again != cr {
		t.Error("the transform is not idempotent")
	}
	// A ReplicaSet of another controller keeps its references: every user counts.
	out, _ = c.compactReplicaSet(rs("sts-1", "StatefulSet", spec([]string{"cm"}, nil)))
	if len(out.(*cachedReplicaSet).Refs) != 1 {
		t.Errorf("references not kept for a ReplicaSet of another controller")
	}
	m, _ := c.compactMetadata(meta("Secret", "s", optIn, ownerOf(r)))
	co := m.(*cachedObject)
	if !co.OptedIn || !co.RSOwned || len(co.Owners) != 1 || co.Owners[0] != r.UID || co.Name != "s" || co.Namespace != ns {
		t.Errorf("metadata transform: %+v", co)
	}
	if again, _ := c.compactMetadata(co); again != co {
		t.Error("the metadata transform is not idempotent")
	}
	m, _ = c.compactMetadata(meta("Secret", "u", map[string]string{"team": "x"}, ownerOf(r)))
	if co := m.(*cachedObject); co.OptedIn || co.Owners != nil || co.Name != "u" {
		t.Errorf("metadata transform of an unlabelled object: %+v", co)
	}
	if key, err := cache.MetaNamespaceKeyFunc(co); err != nil || key != ns+"/s" {
		t.Errorf("store key %q, %v", key, err)
	}
}

func TestClassify(t *testing.T) {
	for path, want := range map[string]string{
		"PATCH /api/v1/namespaces/a/configmaps/x":                                 "patch configmaps",
		"GET /apis/apps/v1/replicasets?watch=true":                                "watch replicasets",
		"GET /apis/apps/v1/namespaces/a/replicasets":                              "list replicasets",
		"PUT /apis/coordination.k8s.io/v1/namespaces/a/leases/configmap-attacher": "update leases",
		"GET /apis/argoproj.io/v1alpha1":                                          "get other",
	} {
		method, p, _ := strings.Cut(path, " ")
		req, _ := httpRequest(method, p)
		v, r := verbAndResource(req)
		if v+" "+r != want {
			t.Errorf("%s: %s %s, want %s", path, v, r, want)
		}
	}
}

// TestStatefulSetOwnsThroughItsAnchor: every user owns. A StatefulSet that uses an opted-in
// ConfigMap gets an anchor for its current template (a ControllerRevision the controller
// creates, labelled, with no owner), and the ConfigMap gets the anchor and the ReplicaSet as
// owners in one patch; nothing is blocked.
func TestStatefulSetOwnsThroughItsAnchor(t *testing.T) {
	web := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: ns, UID: "uid-sts"},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: spec([]string{"shared"}, nil)}}}
	h := startWith(t, Config{}, []runtime.Object{web, sts}, meta("ConfigMap", "shared", optIn))
	anchor := plugin.NewAnchor("StatefulSet", "cache", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "shared"}})
	h.eventually("the anchor", func() bool {
		_, err := h.kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), anchor.ObjectName(), metav1.GetOptions{})
		return err == nil
	})
	h.eventually("the patch", func() bool { return len(h.patches()) > 0 })
	h.settle()
	cr, err := h.kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), anchor.ObjectName(), metav1.GetOptions{})
	if err != nil || !plugin.IsAnchor(cr) || len(cr.OwnerReferences) != 1 || !plugin.NamespaceController(metav1.GetControllerOfNoCopy(cr), ns) {
		t.Fatalf("anchor %+v, %v", cr, err)
	}
	all := h.patches()
	joined := strings.Join(all, ";")
	if !strings.Contains(joined, "web-1") || !strings.Contains(joined, anchor.ObjectName()) {
		t.Errorf("patches %v: want web-1 and the anchor", all)
	}
	if got := value(h.m.Blocked.WithLabelValues("ConfigMap")); got != 0 {
		t.Errorf("adoptions_blocked_total = %v, want 0", got)
	}
	if got := value(h.m.Anchors.WithLabelValues("created")); got != 1 {
		t.Errorf("anchors_total{created} = %v, want 1", got)
	}
}

// TestBlockedUntilTheBlockerGoes: a Pod of a controller kind configmap-attacher does not know
// (its lifetime cannot be seen) that uses an opted-in ConfigMap blocks its adoption (no patch,
// a Warning Event, adoptions_blocked_total); once the Pod is deleted, the ConfigMap is adopted
// at once, without waiting for a resync.
func TestBlockedUntilTheBlockerGoes(t *testing.T) {
	web := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "wf-1", Namespace: ns, UID: "uid-wf-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Workflow", Name: "wf", UID: "uid-wf", Controller: ptr(true)}}},
		Spec: spec([]string{"shared"}, nil)}
	h := startWith(t, Config{}, []runtime.Object{web, pod}, meta("ConfigMap", "shared", optIn))
	h.settle()
	equal(t, "patches with the Pod", h.patches(), nil)
	if got := value(h.m.Blocked.WithLabelValues("ConfigMap")); got < 1 {
		t.Errorf("adoptions_blocked_total = %v, want at least 1", got)
	}
	select {
	case e := <-h.events.Events:
		if !strings.Contains(e, "Warning OwnerReferenceBlocked ConfigMap shared is also used by Pod wf-1") {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Error("no Warning event for the blocked object")
	}
	if err := h.kube.CoreV1().Pods(ns).Delete(context.Background(), "wf-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch once the Pod is gone", func() bool { return len(h.patches()) == 1 })
	equal(t, "patches after", h.patches(), []string{"ConfigMap/shared: web-1"})
}

// TestStartedBeforeTheRolloutCRD: a controller started before the Rollout CRD existed cannot
// tell whether a Rollout that controls a ReplicaSet exists, so config a Deployment shares with
// such a ReplicaSet is blocked (making the Deployment's ReplicaSet its only owner could get it
// collected under the Rollout's pods); config only the Deployment uses is adopted.
func TestStartedBeforeTheRolloutCRD(t *testing.T) {
	ro := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	dep := rs("api-1", "Deployment", spec([]string{"shared", "own"}, nil))
	h := startServed(t, Config{Deployments: true}, false, []runtime.Object{ro, dep}, meta("ConfigMap", "shared", optIn), meta("ConfigMap", "own", optIn))
	h.settle()
	equal(t, "patches", h.patches(), []string{"ConfigMap/own: api-1"})
	if got := value(h.m.Blocked.WithLabelValues("ConfigMap")); got < 1 {
		t.Errorf("adoptions_blocked_total = %v, want at least 1 (shared)", got)
	}
}

// TestNewUserOfAnotherKindIsAdded: with -workloads rollouts, an object a Rollout's ReplicaSet
// owns gets the ReplicaSet of a Deployment that starts using it as an owner at once (not at
// the next resync): otherwise the Rollout's history moving on would collect it under the
// Deployment's pods.
func TestNewUserOfAnotherKindIsAdded(t *testing.T) {
	ro := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	h := start(t, Config{Rollouts: true}, []*appsv1.ReplicaSet{ro}, meta("ConfigMap", "shared", optIn))
	h.eventually("the Rollout's ReplicaSet as owner", func() bool { return len(h.patches()) == 1 })
	dep := rs("api-1", "Deployment", spec([]string{"shared"}, nil))
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the Deployment's ReplicaSet as owner too", func() bool { return len(h.patches()) == 2 })
	equal(t, "patches", h.patches(), []string{"ConfigMap/shared: api-1", "ConfigMap/shared: web-1"})
}

// TestRolloutOwnsThroughItsAnchor: read whole (a dynamic client), a Rollout's current template
// has an anchor as a Deployment's does, among the owners beside its ReplicaSet: a delete and
// re-apply of the Rollout keeps its config.
func TestRolloutOwnsThroughItsAnchor(t *testing.T) {
	web := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	ro := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "web", "namespace": ns, "uid": "uid-Rollout"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": "app:1"}},
			"volumes":    []any{map[string]any{"name": "cfg", "configMap": map[string]any{"name": "shared"}}},
		}}},
	}}
	gvr := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "RolloutList"}, ro)
	h := startWith(t, Config{Dynamic: dyn}, []runtime.Object{web}, meta("ConfigMap", "shared", optIn))
	anchor := plugin.NewAnchor(plugin.KindRollout, "web", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "shared"}})
	h.eventually("the Rollout's anchor", func() bool {
		_, err := h.kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), anchor.ObjectName(), metav1.GetOptions{})
		return err == nil
	})
	h.eventually("the patch", func() bool {
		joined := strings.Join(h.patches(), ";")
		return strings.Contains(joined, "web-1") && strings.Contains(joined, anchor.ObjectName())
	})
}

// TestWorkloadsNarrowsAdoption: -workloads picks whose use adopts an object, never which users
// of an adopted object own it. Without statefulsets, a ConfigMap only a StatefulSet uses is
// left alone; one a Rollout's ReplicaSet also uses is adopted, with the StatefulSet's anchor
// among its owners.
func TestWorkloadsNarrowsAdoption(t *testing.T) {
	web := rs("web-1", "Rollout", spec([]string{"shared"}, nil))
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: ns, UID: "uid-sts"},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: spec([]string{"shared", "sts-only"}, nil)}}}
	h := startWith(t, Config{Rollouts: true, Deployments: true, Adopting: map[string]bool{"Job": true}}, []runtime.Object{web, sts},
		meta("ConfigMap", "shared", optIn), meta("ConfigMap", "sts-only", optIn))
	anchor := plugin.NewAnchor("StatefulSet", "cache", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "shared"}, {Kind: plugin.KindConfigMap, Name: "sts-only"}})
	h.eventually("the adopted object's patch", func() bool {
		joined := strings.Join(h.patches(), ";")
		return strings.Contains(joined, "web-1") && strings.Contains(joined, anchor.ObjectName())
	})
	h.settle()
	for _, p := range h.patches() {
		if strings.Contains(p, "sts-only") {
			t.Errorf("patch %s: sts-only is used by a StatefulSet alone, which -workloads does not name", p)
		}
	}
}

// TestAnotherInstallsAnchorsAreKept: an anchor of objects this install does not adopt (another
// install's selector) is never this install's to delete, whatever it thinks of the anchor: here
// a crowd anchor, which this install, seeing no opted-in object, finds unneeded. Both once the
// anchor owns the object and in the moment after the other install created it, before its
// patch made it an owner.
func TestAnotherInstallsAnchorsAreKept(t *testing.T) {
	for _, owner := range []bool{true, false} {
		t.Run(fmt.Sprintf("owner=%v", owner), func(t *testing.T) {
			o := plugin.Object{Kind: plugin.KindConfigMap, Name: "theirs"}
			cr := plugin.CrowdAnchor(o).ControllerRevision(ns, "uid-ns")
			cr.UID = "uid-crowd"
			var owners []metav1.OwnerReference
			if owner {
				owners = append(owners, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ControllerRevision", Name: cr.Name, UID: cr.UID})
			}
			h := startWith(t, Config{}, []runtime.Object{cr}, meta("ConfigMap", "theirs", map[string]string{"team": "other"}, owners...))
			h.settle()
			time.Sleep(2 * time.Second) // the crowd's look comes a second after the object's reconcile
			h.settle()
			if _, err := h.kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), cr.Name, metav1.GetOptions{}); err != nil {
				t.Fatalf("the other install's crowd anchor: %v", err)
			}
			if got := value(h.m.Anchors.WithLabelValues("deleted")); got != 0 {
				t.Errorf("anchors_total{deleted} = %v, want 0", got)
			}
		})
	}
}
