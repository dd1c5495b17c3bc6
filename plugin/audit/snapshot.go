package audit

import (
	"context"

	"github.com/configmap-attacher/configmap-attacher/plugin"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// snapshot is one namespace as audit reads it: every ReplicaSet (one list, shared by the
// namespace's workloads) and the metadata of every ConfigMap and Secret.
type snapshot struct {
	replicaSets []appsv1.ReplicaSet
	objects     map[plugin.Object]objMeta
}

// objMeta is what audit keeps of a ConfigMap or Secret: never its data.
type objMeta struct {
	uid    types.UID
	labels map[string]string
	owners []metav1.OwnerReference
}

// readNamespace makes the namespace's three lists.
func (a *Auditor) readNamespace(ctx context.Context, ns string) (*snapshot, error) {
	snap := &snapshot{objects: map[plugin.Object]objMeta{}}
	err := a.read(ctx, "replicasets.apps", ns, func(ctx context.Context) error {
		var err error
		snap.replicaSets, err = a.Lister.ListReplicaSets(ctx, ns)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, kind := range []plugin.Kind{plugin.KindConfigMap, plugin.KindSecret} {
		var metas []metav1.ObjectMeta
		err := a.read(ctx, kind.Resource().Resource, ns, func(ctx context.Context) error {
			var err error
			metas, err = a.Lister.ListMeta(ctx, ns, kind)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			snap.objects[plugin.Object{Kind: kind, Name: m.Name}] = objMeta{uid: m.UID, labels: m.Labels, owners: m.OwnerReferences}
		}
	}
	return snap, nil
}
