package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// The caches and their event handlers: what is watched, how it is kept compact, and which
// object keys an event enqueues.

// addScope starts watching one namespace ("" is every namespace): the ReplicaSets through a
// typed informer with the compacting transform, ConfigMaps and Secrets as metadata only.
func (c *Controller) addScope(ns string) error {
	kf := informers.NewSharedInformerFactoryWithOptions(c.cfg.Kube, 0, informers.WithNamespace(ns))
	mf := metadatainformer.NewFilteredSharedInformerFactory(c.cfg.Meta, 0, ns, nil)
	// The ConfigMap and Secret informers are built without the factory's namespace index:
	// nothing looks objects up by namespace, and every ConfigMap and Secret of the scope,
	// labelled or not, would have an entry in it.
	objInformer := func(k plugin.Kind) cache.SharedIndexInformer {
		inf := metadatainformer.NewFilteredMetadataInformer(c.cfg.Meta, k.Resource(), ns, 0, cache.Indexers{}, nil).Informer()
		c.starters = append(c.starters, func(stop <-chan struct{}) { go inf.Run(stop) })
		return inf
	}
	sc := &scope{rs: kf.Apps().V1().ReplicaSets().Informer(), objs: map[plugin.Kind]cache.SharedIndexInformer{
		plugin.KindConfigMap: objInformer(plugin.KindConfigMap),
		plugin.KindSecret:    objInformer(plugin.KindSecret),
	}}
	if err := sc.rs.SetTransform(c.compactReplicaSet); err != nil {
		return fmt.Errorf("ReplicaSet informer transform: %w", err)
	}
	if err := sc.rs.AddIndexers(cache.Indexers{byRef: refIndex, byController: controllerIndex}); err != nil {
		return fmt.Errorf("ReplicaSet indexes: %w", err)
	}
	if _, err := sc.rs.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { c.onReplicaSet(obj, !initial) },
		UpdateFunc: c.onReplicaSetUpdate,
	}); err != nil {
		return fmt.Errorf("ReplicaSet event handler: %w", err)
	}
	for kind, inf := range sc.objs {
		if err := inf.SetTransform(c.compactMetadata); err != nil {
			return fmt.Errorf("%s informer transform: %w", kind, err)
		}
		if _, err := inf.AddEventHandler(c.objectHandler(kind)); err != nil {
			return fmt.Errorf("%s event handler: %w", kind, err)
		}
	}
	var df dynamicinformer.DynamicSharedInformerFactory
	if c.cfg.Dynamic != nil {
		df = dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.cfg.Dynamic, 0, ns, nil)
		c.starters = append(c.starters, df.Start)
	}
	if err := c.addUserCaches(sc, kf, mf, df); err != nil {
		return err
	}
	c.scopes[ns] = sc
	c.starters = append(c.starters, kf.Start, mf.Start)
	return nil
}

// compactReplicaSet is the ReplicaSet cache's transform: it keeps a cachedReplicaSet
// (identity, controller reference, timestamps, generation and the references its template
// makes, computed once here by the project's walker) instead of the ReplicaSet. A
// ReplicaSet's Go struct is ~2 KiB before any data, its pod template far more: at 10k
// ReplicaSets this is most of the memory the process would need.
func (c *Controller) compactReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil // already compact, or a DeletedFinalStateUnknown tombstone
	}
	out := &cachedReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: rs.Name, Namespace: c.shared.name(rs.Namespace), UID: rs.UID, ResourceVersion: rs.ResourceVersion, Generation: rs.Generation,
		DeletionTimestamp: rs.DeletionTimestamp, CreationTimestamp: rs.CreationTimestamp,
	}}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	// Every ReplicaSet is indexed, whatever controls it: every user of an object counts.
	out.Refs = objectList(plugin.TemplateReferences(&rs.Spec.Template.Spec))
	out.Required = objectList(plugin.RequiredReferences(&rs.Spec.Template.Spec))
	out.Creds = objectList(plugin.CredentialOnly(&rs.Spec.Template.Spec))
	return out, nil
}

// compactMetadata is the ConfigMap and Secret caches' transform: a cachedObject with the
// name, namespace, resourceVersion (after a relist the informer tells an update from a resync
// by it), whether it is being deleted, and, for opted-in objects only, its owners' UIDs (for
// the others, only their ControllerRevision owners': anchors this controller must not delete).
// Everything else goes: managedFields, labels, annotations (kubectl's
// last-applied-configuration annotation of a Secret carries its data). Unlabelled objects are
// cached for their existence alone (the lost gauge).
func (c *Controller) compactMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // already compact, or a DeletedFinalStateUnknown tombstone
	}
	out := &cachedObject{Name: m.Name, Namespace: c.shared.name(m.Namespace), ResourceVersion: m.ResourceVersion,
		Deleting: m.DeletionTimestamp != nil, OptedIn: c.cfg.Selector.Matches(labels.Set(m.Labels))}
	if out.OptedIn {
		out.UID = m.UID
		out.Labels = c.selectorLabels(m.Labels)
	}
	if !out.OptedIn {
		for _, o := range m.OwnerReferences {
			if o.Kind == "ControllerRevision" && strings.HasPrefix(o.APIVersion, "apps/") {
				out.AnchorOwners = append(out.AnchorOwners, o.UID)
			}
		}
	}
	if out.OptedIn && len(m.OwnerReferences) > 0 {
		out.RSOwned = plugin.HasReplicaSetOwner(m.OwnerReferences)
		out.Owners = make([]types.UID, len(m.OwnerReferences))
		for i, o := range m.OwnerReferences {
			out.Owners[i] = o.UID
		}
	}
	return out, nil
}

