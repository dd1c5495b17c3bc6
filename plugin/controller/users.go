package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Every user counts (plugin/users.go): the caches that tell the core who else uses an object
// in its namespace — the workloads whose existence decides whether their ReplicaSets may own
// (Deployments, Rollouts, Experiments, metadata only), and the pod templates that cannot own
// (StatefulSets, DaemonSets, Jobs, CronJobs, and Pods no ReplicaSet, StatefulSet, DaemonSet or
// Job controls), kept as their references alone.

// workloadKinds are the controller kinds whose existence is watched, with their resources.
var workloadKinds = []struct {
	kind string
	gvr  schema.GroupVersionResource
	crd  bool // served only with Argo Rollouts installed
}{
	{plugin.KindDeployment, appsv1.SchemeGroupVersion.WithResource("deployments"), false},
	{plugin.KindRollout, schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}, true},
	{"Experiment", schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "experiments"}, true},
}

// cachedTemplate is what the template caches keep of a StatefulSet, DaemonSet, Job, CronJob or
// bare Pod: its identity and the objects its pod template references (none for a Pod that a
// templated controller covers).
type cachedTemplate struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Kind string
	Refs []plugin.Object
	// Controller is its controller reference (nil: none); Orphaning: being deleted with the
	// orphan finalizer (its revisions or Jobs live on without it).
	Controller *metav1.OwnerReference
	Orphaning  bool
}

// DeepCopyObject is required by runtime.Object; the cache never modifies its objects.
func (t *cachedTemplate) DeepCopyObject() runtime.Object {
	out := &cachedTemplate{TypeMeta: t.TypeMeta, Kind: t.Kind, Refs: append([]plugin.Object(nil), t.Refs...), Controller: t.Controller, Orphaning: t.Orphaning}
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// compactTemplate is the template caches' transform.
func compactTemplate(obj any) (any, error) {
	var kind string
	var meta metav1.ObjectMeta
	var spec *corev1.PodSpec
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		kind, meta, spec = "StatefulSet", o.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		kind, meta, spec = "DaemonSet", o.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.Job:
		kind, meta, spec = "Job", o.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.CronJob:
		kind, meta, spec = "CronJob", o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec
	case *corev1.Pod:
		kind, meta = "Pod", o.ObjectMeta
		if !templatedPod(metav1.GetControllerOfNoCopy(o)) {
			spec = &o.Spec
		}
	default:
		return obj, nil // already compact, or a tombstone
	}
	out := &cachedTemplate{Kind: kind, ObjectMeta: metav1.ObjectMeta{Name: meta.Name, Namespace: meta.Namespace, UID: meta.UID, ResourceVersion: meta.ResourceVersion,
		DeletionTimestamp: meta.DeletionTimestamp}, Orphaning: plugin.Orphaning(&meta)}
	if ref := metav1.GetControllerOfNoCopy(&meta); ref != nil {
		out.Controller = ref.DeepCopy()
	}
	if spec != nil {
		out.Refs = objectList(plugin.TemplateReferences(spec))
	}
	return out, nil
}

func templateIndex(obj any) ([]string, error) {
	t, ok := obj.(*cachedTemplate)
	if !ok {
		return nil, nil
	}
	return refKeys(t.Namespace, t.Refs), nil
}

// compactWorkload is the workload caches' transform: name, UID, resourceVersion and whether
// it is being deleted; for a Deployment also its template's references.
func (c *Controller) compactWorkload(obj any) (any, error) {
	var m metav1.Object
	var refs []plugin.Object
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		m = o
	case *appsv1.Deployment:
		m, refs = o, objectList(plugin.TemplateReferences(&o.Spec.Template.Spec))
	case *unstructured.Unstructured:
		// A Rollout: only spec.template is decoded (absent with spec.workloadRef, whose
		// Deployment's anchor stands for the template).
		m = o
		if tmpl, ok, _ := unstructured.NestedMap(o.Object, "spec", "template"); ok {
			var t corev1.PodTemplateSpec
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &t); err != nil {
				return nil, fmt.Errorf("decoding spec.template of Rollout %s/%s: %w", o.GetNamespace(), o.GetName(), err)
			}
			refs = objectList(plugin.TemplateReferences(&t.Spec))
		}
	default:
		return obj, nil
	}
	// Orphaning: deleted with the orphan finalizer, its ReplicaSets live on without a controller.
	return &cachedObject{Name: m.GetName(), Namespace: c.shared.name(m.GetNamespace()), ResourceVersion: m.GetResourceVersion(), UID: m.GetUID(), Deleting: m.GetDeletionTimestamp() != nil,
		Orphaning: plugin.Orphaning(m), Refs: refs}, nil
}

// workloadRefIndex indexes a workload by the objects its current template references.
func workloadRefIndex(obj any) ([]string, error) {
	o, ok := obj.(*cachedObject)
	if !ok || o.Deleting {
		return nil, nil
	}
	return refKeys(o.Namespace, o.Refs), nil
}

// templateResources name the template caches of a scope, in the order of scope.templates, and
// templateKinds their kinds.
var (
	templateResources = []string{"statefulsets", "daemonsets", "jobs", "cronjobs", "pods"}
	templateKinds     = []string{"StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"}
)

