package plugin

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The live confirmation of a stale view's new owners: facts only (which owners a consistent
// read shows still live, with their controllers). What to do with them is decideOwners'.

// confirmOwners reads, for a caller whose view may be stale (the controller's caches, audit's
// snapshot), which of the owners an object would get still exist: the UIDs of those a live
// read shows with the same UID and no deletionTimestamp, and whose controller, if they have
// one, does too (kind, name and UID). It only gathers the facts: decideOwners keeps the owners
// they confirm (if every owner it adds were already gone, or about to be collected with its
// deleted workload, the garbage collector would delete the object, although a user the view
// does not show yet may use it). One consistent read by name per owner and per controller
// (readByName).
func (a *Attacher) confirmOwners(ctx context.Context, ns string, owners []Owner) (map[types.UID]bool, error) {
	live := make(map[types.UID]bool, len(owners))
	for _, o := range owners {
		items, err := a.readOwner(ctx, ns, o)
		if err != nil {
			return nil, fmt.Errorf("confirming %s %s in namespace %s: %w", o.KindOf(), o.Name, ns, err)
		}
		for _, it := range items {
			if it.GetUID() != o.UID || it.GetDeletionTimestamp() != nil {
				continue
			}
			ok, err := a.controllerLive(ctx, ns, o.Name, it)
			if err != nil {
				return nil, err
			}
			if ok {
				live[o.UID] = true
			}
		}
	}
	return live, nil
}

// ownerResources are the owner kinds other than a ReplicaSet, read as metadata to be confirmed.
var ownerResources = map[string]schema.GroupVersionResource{
	OwnerControllerRevision: appsv1.SchemeGroupVersion.WithResource("controllerrevisions"),
	OwnerJob:                {Group: "batch", Version: "v1", Resource: "jobs"},
	OwnerPod:                {Version: "v1", Resource: "pods"},
}

// readOwner reads one owner consistently by name (readByName): a ReplicaSet through the typed
// client as always, any other owner kind as metadata.
func (a *Attacher) readOwner(ctx context.Context, ns string, o Owner) ([]metav1.Object, error) {
	if o.KindOf() == OwnerReplicaSet {
		return a.readByName(ctx, replicaSetsResource,
			func(ctx context.Context) (metav1.Object, error) { return a.Client.GetReplicaSet(ctx, ns, o.Name) },
			func(ctx context.Context) ([]metav1.Object, error) {
				l, err := a.Client.ListReplicaSets(ctx, ns, metav1.ListOptions{FieldSelector: "metadata.name=" + o.Name})
				if err != nil {
					return nil, err
				}
				return asObjects(l.Items), nil
			})
	}
	gvr, ok := ownerResources[o.KindOf()]
	if !ok {
		return nil, fmt.Errorf("internal error: %q is not an owner kind", o.Kind)
	}
	return a.readByName(ctx, gvr,
		func(ctx context.Context) (metav1.Object, error) {
			return a.Meta.Resource(gvr).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
		},
		func(ctx context.Context) ([]metav1.Object, error) {
			l, err := a.Meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + o.Name})
			if err != nil {
				return nil, err
			}
			return asObjects(l.Items), nil
		})
}

var replicaSetsResource = appsv1.SchemeGroupVersion.WithResource("replicasets")

// controllerLive confirms that the ReplicaSet's controller exists with the UID its reference
// names and is not being deleted (true without a controller; false for a kind whose
// existence is not checked, which the users rule has blocked already). Metadata only.
func (a *Attacher) controllerLive(ctx context.Context, ns, rsName string, rs metav1.Object) (bool, error) {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil || NamespaceController(ref, ns) {
		return true, nil // none, or an anchor's: its Namespace, which exists
	}
	k, ok := checkedKind(ref)
	if !ok {
		return false, nil
	}
	// A kind that is not served (its CRD uninstalled) has no objects: NotFound, so none.
	items, err := a.readByName(ctx, k.gvr,
		func(ctx context.Context) (metav1.Object, error) {
			return a.Meta.Resource(k.gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		},
		func(ctx context.Context) ([]metav1.Object, error) {
			l, err := a.Meta.Resource(k.gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ref.Name})
			if err != nil {
				return nil, err
			}
			return asObjects(l.Items), nil
		})
	if err != nil {
		return false, fmt.Errorf("confirming %s %s, the controller of ReplicaSet %s, in namespace %s: %w", ref.Kind, ref.Name, rsName, ns, err)
	}
	for _, it := range items {
		if it.GetUID() == ref.UID && (it.GetDeletionTimestamp() == nil || Orphaning(it)) {
			return true, nil // live, or orphaning (the ReplicaSet lives on without it)
		}
	}
	return false, nil
}

// asObjects is a list's items as metav1.Objects (pointers into items).
func asObjects[T any, P interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out
}

// readByName reads one object consistently: the object, or none when it does not exist or
// its kind is not served. It is a GET (get) when the identity may get the resource: the
// apiserver answers it from etcd at once. Otherwise, and after a GET the RBAC refused (which is
// remembered per resource, so such a mode pays the extra request once), it is a list by name
// (list): list is in every mode's RBAC, and kube-apiserver ≥ 1.31 answers a consistent list from
// its watch cache only once that has caught up with etcd, which it asks at most every 100 ms.
// That wait was most of the controller's reaction to a new ReplicaSet (p50 ~90 ms on a quiet
// apiserver); the controller's RBAC grants get for this.
func (a *Attacher) readByName(ctx context.Context, gvr schema.GroupVersionResource, get func(context.Context) (metav1.Object, error),
	list func(context.Context) ([]metav1.Object, error)) ([]metav1.Object, error) {
	if _, refused := a.noGet.Load(gvr); !refused {
		var obj metav1.Object
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			obj, err = get(ctx)
			return err
		})
		switch {
		case err == nil:
			return []metav1.Object{obj}, nil
		case isNotFound(err):
			return nil, nil
		case !apierrors.IsForbidden(err):
			return nil, err
		}
		a.noGet.Store(gvr, true)
		a.log().WithField("resource", gvr.GroupResource().String()).Debug("get is not allowed: consistent reads by name are lists from now on")
	}
	var items []metav1.Object
	err := a.call(ctx, func(ctx context.Context) error {
		var err error
		items, err = list(ctx)
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	return items, err
}