// workloadOf returns the controller reference among owners when it is a watched workload kind.
func (c *Controller) workloadOf(owners []metav1.OwnerReference) *metav1.OwnerReference {
	var ref *metav1.OwnerReference
	for i := range owners {
		if owners[i].Controller != nil && *owners[i].Controller {
			ref = &owners[i]
		}
	}
	if ref == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil
	}
	switch {
	case ref.Kind == plugin.KindRollout && gv.Group == "argoproj.io" && c.cfg.Rollouts:
		return ref
	case ref.Kind == plugin.KindDeployment && gv.Group == "apps" && c.cfg.Deployments:
		return ref
	}
	return nil
}

func refIndex(obj any) ([]string, error) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok {
		return nil, nil
	}
	return refKeys(rs.Namespace, rs.Refs), nil
}

// refKeys are the index keys of the objects a template in ns references.
func refKeys(ns string, refs []plugin.Object) []string {
	keys := make([]string, len(refs))
	for i, o := range refs {
		keys[i] = Key{ns, o.Kind, o.Name}.String()
	}
	return keys
}

func (c *Controller) scopeOf(ns string) *scope {
	if sc, ok := c.scopes[metav1.NamespaceAll]; ok {
		return sc
	}
	return c.scopes[ns]
}

// object returns the cached metadata of an object (nil when it does not exist).
func (c *Controller) object(k Key) *cachedObject {
	sc := c.scopeOf(k.Namespace)
	if sc == nil || sc.objs[k.Kind] == nil {
		return nil
	}
	item, ok, err := sc.objs[k.Kind].GetIndexer().GetByKey(k.Namespace + "/" + k.Name)
	if err != nil || !ok {
		return nil
	}
	m, _ := item.(*cachedObject)
	return m
}

func (c *Controller) optedIn(m *cachedObject) bool {
	return m != nil && !m.Deleting && m.OptedIn
}

// enqueue queues k (leader only: a standby's queue stays empty; taking over enqueues
// everything). react records the event time for the reaction-time histogram.
func (c *Controller) enqueue(k Key, react bool) {
	if !c.leading.Load() {
		return
	}
	if react {
		c.mu.Lock()
		if _, ok := c.seen[k]; !ok {
			c.seen[k] = time.Now()
		}
		c.mu.Unlock()
	}
	c.queue.Add(k)
}

// selectorLabels keeps the labels the opt-in selector looks at: the core's policy check
// matches them exactly as it would the whole set. Objects with the same such labels share
// one map (interner.labelSet).
func (c *Controller) selectorLabels(l map[string]string) map[string]string {
	reqs, _ := c.cfg.Selector.Requirements()
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key()
	}
	return c.shared.labelSet(keys, l)
}

// onReplicaSet queues the opted-in objects a live ReplicaSet's template references, whatever
// controls it: a new user of an object a watched workload's ReplicaSet owns must become an
// owner too (Reconcile acts only on objects a watched workload uses).
func (c *Controller) onReplicaSet(obj any, react bool) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok || rs.DeletionTimestamp != nil {
		return
	}
	for _, o := range rs.Refs {
		k := Key{rs.Namespace, o.Kind, o.Name}
		if c.optedIn(c.object(k)) {
			c.enqueue(k, react)
		}
	}
}

// onReplicaSetUpdate reacts to what can make a ReplicaSet a new owner: adoption (its
// controller changed) and a template change (a new generation). Status updates, the bulk of
// ReplicaSet events, are ignored.
func (c *Controller) onReplicaSetUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*cachedReplicaSet)
	n, ok2 := newObj.(*cachedReplicaSet)
	if !ok1 || !ok2 {
		return
	}
	if controllerUID(o.OwnerReferences) != controllerUID(n.OwnerReferences) || o.Generation != n.Generation {
		c.onReplicaSet(n, true)
	}
}

func controllerUID(owners []metav1.OwnerReference) types.UID {
	if len(owners) > 0 {
		return owners[0].UID
	}
	return ""
}

func (c *Controller) objectHandler(kind plugin.Kind) cache.ResourceEventHandler {
	keyOf := func(obj any) (Key, *cachedObject, bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		m, ok := obj.(*cachedObject)
		if !ok {
			return Key{}, nil, false
		}
		return Key{m.Namespace, kind, m.Name}, m, true
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if k, m, ok := keyOf(obj); ok && c.optedIn(m) {
				c.enqueue(k, !initial)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			k, n, ok := keyOf(newObj)
			_, o, ok2 := keyOf(oldObj)
			if !ok || !ok2 {
				return
			}
			c.settle(k, n.Owners)
			// Gaining the label is adoption; an owner list that changed may have lost one of
			// ours (only the garbage collector removes references, and only dangling ones).
			if c.optedIn(n) && (!c.optedIn(o) || !slices.Equal(o.Owners, n.Owners)) {
				c.enqueue(k, !c.optedIn(o))
			}
		},
		DeleteFunc: func(obj any) {
			if k, _, ok := keyOf(obj); ok {
				c.mu.Lock()
				delete(c.pending, k)
				delete(c.seen, k)
				c.mu.Unlock()
			}
		},
	}
}