// templatedPod reports whether a Pod with this controller runs its controller's template, which
// the caches read (a ReplicaSet's, a StatefulSet's or DaemonSet's revision, a Job's): its own
// spec then adds nothing. A bare Pod's spec, or that of a Pod of another kind, counts.
func templatedPod(ref *metav1.OwnerReference) bool {
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	switch {
	case gv.Group == "apps" && (ref.Kind == "ReplicaSet" || ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet"):
		return true
	case gv.Group == "batch" && ref.Kind == "Job":
		return true
	}
	return false
}

// addUserCaches adds the workload and template caches to a scope.
func (c *Controller) addUserCaches(sc *scope, kf informers.SharedInformerFactory, mf metadatainformer.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory) error {
	sc.workloads = map[string]cache.SharedIndexInformer{}
	for _, w := range workloadKinds {
		if w.crd && !(w.kind == plugin.KindRollout && c.cfg.RolloutsServed || w.kind == "Experiment" && c.cfg.ExperimentsServed) {
			continue // not served: its ReplicaSets' controllers are unknown, and block
		}
		// Deployments (and Rollouts, with a dynamic client) are read whole and compacted at once
		// to their current template's references: the anchor that stands for it (anchors.go).
		// Experiments only for their existence.
		var inf cache.SharedIndexInformer
		switch {
		case w.kind == plugin.KindDeployment:
			inf = kf.Apps().V1().Deployments().Informer()
		case w.kind == plugin.KindRollout && df != nil:
			inf = df.ForResource(w.gvr).Informer()
		default:
			inf = mf.ForResource(w.gvr).Informer()
		}
		if w.kind == plugin.KindDeployment || w.kind == plugin.KindRollout && df != nil {
			if err := inf.AddIndexers(cache.Indexers{byRef: workloadRefIndex}); err != nil {
				return fmt.Errorf("%s indexes: %w", w.kind, err)
			}
		}
		if err := inf.SetTransform(c.compactWorkload); err != nil {
			return fmt.Errorf("%s informer transform: %w", w.kind, err)
		}
		if _, err := inf.AddEventHandler(c.workloadHandler(sc, w.kind)); err != nil {
			return fmt.Errorf("%s event handler: %w", w.kind, err)
		}
		sc.workloads[w.kind] = inf
	}
	sc.templates = []cache.SharedIndexInformer{
		kf.Apps().V1().StatefulSets().Informer(), kf.Apps().V1().DaemonSets().Informer(),
		kf.Batch().V1().Jobs().Informer(), kf.Batch().V1().CronJobs().Informer(), kf.Core().V1().Pods().Informer(),
	}
	for _, inf := range sc.templates {
		if err := inf.SetTransform(compactTemplate); err != nil {
			return fmt.Errorf("template informer transform: %w", err)
		}
		if err := inf.AddIndexers(cache.Indexers{byRef: templateIndex}); err != nil {
			return fmt.Errorf("template indexes: %w", err)
		}
		if _, err := inf.AddEventHandler(c.templateHandler()); err != nil {
			return fmt.Errorf("template event handler: %w", err)
		}
	}
	return c.addRevisionCache(sc, kf)
}

// controllerIndex is the ReplicaSet cache's index by controller: namespace/kind/name.
func controllerIndex(obj any) ([]string, error) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok || len(rs.OwnerReferences) == 0 {
		return nil, nil
	}
	return []string{rs.Namespace + "/" + rs.OwnerReferences[0].Kind + "/" + rs.OwnerReferences[0].Name}, nil
}

// view is the core's UserView of one namespace, from the caches (stale by nature: the core
// confirms a first ReplicaSet owner live).
type view struct {
	c  *Controller
	ns string
}

func (v view) Stale() bool { return true }

// UsersOf implements plugin.UserView.
func (v view) UsersOf(o plugin.Object) plugin.Users {
	var u plugin.Users
	sc := v.c.scopeOf(v.ns)
	if sc == nil {
		return u
	}
	k := Key{v.ns, o.Kind, o.Name}.String()
	items, _ := sc.rs.GetIndexer().ByIndex(byRef, k)
	crs := make([]*cachedReplicaSet, 0, len(items))
	for _, it := range items {
		if rs, ok := it.(*cachedReplicaSet); ok {
			crs = append(crs, rs)
		}
	}
	sortCached(crs)
	for _, rs := range crs {
		u.ReplicaSets = append(u.ReplicaSets, plugin.ReplicaSetUser{ReplicaSet: rs.owner(), Controller: v.c.controllerState(sc, rs), CredentialOnly: rs.credentialOnly(o)})
	}
	v.ownerUsers(sc, o, &u)
	// The object's references, for the bound on its Jobs' and Pods' (plugin.MaxUserOwners).
	ok := Key{v.ns, o.Kind, o.Name}
	if m := v.c.object(ok); m != nil {
		for _, r := range v.c.ownersWithPending(ok, m) {
			u.Owned = append(u.Owned, r.UID)
		}
	}
	return u
}

// controllerState is what the workload caches say of the ReplicaSet's controller.
func (c *Controller) controllerState(sc *scope, rs *cachedReplicaSet) plugin.ControllerState {
	if len(rs.OwnerReferences) == 0 {
		return plugin.ControllerNone
	}
	ref := rs.OwnerReferences[0]
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return plugin.ControllerUnknown
	}
	for _, w := range workloadKinds {
		if w.kind != ref.Kind || w.gvr.Group != gv.Group {
			continue
		}
		inf := sc.workloads[w.kind]
		if inf == nil {
			return plugin.ControllerUnknown
		}
		item, ok, err := inf.GetIndexer().GetByKey(rs.Namespace + "/" + ref.Name)
		if err != nil {
			return plugin.ControllerUnknown
		}
		m, _ := item.(*cachedObject)
		switch {
		case ok && m != nil && m.UID == ref.UID && m.Orphaning:
			return plugin.ControllerNone // orphaning: the ReplicaSet lives on
		case ok && m != nil && m.UID == ref.UID && !m.Deleting:
			return plugin.ControllerLive
		}
		return plugin.ControllerGone
	}
	return plugin.ControllerUnknown
}
