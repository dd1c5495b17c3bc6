// Package fakemeta is a test double: a metadata client for ConfigMaps and Secrets backed by a
// typed (usually fake) clientset.
package fakemeta

import (
	"context"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// New serves the metadata client's ConfigMap and Secret calls (Get, List, Patch), and the lists
// of Pods and Deployments, from a typed client, so that a unit test keeps one fake clientset —
// its actions and reactors — for both clients. Rollouts and Experiments, which a typed
// Kubernetes client cannot hold, are served from workloads (their TypeMeta.Kind says which);
// any other resource answers 404, as a resource that is not served does. Production code
// reads ConfigMaps and Secrets only through the real metadata client; the integration tests
// check the Accept header of its requests.
func New(c kubernetes.Interface, workloads ...metav1.PartialObjectMetadata) metadata.Interface {
	return kubeMeta{c: c, workloads: workloads}
}

// WithRollouts is New with the Rollouts and Experiments served from a (usually fake) Argo
// Rollouts clientset.
func WithRollouts(c kubernetes.Interface, ro rolloutsclient.Interface) metadata.Interface {
	return kubeMeta{c: c, ro: ro}
}

type kubeMeta struct {
	c         kubernetes.Interface
	ro        rolloutsclient.Interface
	workloads []metav1.PartialObjectMetadata
}

func (k kubeMeta) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return kubeMetaGetter{c: k.c, ro: k.ro, resource: gvr.Resource, workloads: k.workloads}
}

type kubeMetaGetter struct {
	metadata.ResourceInterface // cluster-scoped calls: unused
	c                          kubernetes.Interface
	ro                         rolloutsclient.Interface
	resource                   string
	workloads                  []metav1.PartialObjectMetadata
}

func (g kubeMetaGetter) Namespace(ns string) metadata.ResourceInterface {
	return kubeMetaResource{c: g.c, ro: g.ro, resource: g.resource, ns: ns, workloads: g.workloads}
}

type kubeMetaResource struct {
	metadata.ResourceInterface // unused methods
	c                          kubernetes.Interface
	ro                         rolloutsclient.Interface
	resource, ns               string
	workloads                  []metav1.PartialObjectMetadata
}

// listOther serves the lists of ReplicaSets, Pods, Deployments, Rollouts and Experiments.
func (r kubeMetaResource) listOther(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	out := &metav1.PartialObjectMetadataList{}
	switch r.resource {
	case "replicasets":
		l, err := r.c.AppsV1().ReplicaSets(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("ReplicaSet", it.ObjectMeta))
		}
	case "pods":
		l, err := r.c.CoreV1().Pods(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("Pod", it.ObjectMeta))
		}
	case "deployments":
		l, err := r.c.AppsV1().Deployments(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("Deployment", it.ObjectMeta))
		}
	case "rollouts":
		if r.ro == nil {
			return r.fromWorkloads("Rollout"), nil
		}
		l, err := r.ro.ArgoprojV1alpha1().Rollouts(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("Rollout", it.ObjectMeta))
		}
	case "experiments":
		if r.ro == nil {
			return r.fromWorkloads("Experiment"), nil
		}
		l, err := r.ro.ArgoprojV1alpha1().Experiments(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("Experiment", it.ObjectMeta))
		}
	default:
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: r.resource}, "")
	}
	return out, nil
}

func (r kubeMetaResource) fromWorkloads(kind string) *metav1.PartialObjectMetadataList {
	out := &metav1.PartialObjectMetadataList{}
	for _, w := range r.workloads {
		if w.Kind == kind && w.Namespace == r.ns {
			out.Items = append(out.Items, w)
		}
	}
	return out
}

func partial(kind string, m metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind}, ObjectMeta: m}
}

// Get reads a ConfigMap or Secret with the typed fake's GET; any other object it finds by name
// in the resource's list (every resource List serves), answering NotFound, as the apiserver
// does, when there is none or the resource is not served.
func (r kubeMetaResource) Get(ctx context.Context, name string, opts metav1.GetOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	switch r.resource { // the typed fake's own GET, so that its reactors see it
	case "secrets":
		s, err := r.c.CoreV1().Secrets(r.ns).Get(ctx, name, opts)
		if err != nil {
			return nil, err
		}
		return partial("Secret", s.ObjectMeta), nil
	case "configmaps":
		cm, err := r.c.CoreV1().ConfigMaps(r.ns).Get(ctx, name, opts)
		if err != nil {
			return nil, err
		}
		return partial("ConfigMap", cm.ObjectMeta), nil
	}
	l, err := r.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		if l.Items[i].Name == name {
			return &l.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: r.resource}, name)
}

func (r kubeMetaResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	if r.resource != "secrets" && r.resource != "configmaps" {
		return r.listOther(ctx, opts)
	}
	out := &metav1.PartialObjectMetadataList{}
	if r.resource == "secrets" {
		l, err := r.c.CoreV1().Secrets(r.ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out.Items = append(out.Items, *partial("Secret", it.ObjectMeta))
		}
		return out, nil
	}
	l, err := r.c.CoreV1().ConfigMaps(r.ns).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, it := range l.Items {
		out.Items = append(out.Items, *partial("ConfigMap", it.ObjectMeta))
	}
	return out, nil
}

func (r kubeMetaResource) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	if r.resource == "secrets" {
		s, err := r.c.CoreV1().Secrets(r.ns).Patch(ctx, name, pt, data, opts)
		if err != nil {
			return nil, err
		}
		return partial("Secret", s.ObjectMeta), nil
	}
	cm, err := r.c.CoreV1().ConfigMaps(r.ns).Patch(ctx, name, pt, data, opts)
	if err != nil {
		return nil, err
	}
	return partial("ConfigMap", cm.ObjectMeta), nil
}

// WithoutResources answers 404 to every request for the named resources (say "experiments"),
// as an apiserver that does not serve them does, and passes the rest to m.
func WithoutResources(m metadata.Interface, resources ...string) metadata.Interface {
	return withoutResources{m, resources}
}

type withoutResources struct {
	metadata.Interface
	gone []string
}

func (w withoutResources) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	for _, r := range w.gone {
		if r == gvr.Resource {
			return kubeMetaGetter{resource: "not-served:" + r}
		}
	}
	return w.Interface.Resource(gvr)
}
