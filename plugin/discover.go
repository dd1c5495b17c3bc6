package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Addition is an owner reference discovery adds (or, in a dry run, would add): the object
// and the ReplicaSets it lacks as owners.
type Addition struct {
	Object      Object
	ReplicaSets []string
	uids        []*appsv1.ReplicaSet
}

// Discovery is the result of reconciling a Rollout's history.
type Discovery struct {
	Additions []Addition
	// Owned counts opted-in objects that already had every owner they need.
	Owned int
}

// all returns the Rollout's live ReplicaSets, current first.
func (r ReplicaSets) all() []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	if r.Current != nil && r.Current.DeletionTimestamp == nil {
		out = append(out, r.Current)
	}
	for i := range r.History {
		if r.History[i].DeletionTimestamp == nil {
			out = append(out, &r.History[i])
		}
	}
	return out
}

// PlanDiscover finds, for every ReplicaSet of the Rollout still in history, the opted-in
// objects its own pod template references and that lack it as an owner. It reads with at
// most one list per kind (none for a kind no template references) and writes nothing.
func (a *Attacher) PlanDiscover(ctx context.Context, ns string, rss ReplicaSets, sel labels.Selector) (Discovery, error) {
	var d Discovery
	live := rss.all()
	refs := make([]References, len(live))
	var needCM, needSecret bool
	for i, rs := range live {
		refs[i] = TemplateReferences(&rs.Spec.Template.Spec)
		needCM = needCM || len(refs[i].ConfigMaps) > 0
		needSecret = needSecret || len(refs[i].Secrets) > 0
	}
	type item struct {
		obj    Object
		owners []metav1.OwnerReference
	}
	var items []item
	if needCM {
		var list []item
		err := a.list(ctx, "configmaps", ns, func(ctx context.Context) error {
			l, err := a.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err == nil {
				for _, cm := range l.Items {
					list = append(list, item{Object{KindConfigMap, cm.Name}, cm.OwnerReferences})
				}
			}
			return err
		})
		if err != nil {
			return d, err
		}
		items = append(items, list...)
	}
	if needSecret {
		var list []item
		err := a.list(ctx, "secrets", ns, func(ctx context.Context) error {
			l, err := a.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err == nil {
				for _, s := range l.Items {
					// Only names and owners are kept: the data is dropped here.
					list = append(list, item{Object{KindSecret, s.Name}, s.OwnerReferences})
				}
			}
			return err
		})
		if err != nil {
			return d, err
		}
		items = append(items, list...)
	}
	for _, it := range items {
		have := map[types.UID]bool{}
		for _, o := range it.owners {
			have[o.UID] = true
		}
		var add Addition
		used := false
		for i, rs := range live {
			if !refs[i].Has(it.obj) {
				continue
			}
			used = true
			if !have[rs.UID] {
				add.ReplicaSets = append(add.ReplicaSets, rs.Name)
				add.uids = append(add.uids, rs)
			}
		}
		switch {
		case len(add.ReplicaSets) > 0:
			add.Object = it.obj
			d.Additions = append(d.Additions, add)
		case used:
			d.Owned++
		}
	}
	sort.Slice(d.Additions, func(i, j int) bool {
		x, y := d.Additions[i].Object, d.Additions[j].Object
		return x.Kind < y.Kind || x.Kind == y.Kind && x.Name < y.Name
	})
	return d, nil
}

// Without drops the additions of rs to objs (which the explicit list attaches in the same run),
// so an object is patched once per run, and counted once.
func (d Discovery) Without(rs *appsv1.ReplicaSet, objs []Object) Discovery {
	skip := map[Object]bool{}
	for _, o := range objs {
		skip[o] = true
	}
	out := Discovery{Owned: d.Owned}
	for _, add := range d.Additions {
		if skip[add.Object] {
			var keep Addition
			keep.Object = add.Object
			for i, r := range add.uids {
				if r.UID != rs.UID {
					keep.ReplicaSets = append(keep.ReplicaSets, add.ReplicaSets[i])
					keep.uids = append(keep.uids, r)
				}
			}
			if len(keep.uids) == 0 {
				out.Owned++
				continue
			}
			add = keep
		}
		out.Additions = append(out.Additions, add)
	}
	return out
}

// ApplyDiscover sends one patch per object, adding every owner it lacks at once.
func (a *Attacher) ApplyDiscover(ctx context.Context, ns string, d Discovery) Outcome {
	items := make([]patchItem, len(d.Additions))
	for i, add := range d.Additions {
		items[i] = patchItem{add.Object, ownerPatch(add.uids...)}
	}
	return a.applyPatches(ctx, ns, items)
}

func (a *Attacher) list(ctx context.Context, resource, ns string, f func(context.Context) error) error {
	err := retry.OnError(a.backoff(), isTransient, func() error {
		rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
		defer cancel()
		return f(rctx)
	})
	if apierrors.IsForbidden(err) {
		return &FailError{fmt.Sprintf("forbidden to list %s in namespace %s (%s): discovery needs list on %s, which the Argo Rollouts controller's own role has; see %s", resource, ns, apiMessage(err), resource, a.rbacHint())}
	}
	if err != nil {
		return fmt.Errorf("listing %s in namespace %s: %w", resource, ns, err)
	}
	return nil
}

// String summarises the additions, e.g. "ConfigMap a ← web-1, web-2; Secret b ← web-1".
func (d Discovery) String() string {
	parts := make([]string, len(d.Additions))
	for i, add := range d.Additions {
		parts[i] = fmt.Sprintf("%s ← %s", add.Object, strings.Join(add.ReplicaSets, ", "))
	}
	return strings.Join(parts, "; ")
}

// MissingOwner reads the listed objects (for a dry run) and returns those that lack rs as an
// owner, and those that do not exist.
func (a *Attacher) MissingOwner(ctx context.Context, rs *appsv1.ReplicaSet, objects []Object) (lacking, notFound []Object, err error) {
	for _, o := range objects {
		var owners []metav1.OwnerReference
		getErr := retry.OnError(a.backoff(), isTransient, func() error {
			rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
			defer cancel()
			if o.Kind == KindSecret {
				s, err := a.Client.CoreV1().Secrets(rs.Namespace).Get(rctx, o.Name, metav1.GetOptions{})
				if err == nil {
					owners = s.OwnerReferences
				}
				return err
			}
			cm, err := a.Client.CoreV1().ConfigMaps(rs.Namespace).Get(rctx, o.Name, metav1.GetOptions{})
			if err == nil {
				owners = cm.OwnerReferences
			}
			return err
		})
		switch {
		case apierrors.IsNotFound(getErr):
			notFound = append(notFound, o)
			continue
		case getErr != nil:
			return nil, nil, fmt.Errorf("reading %s for the dry run: %w", o, getErr)
		}
		found := false
		for _, ref := range owners {
			found = found || ref.UID == rs.UID
		}
		if !found {
			lacking = append(lacking, o)
		}
	}
	return lacking, notFound, nil
}
