// Package clientset holds the typed clients of the modes that read more than the core does
// (the command line reads Rollouts and Deployments, audit lists them, the controller runs
// informers), and Typed, which serves the core's narrow plugin.Kube from a typed clientset,
// client-go's fakes included. The step plugin does not import it: the typed clientset is
// the heaviest part of client-go, and the step needs only plugin.Kube.
package clientset

import (
	"context"
	"fmt"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Clients are a mode's clients: the typed clientset, the metadata client for ConfigMaps and
// Secrets (their data never enters the process), and the Argo Rollouts clientset.
type Clients struct {
	Kube     kubernetes.Interface
	Meta     metadata.Interface
	Rollouts rolloutsclient.Interface
}

// Core is what the core takes: Kube through Typed, and the same metadata client.
func (c Clients) Core() plugin.Clients {
	return plugin.Clients{Kube: Typed(c.Kube), Meta: c.Meta}
}

// New builds every client from one configuration.
func New(o plugin.ClientOptions) (Clients, error) {
	cfg, err := plugin.RESTConfig(o)
	if err != nil {
		return Clients{}, err
	}
	return ForConfig(cfg)
}

// ForConfig builds every client from a REST config as given (tests wrap it, e.g. to count
// requests).
func ForConfig(cfg *rest.Config) (Clients, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("creating Kubernetes metadata client: %w", err)
	}
	ro, err := rolloutsclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("creating Argo Rollouts client: %w", err)
	}
	return Clients{Kube: kube, Meta: meta, Rollouts: ro}, nil
}

// Typed serves plugin.Kube from a typed clientset.
func Typed(k kubernetes.Interface) plugin.Kube {
	if k == nil {
		return nil
	}
	return typed{k}
}

type typed struct{ k kubernetes.Interface }

func (t typed) GetReplicaSet(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
	return t.k.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (t typed) ListReplicaSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	return t.k.AppsV1().ReplicaSets(ns).List(ctx, o)
}

func (t typed) ListStatefulSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.StatefulSetList, error) {
	return t.k.AppsV1().StatefulSets(ns).List(ctx, o)
}

func (t typed) ListDaemonSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.DaemonSetList, error) {
	return t.k.AppsV1().DaemonSets(ns).List(ctx, o)
}

func (t typed) ListJobs(ctx context.Context, ns string, o metav1.ListOptions) (*batchv1.JobList, error) {
	return t.k.BatchV1().Jobs(ns).List(ctx, o)
}

func (t typed) ListCronJobs(ctx context.Context, ns string, o metav1.ListOptions) (*batchv1.CronJobList, error) {
	return t.k.BatchV1().CronJobs(ns).List(ctx, o)
}

func (t typed) ListPods(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	return t.k.CoreV1().Pods(ns).List(ctx, o)
}

func (t typed) ListControllerRevisions(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ControllerRevisionList, error) {
	return t.k.AppsV1().ControllerRevisions(ns).List(ctx, o)
}

func (t typed) GetLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	return t.k.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
}

func (t typed) CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	return t.k.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}
