package plugin

import (
	"context"
	"fmt"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Kube is every typed request of the core: the lists whose pod templates and controllers
// count (ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, Pods), the read of one
// ReplicaSet, and the creation of an Event. ConfigMaps and Secrets go through the metadata client instead.
//
// It is this narrow so that the step plugin, a process that lives inside the Rollouts
// controller's pod, does not link client-go's typed clientset (every group's client and
// apply configurations, ~15 MB of binary and ~10 MiB of resident memory): NewKube serves it
// with three REST clients and a scheme of the three groups it reads. Modes that hold a typed
// clientset anyway (the command line, audit, the controller, and the tests' client-go fakes)
// pass it through clientset.Typed.
type Kube interface {
	// GetReplicaSet is the live confirmation of a new owner (needs get; else the core lists
	// by name).
	GetReplicaSet(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error)
	ListReplicaSets(ctx context.Context, ns string, opts metav1.ListOptions) (*appsv1.ReplicaSetList, error)
	ListStatefulSets(ctx context.Context, ns string, opts metav1.ListOptions) (*appsv1.StatefulSetList, error)
	ListDaemonSets(ctx context.Context, ns string, opts metav1.ListOptions) (*appsv1.DaemonSetList, error)
	ListJobs(ctx context.Context, ns string, opts metav1.ListOptions) (*batchv1.JobList, error)
	ListCronJobs(ctx context.Context, ns string, opts metav1.ListOptions) (*batchv1.CronJobList, error)
	ListPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error)
	// ListControllerRevisions lists StatefulSets' and DaemonSets' revisions: their pod
	// templates stand for the Pods that carry them (readusage.go).
	ListControllerRevisions(ctx context.Context, ns string, opts metav1.ListOptions) (*appsv1.ControllerRevisionList, error)
	CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	// GetLease reads a controller's leader Lease (does a live controller maintain shared
	// config?).
	GetLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error)
}

// kubeScheme knows the four groups Kube reads, and metav1's options for each.
var kubeScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static registrations: cannot fail
		}
	}
	return s
}()

var kubeParams = runtime.NewParameterCodec(kubeScheme)

// restKube is Kube over one REST client per group, sharing the HTTP client and the
// client-side rate limiter as client-go's typed clientset does.
type restKube struct {
	core, apps, batch, coordination rest.Interface
}

// NewKube builds Kube from a REST config, for requests sent through httpClient (nil: a new
// one for cfg).
func NewKube(cfg *rest.Config, httpClient *http.Client) (Kube, error) {
	var err error
	if httpClient == nil {
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, fmt.Errorf("creating the HTTP client: %w", err)
		}
	}
	c := *cfg // shallow copy, as the typed clientset does
	if c.RateLimiter == nil && c.QPS > 0 {
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	k := &restKube{}
	for _, g := range []struct {
		into *rest.Interface
		gv   schema.GroupVersion
		path string
	}{{&k.core, corev1.SchemeGroupVersion, "/api"}, {&k.apps, appsv1.SchemeGroupVersion, "/apis"}, {&k.batch, batchv1.SchemeGroupVersion, "/apis"},
		{&k.coordination, coordinationv1.SchemeGroupVersion, "/apis"}} {
		gc := c
		gv := g.gv
		gc.GroupVersion, gc.APIPath = &gv, g.path
		gc.NegotiatedSerializer = serializer.NewCodecFactory(kubeScheme).WithoutConversion()
		// Protobuf answers: the lists of a busy namespace's users are several times smaller
		// and cheaper to decode than JSON, on both sides; JSON stays acceptable for a server
		// or a proxy that does not speak it. (The one body sent, an Event, stays JSON.)
		gc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		if gc.UserAgent == "" {
			gc.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientForConfigAndClient(&gc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("creating the %s client: %w", gv, err)
		}
		*g.into = rc
	}
	return k, nil
}

func list[T runtime.Object](ctx context.Context, c rest.Interface, ns, resource string, opts metav1.ListOptions, into T) (T, error) {
	err := c.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, kubeParams).Do(ctx).Into(into)
	if err != nil {
		var zero T
		return zero, err
	}
	return into, nil
}

func (k *restKube) GetReplicaSet(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
	out := &appsv1.ReplicaSet{}
	if err := k.apps.Get().Namespace(ns).Resource("replicasets").Name(name).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (k *restKube) ListReplicaSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	return list(ctx, k.apps, ns, "replicasets", o, &appsv1.ReplicaSetList{})
}

func (k *restKube) ListStatefulSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.StatefulSetList, error) {
	return list(ctx, k.apps, ns, "statefulsets", o, &appsv1.StatefulSetList{})
}

func (k *restKube) ListDaemonSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.DaemonSetList, error) {
	return list(ctx, k.apps, ns, "daemonsets", o, &appsv1.DaemonSetList{})
}

func (k *restKube) ListJobs(ctx context.Context, ns string, o metav1.ListOptions) (*batchv1.JobList, error) {
	return list(ctx, k.batch, ns, "jobs", o, &batchv1.JobList{})
}

func (k *restKube) ListCronJobs(ctx context.Context, ns string, o metav1.ListOptions) (*batchv1.CronJobList, error) {
	return list(ctx, k.batch, ns, "cronjobs", o, &batchv1.CronJobList{})
}

func (k *restKube) ListPods(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return list(ctx, k.core, ns, "pods", o, &corev1.PodList{})
}

func (k *restKube) ListControllerRevisions(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ControllerRevisionList, error) {
	return list(ctx, k.apps, ns, "controllerrevisions", o, &appsv1.ControllerRevisionList{})
}

func (k *restKube) GetLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	if err := k.coordination.Get().Namespace(ns).Resource("leases").Name(name).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (k *restKube) CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := k.core.Post().Namespace(ev.Namespace).Resource("events").
		VersionedParams(&metav1.CreateOptions{}, kubeParams).Body(ev).Do(ctx).Into(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}
