package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// scoped is a harness whose fakes get their reactors before Run starts the informers, and
// whose log entries are kept.
type scoped struct {
	*harness
	logs *logtest.Hook
}

// startScoped is start with setup run before Run, ready as the start condition, and
// cfg.Events left as given (nil: the broadcaster writing to the fake clientset).
func startScoped(t *testing.T, cfg Config, objs []runtime.Object, setup func(*scoped), ready func(*scoped) bool) *scoped {
	t.Helper()
	var kobjs, mobjs []runtime.Object
	mobjs = append(mobjs, liveWorkload("Rollout"), liveWorkload("Deployment"))
	live := map[string]bool{ns + "/Rollout": true, ns + "/Deployment": true}
	for _, o := range objs {
		r, ok := o.(*appsv1.ReplicaSet)
		if !ok {
			mobjs = append(mobjs, o)
			continue
		}
		kobjs = append(kobjs, o)
		// The ReplicaSet's workload exists: every user counts, and one whose workload is gone
		// never owns.
		if ref := metav1.GetControllerOf(r); ref != nil && !live[r.Namespace+"/"+ref.Kind] {
			live[r.Namespace+"/"+ref.Kind] = true
			mobjs = append(mobjs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
				ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: r.Namespace, UID: ref.UID}})
		}
	}
	sch := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	h := &scoped{harness: &harness{t: t, kube: fake.NewClientset(kobjs...), md: metadatafake.NewSimpleMetadataClient(sch, mobjs...),
		m: NewMetrics(), done: make(chan error, 1)}}
	cfg.Kube, cfg.Meta, cfg.Metrics = h.kube, h.md, h.m
	if cfg.Selector == nil {
		cfg.Selector = plugin.OptInSelector()
	}
	cfg.Rollouts, cfg.Deployments, cfg.RolloutsServed, cfg.ExperimentsServed = true, true, true, true
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	log.SetOutput(testWriter{t})
	h.logs = logtest.NewLocal(log)
	cfg.Log = log
	if setup != nil {
		setup(h)
	}
	ctl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.ctl = ctl
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- ctl.Run(ctx) }()
	t.Cleanup(h.stop)
	h.eventually("the start condition", func() bool { return ready(h) })
	return h
}

func servingAndLeading(h *scoped) bool { return h.ctl.Ready() && h.ctl.Leading() }

// in moves a ReplicaSet or an object to namespace n.
func in[T metav1.Object](n string, o T) T {
	o.SetNamespace(n)
	return o
}

// forbidList makes list (hence the informers' sync) of resources in namespace n forbidden
// while *on is true; resources empty: every resource.
func forbidList(h *scoped, n string, on *atomic.Bool, resources ...string) {
	react := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != n || !on.Load() {
			return false, nil, nil
		}
		r := a.GetResource().Resource
		for _, want := range resources {
			if want == r {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: a.GetResource().Group, Resource: r}, "",
					fmt.Errorf(`User "system:serviceaccount:cma:controller" cannot list resource %q in the namespace %q`, r, n))
			}
		}
		if len(resources) == 0 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: a.GetResource().Group, Resource: r}, "", errors.New("no Role"))
		}
		return false, nil, nil
	}
	h.kube.PrependReactor("list", "*", react)
	h.md.PrependReactor("list", "*", react)
}

func (h *scoped) logged(level logrus.Level, contains string, fields logrus.Fields) bool {
	for _, e := range h.logs.AllEntries() {
		if e.Level != level || !strings.Contains(e.Message, contains) {
			continue
		}
		ok := true
		for k, v := range fields {
			ok = ok && fmt.Sprint(e.Data[k]) == fmt.Sprint(v)
		}
		if ok {
			return true
		}
	}
	return false
}

func (h *scoped) reconciles() float64 {
	n := 0.0
	for _, r := range []string{"noop", "patched", "dry_run", "error"} {
		n += value(h.m.Reconciles.WithLabelValues(r))
	}
	return n
}

