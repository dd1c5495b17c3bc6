package audit

import (
	"context"
	"fmt"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// Lister is every read audit makes, each one request (the Auditor adds the retries and the
// per-request deadline). A namespace "" means every namespace.
type Lister interface {
	ListRollouts(ctx context.Context, namespace string) ([]v1alpha1.Rollout, error)
	GetRollout(ctx context.Context, namespace, name string) (*v1alpha1.Rollout, error)
	ListDeployments(ctx context.Context, namespace string) ([]appsv1.Deployment, error)
	// GetDeployment reads the Deployment a workloadRef Rollout names.
	GetDeployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error)
	ListReplicaSets(ctx context.Context, namespace string) ([]appsv1.ReplicaSet, error)
	// ListMeta lists the metadata of the namespace's ConfigMaps or Secrets: never their data.
	ListMeta(ctx context.Context, namespace string, kind plugin.Kind) ([]metav1.ObjectMeta, error)
}

// NewLister reads through the clients: ConfigMaps and Secrets through the metadata client
// (cl.Meta, which clientset.ForConfig always sets), so their data never leaves the
// apiserver.
func NewLister(cl clientset.Clients) Lister {
	return clientLister{kube: cl.Kube, rollouts: cl.Rollouts, meta: cl.Meta}
}

type clientLister struct {
	kube     kubernetes.Interface
	rollouts rolloutsclient.Interface
	meta     metadata.Interface
}

func (l clientLister) ListRollouts(ctx context.Context, ns string) ([]v1alpha1.Rollout, error) {
	list, err := l.rollouts.ArgoprojV1alpha1().Rollouts(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (l clientLister) GetRollout(ctx context.Context, ns, name string) (*v1alpha1.Rollout, error) {
	return l.rollouts.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, name, metav1.GetOptions{})
}

func (l clientLister) ListDeployments(ctx context.Context, ns string) ([]appsv1.Deployment, error) {
	list, err := l.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (l clientLister) GetDeployment(ctx context.Context, ns, name string) (*appsv1.Deployment, error) {
	return l.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
}

func (l clientLister) ListReplicaSets(ctx context.Context, ns string) ([]appsv1.ReplicaSet, error) {
	list, err := l.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (l clientLister) ListMeta(ctx context.Context, ns string, kind plugin.Kind) ([]metav1.ObjectMeta, error) {
	// Metadata only (Accept: PartialObjectMetadata): audit never reads a Secret's data.
	list, err := l.meta.Resource(kind.Resource()).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]metav1.ObjectMeta, 0, len(list.Items))
	for _, it := range list.Items {
		out = append(out, it.ObjectMeta)
	}
	return out, nil
}

// read runs one read with the core's retry helper ((*plugin.Attacher).Call: per-request
// deadline, retries of transient errors) and words a 403 with the RBAC audit needs. A 404 is
// returned as it is, for the caller to tell.
func (a *Auditor) read(ctx context.Context, resource, ns string, f func(context.Context) error) error {
	err := a.attacher().Call(ctx, f)
	where := "in namespace " + ns
	if ns == "" {
		where = "in any namespace"
	}
	switch {
	case apierrors.IsForbidden(err):
		return &plugin.FailError{Msg: fmt.Sprintf("forbidden to read %s %s (%s): audit needs list on rollouts.argoproj.io, replicasets.apps, configmaps and secrets (and get on deployments.apps for workloadRef Rollouts); -fix also patch on configmaps and secrets",
			resource, where, plugin.APIMessage(err))}
	case apierrors.IsNotFound(err):
		return err
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", resource, where, err)
	}
	return nil
}

// getDeployment is the DeploymentGetter audit gives plugin.ResolveWorkloadRef.
func (a *Auditor) getDeployment(ctx context.Context, ns, name string) (*appsv1.Deployment, error) {
	var d *appsv1.Deployment
	err := a.read(ctx, "deployments.apps", ns, func(ctx context.Context) error {
		var err error
		d, err = a.Lister.GetDeployment(ctx, ns, name)
		return err
	})
	return d, err
}
