package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// panicOnce is an EventRecorder whose first Eventf panics.
type panicOnce struct {
	record.EventRecorder
	panicked atomic.Bool
}

func (p *panicOnce) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	if p.panicked.CompareAndSwap(false, true) {
		panic("planted panic in the Event recorder")
	}
	p.EventRecorder.Eventf(obj, eventtype, reason, format, args...)
}

// A panic in a reconcile (here in the Warning Event of a forbidden patch; a panic of the
// patch itself is already recovered by the core, plugin.Attacher.write) is logged with the
// key, counted as reason "panic", retried with backoff, and the (only) worker keeps working.
func TestReconcilePanicRecovered(t *testing.T) {
	fr := record.NewFakeRecorder(100)
	rec := &panicOnce{EventRecorder: fr}
	h := startScoped(t, Config{Workers: 1, Events: rec}, nil, func(h *scoped) {
		h.md.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.(k8stesting.PatchAction).GetName() == "cm-1" {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cm-1", errors.New("RBAC: nope"))
			}
			return false, nil, nil
		})
	}, servingAndLeading)
	if _, err := h.md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).(fakeWriter).CreateFake(meta("ConfigMap", "cm-1", optIn), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), rs("web-1", "Rollout", spec([]string{"cm-1"}, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-fr.Events: // the retry after the panic
		if !strings.HasPrefix(e, "Warning OwnerReferenceFailed cannot make ReplicaSet web-1 an owner of ConfigMap cm-1") {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Warning event after the panic: the key was not retried")
	}
	if got := value(h.m.ReconcileErrors.WithLabelValues("panic")); got != 1 {
		t.Errorf("reconcile_errors_total{panic} = %v, want 1", got)
	}
	if !h.logged(logrus.ErrorLevel, "reconcile panicked", logrus.Fields{"key": ns + "/ConfigMap/cm-1", "panic": "planted panic in the Event recorder"}) {
		t.Error("the panic is not logged with the key")
	}
	// The worker still works.
	if _, err := h.md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).(fakeWriter).CreateFake(meta("ConfigMap", "cm-2", optIn), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), rs("web-2", "Rollout", spec([]string{"cm-2"}, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the patch of cm-2 after the panic", func() bool { return value(h.m.OwnerReferencesAdded.WithLabelValues("ConfigMap")) == 1 })
}

// A panic in the Event sink (the broadcaster's goroutine re-panics with HandleCrash) is
// recovered and logged; the process keeps running and shuts down cleanly.
func TestEventSinkPanicRecovered(t *testing.T) {
	h := startScoped(t, Config{}, []runtime.Object{meta("ConfigMap", "cm-1", optIn)}, func(h *scoped) {
		h.md.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cm-1", errors.New("RBAC: nope"))
		})
		h.kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
			panic("planted panic in the Event sink")
		})
	}, servingAndLeading)
	if _, err := h.kube.AppsV1().ReplicaSets(ns).Create(context.Background(), rs("web-1", "Rollout", spec([]string{"cm-1"}, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the sink's panic logged", func() bool {
		return h.logged(logrus.ErrorLevel, "writing an Event panicked", logrus.Fields{"verb": "create", "event": "OwnerReferenceFailed", "object": "Rollout shop/web"})
	})
	if !servingAndLeading(h) {
		t.Error("not leading after the sink's panic")
	}
}

type panicSink struct{}

func (panicSink) Create(*corev1.Event) (*corev1.Event, error)        { panic("create") }
func (panicSink) Update(*corev1.Event) (*corev1.Event, error)        { panic("update") }
func (panicSink) Patch(*corev1.Event, []byte) (*corev1.Event, error) { panic("patch") }

// Every call of the sink is guarded, and the error is one the broadcaster does not retry.
func TestSafeSink(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	s := safeSink{sink: panicSink{}, log: log}
	ev := &corev1.Event{}
	for verb, call := range map[string]func() (*corev1.Event, error){
		"create": func() (*corev1.Event, error) { return s.Create(ev) },
		"update": func() (*corev1.Event, error) { return s.Update(ev) },
		"patch":  func() (*corev1.Event, error) { return s.Patch(ev, nil) },
	} {
		out, err := call()
		var rce *restclient.RequestConstructionError
		if out != nil || !errors.As(err, &rce) || !strings.Contains(err.Error(), "event sink "+verb+" panicked: "+verb) {
			t.Errorf("%s: %v, %v", verb, out, err)
		}
	}
}