// A namespace whose Role is missing (list forbidden) and one that may list all but Secrets do
// not stop adoption in the namespace that syncs, nor the process: the controller becomes
// ready and leads at once (a forbidden scope is not waited for), reports the two scopes in
// /readyz, the gauge and a Warning naming the namespace, the resource and the RBAC fix, and
// never reconciles their objects. When the RBAC is fixed, the scope syncs and is served.
func TestUnsyncedNamespaceDoesNotStopOthers(t *testing.T) {
	defer func(d time.Duration) { syncTimeout = d }(syncTimeout)
	syncTimeout = time.Hour // the forbidden scopes are not waited for: no timeout involved
	var locked, partial atomic.Bool
	locked.Store(true)
	partial.Store(true)
	h := startScoped(t, Config{Namespaces: []string{"shop", "locked", "partial"}, Workers: 2}, []runtime.Object{
		rs("web-1", "Rollout", spec([]string{"cm-1"}, nil)), meta("ConfigMap", "cm-1", optIn),
		in("locked", rs("web-2", "Rollout", spec([]string{"cm-2"}, nil))), in("locked", meta("ConfigMap", "cm-2", optIn)),
		in("partial", rs("web-3", "Rollout", spec([]string{"cm-3"}, nil))), in("partial", meta("ConfigMap", "cm-3", optIn)),
	}, func(h *scoped) {
		forbidList(h, "locked", &locked)
		forbidList(h, "partial", &partial, "secrets")
	}, servingAndLeading)
	h.settle()
	equal(t, "patches while two namespaces are not synced", h.patches(), []string{"ConfigMap/cm-1: web-1"})

	for n, want := range map[string]float64{"shop": 1, "locked": 0, "partial": 0} {
		if got := value(h.m.ScopeSynced.WithLabelValues(n)); got != want {
			t.Errorf("scope_synced{namespace=%q} = %v, want %v", n, got, want)
		}
	}
	if got := value(h.m.Ready); got != 1 {
		t.Errorf("ready = %v, want 1", got)
	}
	ready, body := h.ctl.Readiness()
	if !ready || !strings.HasPrefix(body, "ok: serving 1 of 3 namespaces") ||
		!strings.Contains(body, "not synced: namespace locked: replicasets, configmaps, controllerrevisions, cronjobs, daemonsets, deployments, experiments, jobs, pods, rollouts, secrets, statefulsets; is list and watch allowed? ") ||
		!strings.Contains(body, "not synced: namespace partial: secrets; is list and watch allowed? ") || !strings.Contains(body, RBACHintNamespaced) {
		t.Errorf("readiness %v:\n%s", ready, body)
	}
	for _, w := range []logrus.Fields{{"namespace": "locked", "resource": "replicasets"}, {"namespace": "partial", "resource": "secrets"}} {
		if !h.logged(logrus.WarnLevel, "grant list and watch on "+fmt.Sprint(w["resource"])+" to the controller's service account: "+RBACHintNamespaced, w) {
			t.Errorf("no Warning naming %v and the RBAC fix", w)
		}
	}
	// The namespace, not the exact resources: under load the warning may also name resources
	// still syncing at that moment (the readiness above names the one that stays unsynced).
	if !h.logged(logrus.WarnLevel, "namespace partial did not sync: serving the other namespaces", logrus.Fields{"namespace": "partial"}) {
		t.Error("no Warning at the start naming the namespace that did not sync")
	}

	// The full reconcile skips them, and an object of theirs that reaches the queue anyway
	// (an event while the scope syncs) is not reconciled: partial's ConfigMap and ReplicaSet
	// caches are complete, its Secrets are not.
	if n := h.ctl.enqueueAll(); n != 1 {
		t.Errorf("enqueueAll queued %d objects, want 1 (shop's)", n)
	}
	h.settle()
	before := h.reconciles()
	h.ctl.queue.Add(Key{"partial", plugin.KindConfigMap, "cm-3"})
	h.settle()
	if got := h.reconciles(); got != before {
		t.Errorf("an object of an unsynced namespace was reconciled (%v reconciles)", got-before)
	}
	if u, l := h.ctl.gaps(); u["partial"] != 0 || l["partial"] != 0 {
		t.Errorf("the gauges count an unsynced namespace: unowned %v lost %v", u, l)
	}
	equal(t, "patches", h.patches(), []string{"ConfigMap/cm-1: web-1"})

	// The RBAC is fixed: the namespaces sync (after the reflector's backoff) and are served.
	locked.Store(false)
	partial.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for len(h.ctl.Unsynced()) > 0 || len(h.patches()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("not served after the RBAC fix: unsynced %v, patches %q", h.ctl.Unsynced(), h.patches())
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.settle()
	equal(t, "patches after the RBAC fix", h.patches(), []string{"ConfigMap/cm-1: web-1", "ConfigMap/cm-2: web-2", "ConfigMap/cm-3: web-3"})
	if got := value(h.m.ScopeSynced.WithLabelValues("locked")); got != 1 {
		t.Errorf("scope_synced{locked} = %v after the fix", got)
	}
	if ready, body := h.ctl.Readiness(); !ready || body != "ok" {
		t.Errorf("readiness after the fix %v: %s", ready, body)
	}
	if !h.logged(logrus.InfoLevel, "namespace locked synced late: now served", logrus.Fields{"objects": 1}) {
		t.Error("no log of the late namespace being served")
	}
}

// With no namespace synced the process neither exits nor becomes ready, past the sync
// timeout too; once the list is allowed it serves.
func TestNoNamespaceSyncedWaits(t *testing.T) {
	defer func(d time.Duration) { syncTimeout = d }(syncTimeout)
	syncTimeout = 200 * time.Millisecond
	var locked atomic.Bool
	locked.Store(true)
	h := startScoped(t, Config{Namespaces: []string{"locked"}}, []runtime.Object{
		in("locked", rs("web-2", "Rollout", spec([]string{"cm-2"}, nil))), in("locked", meta("ConfigMap", "cm-2", optIn)),
	}, func(h *scoped) { forbidList(h, "locked", &locked) }, func(h *scoped) bool {
		return h.logged(logrus.WarnLevel, "no namespace synced after 200ms: still waiting (not ready)", nil)
	})
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-h.done:
		h.cancel = nil
		t.Fatalf("Run returned with no namespace synced: %v", err)
	default:
	}
	if ready, body := h.ctl.Readiness(); ready || body != "caches not synced\nnot synced: namespace locked: replicasets, configmaps, controllerrevisions, cronjobs, daemonsets, deployments, experiments, jobs, pods, rollouts, secrets, statefulsets; is list and watch allowed? "+rbacHint("locked") {
		t.Errorf("readiness %v:\n%s", ready, body)
	}
	if h.ctl.Leading() || value(h.m.Ready) != 0 {
		t.Error("leading or ready with no namespace synced")
	}
	locked.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for !servingAndLeading(h) || len(h.patches()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after the RBAC fix: unsynced %v", h.ctl.Unsynced())
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.settle()
	equal(t, "patches", h.patches(), []string{"ConfigMap/cm-2: web-2"})
}

// A namespace that fails to sync for another reason (here every list answers 500) is waited
// for up to the sync timeout, then left to the background while the others are served.
func TestSyncTimeoutServesSynced(t *testing.T) {
	defer func(d time.Duration) { syncTimeout = d }(syncTimeout)
	syncTimeout = 300 * time.Millisecond
	t0 := time.Now()
	h := startScoped(t, Config{Namespaces: []string{"shop", "flaky"}}, []runtime.Object{
		rs("web-1", "Rollout", spec([]string{"cm-1"}, nil)), meta("ConfigMap", "cm-1", optIn),
	}, func(h *scoped) {
		h.md.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() == "flaky" {
				return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
			}
			return false, nil, nil
		})
	}, servingAndLeading)
	if d := time.Since(t0); d < syncTimeout {
		t.Errorf("served after %s, before the sync timeout (%s), with a namespace that may still sync", d, syncTimeout)
	}
	h.settle()
	equal(t, "patches", h.patches(), []string{"ConfigMap/cm-1: web-1"})
	if u := h.ctl.Unsynced(); len(u) != 1 || u[0].String() != "namespace flaky: configmaps, experiments, rollouts, secrets" {
		t.Errorf("unsynced %v", u)
	}
	if !h.logged(logrus.WarnLevel, "cannot list configmaps in namespace flaky", logrus.Fields{"namespace": "flaky", "resource": "configmaps"}) {
		t.Error("no Warning naming the namespace and resource that cannot be listed")
	}
}

// scopeInformers lists every informer of a scope, by resource.
func TestScopeInformers(t *testing.T) {
	c, err := New(Config{Kube: fake.NewClientset(), Meta: metadatafake.NewSimpleMetadataClient(runtime.NewScheme()), Selector: plugin.OptInSelector(), Rollouts: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ni := range scopeInformers(c.scopes[""]) {
		got = append(got, ni.resource)
	}
	// The workload and template caches of "every user counts" (Rollouts and Experiments only
	// when served).
	equal(t, "informers", got, []string{"replicasets", "configmaps", "controllerrevisions", "cronjobs", "daemonsets", "deployments", "jobs", "pods", "secrets", "statefulsets"})
	if u := c.Unsynced(); len(u) != 1 || u[0].String() != "all namespaces: replicasets, configmaps, controllerrevisions, cronjobs, daemonsets, deployments, jobs, pods, secrets, statefulsets" {
		t.Errorf("unsynced before Run: %v", u)
	}
}
