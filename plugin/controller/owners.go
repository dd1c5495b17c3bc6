package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Every user owns (docs/security.md): the owners that stand for the users other than
// ReplicaSets, from the caches. A StatefulSet's or DaemonSet's revisions own the config their
// templates use; a Job owns its own; a Pod no controller owns is its own user; the current
// template of a Deployment, StatefulSet, DaemonSet or CronJob is stood for by its anchor
// (plugin/anchor.go, anchors.go). A user of a controller kind configmap-attacher does not know
// blocks.

// byAnchorOf is the revision cache's index of anchors by workload: namespace/Kind/name.
const byAnchorOf = "anchorOf"

// cachedRevision is what the ControllerRevision cache keeps: identity, the controller
// reference, and either the references of a StatefulSet's or DaemonSet's revision template or
// the anchor it is.
type cachedRevision struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Refs   []plugin.Object
	Anchor *plugin.Anchor
}

// DeepCopyObject is required by runtime.Object; the cache never modifies its objects.
func (r *cachedRevision) DeepCopyObject() runtime.Object {
	out := &cachedRevision{TypeMeta: r.TypeMeta, Refs: append([]plugin.Object(nil), r.Refs...), Anchor: r.Anchor}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (r *cachedRevision) owner() plugin.Owner {
	return plugin.Owner{Kind: plugin.OwnerControllerRevision, Name: r.Name, UID: r.UID, Deleting: r.DeletionTimestamp != nil, Controller: metav1.GetControllerOfNoCopy(r)}
}

// compactRevision is the ControllerRevision cache's transform: revisions of apps/v1
// StatefulSets and DaemonSets keep their template's references (decoded once here), anchors
// what they stand for; every other revision only its identity.
func (c *Controller) compactRevision(obj any) (any, error) {
	cr, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		return obj, nil
	}
	out := &cachedRevision{ObjectMeta: metav1.ObjectMeta{Name: cr.Name, Namespace: c.shared.name(cr.Namespace), UID: cr.UID,
		ResourceVersion: cr.ResourceVersion, DeletionTimestamp: cr.DeletionTimestamp, CreationTimestamp: cr.CreationTimestamp}}
	if ref := metav1.GetControllerOfNoCopy(cr); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if a, ok := plugin.ParseAnchor(cr); ok {
		out.Anchor = &a
		return out, nil
	}
	if t, ok := plugin.RevisionTemplate(cr); ok {
		out.Refs = objectList(plugin.TemplateReferences(&t.Spec))
	}
	return out, nil
}

func revisionRefIndex(obj any) ([]string, error) {
	r, ok := obj.(*cachedRevision)
	if !ok || r.Anchor != nil {
		return nil, nil
	}
	return refKeys(r.Namespace, r.Refs), nil
}

func anchorOfIndex(obj any) ([]string, error) {
	r, ok := obj.(*cachedRevision)
	if !ok || r.Anchor == nil {
		return nil, nil
	}
	return []string{r.Namespace + "/" + r.Anchor.Workload()}, nil
}

// addRevisionCache adds the ControllerRevision cache to a scope.
func (c *Controller) addRevisionCache(sc *scope, kf informers.SharedInformerFactory) error {
	sc.revisions = kf.Apps().V1().ControllerRevisions().Informer()
	if err := sc.revisions.SetTransform(c.compactRevision); err != nil {
		return fmt.Errorf("ControllerRevision informer transform: %w", err)
	}
	if err := sc.revisions.AddIndexers(cache.Indexers{byRef: revisionRefIndex, byAnchorOf: anchorOfIndex}); err != nil {
		return fmt.Errorf("ControllerRevision indexes: %w", err)
	}
	_, err := sc.revisions.AddEventHandler(c.revisionHandler())
	if err != nil {
		return fmt.Errorf("ControllerRevision event handler: %w", err)
	}
	return nil
}

func (r *cachedRevision) refs() []plugin.Object {
	if r.Anchor != nil {
		return r.Anchor.Refs
	}
	return r.Refs
}

