package controller

import (
	"fmt"
	"strings"

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

// The informers of one scope (a watched namespace, or all): what is watched, how each object is
// compacted as it arrives (the records are in cache.go), the indexes, and the lookups the loop
// makes in them. Their event handlers are the loop's (controller.go); the users' and the
// ControllerRevisions' informers are added by users.go and owners.go.

// byRef is the ReplicaSet cache's index: watched ReplicaSets by every object their template
// references (Key.String()). (The lost gauge walks the ReplicaSets instead of keeping a second
// index: an index costs a map per object, the largest part of the cache at 10k ReplicaSets.)
const byRef = "refs"

// byController is the ReplicaSet cache's index by controller (namespace/kind/name): a workload
// that appears requeues its ReplicaSets' objects (users.go onWorkload).
const byController = "controller"

// scope is the caches of one namespace (or of all).
type scope struct {
	rs   cache.SharedIndexInformer
	objs map[plugin.Kind]cache.SharedIndexInformer
	// workloads are the Deployments, Rollouts and Experiments by kind (users.go), templates
	// the pod templates that cannot own.
	workloads map[string]cache.SharedIndexInformer
	templates []cache.SharedIndexInformer
	// revisions are the ControllerRevisions: StatefulSets' and DaemonSets' revisions (owners)
	// and the anchors (owners.go).
	revisions cache.SharedIndexInformer
}

// templatedWorkloads are the workload caches that keep their current template's references
// (indexed by them): Deployments always, Rollouts when they are read whole (Config.Dynamic).
func (sc *scope) templatedWorkloads() []kindInformer {
	var out []kindInformer
	for _, kind := range []string{plugin.KindDeployment, plugin.KindRollout} {
		if inf := sc.workloads[kind]; inf != nil {
			if _, ok := inf.GetIndexer().GetIndexers()[byRef]; ok {
				out = append(out, kindInformer{kind, inf})
			}
		}
	}
	return out
}

// templatedWorkload is the templated workload cache of kind (nil: none).
func (sc *scope) templatedWorkload(kind string) cache.SharedIndexInformer {
	for _, w := range sc.templatedWorkloads() {
		if w.kind == kind {
			return w.inf
		}
	}
	return nil
}

// kindInformer is a workload cache with its kind.
type kindInformer struct {
	kind string
	inf  cache.SharedIndexInformer
}

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
	if _, err := sc.rs.AddEventHandler(c.replicaSetHandler()); err != nil {
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

// refIndex is the ReplicaSet cache's byRef index: the objects its template references.
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

// scopeOf is the scope that watches namespace ns (nil: none does).
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

// optedIn reports whether a cached object is opted in and not being deleted.
func (c *Controller) optedIn(m *cachedObject) bool {
	return m != nil && !m.Deleting && m.OptedIn
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