// controllerOf classifies the controller of a revision or a Job against the caches: a
// StatefulSet, DaemonSet or CronJob that exists with the UID the reference names is live; one
// that does not is gone (the garbage collector deletes its dependents); any other kind is
// unknown (its owner could be the dead: it blocks).
func (c *Controller) controllerOf(sc *scope, ns string, ref *metav1.OwnerReference) plugin.ControllerState {
	if ref == nil {
		return plugin.ControllerNone
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return plugin.ControllerUnknown
	}
	var t *cachedTemplate
	switch {
	case gv.Group == "apps" && (ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet"), gv.Group == "batch" && ref.Kind == "CronJob":
		t = sc.template(ref.Kind, ns, ref.Name)
	default:
		return plugin.ControllerUnknown
	}
	switch {
	case t != nil && t.UID == ref.UID && t.Orphaning:
		return plugin.ControllerNone
	case t != nil && t.UID == ref.UID && t.DeletionTimestamp == nil:
		return plugin.ControllerLive
	}
	return plugin.ControllerGone
}

// template returns the cached StatefulSet, DaemonSet, Job, CronJob or Pod kind/ns/name.
func (sc *scope) template(kind, ns, name string) *cachedTemplate {
	for i, inf := range sc.templates {
		if templateKinds[i] != kind {
			continue
		}
		item, ok, err := inf.GetIndexer().GetByKey(ns + "/" + name)
		if err != nil || !ok {
			return nil
		}
		t, _ := item.(*cachedTemplate)
		return t
	}
	return nil
}

// anchor returns the cached anchor a, if it exists and is not being deleted.
func (sc *scope) anchor(ns string, a plugin.Anchor) *cachedRevision {
	if sc.revisions == nil {
		return nil
	}
	item, ok, err := sc.revisions.GetIndexer().GetByKey(ns + "/" + a.ObjectName())
	if err != nil || !ok {
		return nil
	}
	r, _ := item.(*cachedRevision)
	if r == nil || r.Anchor == nil || !r.Anchor.Equal(a) || r.DeletionTimestamp != nil {
		return nil
	}
	return r
}

// ownerUsers adds to u the users of o other than ReplicaSets, as the view maintains them:
// revisions, Jobs, bare Pods own; a workload's current template owns through its anchor (until
// the anchor exists, it blocks: anchors.go creates it, and its add event comes back here); a
// Pod or Job of an unknown controller blocks.
func (v view) ownerUsers(sc *scope, o plugin.Object, u *plugin.Users) {
	k := Key{v.ns, o.Kind, o.Name}.String()
	if sc.revisions != nil {
		items, _ := sc.revisions.GetIndexer().ByIndex(byRef, k)
		for _, it := range items {
			if r, ok := it.(*cachedRevision); ok {
				u.Owners = append(u.Owners, plugin.OwnerUser{Owner: r.owner(), Controller: v.c.controllerOf(sc, v.ns, metav1.GetControllerOfNoCopy(r))})
			}
		}
	}
	for _, inf := range sc.templates {
		items, _ := inf.GetIndexer().ByIndex(byRef, k)
		for _, it := range items {
			t, ok := it.(*cachedTemplate)
			if !ok {
				continue
			}
			switch t.Kind {
			case "Job":
				ctl := v.c.controllerOf(sc, v.ns, t.Controller)
				u.Owners = append(u.Owners, plugin.OwnerUser{Owner: plugin.Owner{Kind: plugin.OwnerJob, Name: t.Name, UID: t.UID, Deleting: t.DeletionTimestamp != nil, Controller: t.Controller}, Controller: ctl})
			case "Pod":
				if t.Controller != nil {
					u.Others = append(u.Others, plugin.OtherUser{Kind: "Pod", Name: fmt.Sprintf("%s (controlled by %s %s, a kind whose lifetime configmap-attacher cannot see)", t.Name, t.Controller.Kind, t.Controller.Name)})
					continue
				}
				u.Owners = append(u.Owners, plugin.OwnerUser{Owner: plugin.Owner{Kind: plugin.OwnerPod, Name: t.Name, UID: t.UID, Deleting: t.DeletionTimestamp != nil}, Controller: plugin.ControllerNone})
			default: // StatefulSet, DaemonSet, CronJob: the current template, through its anchor
				v.anchorUser(sc, t.Kind, t.Name, t.Refs, t.DeletionTimestamp != nil, u)
			}
		}
	}
	for _, w := range sc.templatedWorkloads() {
		items, _ := w.inf.GetIndexer().ByIndex(byRef, k)
		for _, it := range items {
			if d, ok := it.(*cachedObject); ok {
				v.anchorUser(sc, w.kind, d.Name, d.Refs, d.Deleting, u)
			}
		}
	}
	// The anchor that stands for its Jobs and Pods when they are many (plugin.ownersOf decides
	// whether it is an owner).
	if r := sc.anchor(v.ns, plugin.CrowdAnchor(o)); r != nil {
		crowd := r.owner()
		u.Crowd = &crowd
	}
}

// anchorUser adds a workload's current template as a user: its anchor owns, or, while the
// anchor does not exist yet, the template blocks. A workload being deleted is no user any more
// (its anchor, if any, keeps the object for the grace: anchors.go).
func (v view) anchorUser(sc *scope, kind, name string, refs []plugin.Object, deleting bool, u *plugin.Users) {
	if deleting {
		return
	}
	a := plugin.NewAnchor(kind, name, refs)
	if r := sc.anchor(v.ns, a); r != nil {
		u.Owners = append(u.Owners, plugin.OwnerUser{Owner: r.owner(), Controller: plugin.ControllerNone})
		return
	}
	u.Others = append(u.Others, plugin.OtherUser{Kind: kind, Name: name + anchorPending})
}
