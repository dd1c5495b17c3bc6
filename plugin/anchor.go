package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Anchors and revisions: the owners that stand for a workload's current template and for a
// StatefulSet's or DaemonSet's revisions. Pure: no request is sent from here.
//
// An anchor is an apps/v1 ControllerRevision that the controller mode creates for a workload
// (Deployment, Rollout, StatefulSet, DaemonSet, CronJob) and the set of objects its current pod
// template references. It is an owner of those objects from the moment it exists, so the object
// outlives a delete and re-apply of its workload deterministically (the garbage collector finds
// a live owner, whatever the timing), and a CronJob's config lives between its runs. An
// anchor's one owner reference is its Namespace, as controller: deleting its workload must not
// delete it (so the workload cannot be its owner), and a revision with a controller is never
// adopted by a StatefulSet or DaemonSet whose selector happens to match its labels (their
// controllers adopt only orphaned revisions, and would then prune it as history); the
// Namespace outlives every workload in it and takes the anchor with it. It is the only kind of
// object configmap-attacher creates or deletes, and it is labelled AnchorLabel; AnchorVerdict is
// the one rule by which the controller deletes one (at uninstall, plugin/cleanup deletes the
// rest: nothing else would).
//
// A crowd anchor (CrowdAnchor) is the same kind of object standing for one ConfigMap's or
// Secret's many Jobs and bare Pods instead of a workload: past MaxUserOwners they own the
// object through it, so that its owner list stays bounded.

const (
	// AnchorLabel marks the anchors configmap-attacher created (value "true"): the controller
	// lists, watches and deletes only ControllerRevisions with it.
	AnchorLabel = "configmap-attacher.io/anchor"
	// AnchorWorkloadAnnotation names the anchor's workload, "Kind/name".
	AnchorWorkloadAnnotation = "configmap-attacher.io/workload"
)

// AnchorKinds are the workload kinds that get an anchor for their current template.
var AnchorKinds = []string{KindDeployment, KindRollout, "StatefulSet", "DaemonSet", "CronJob"}

// MaxUserOwners is how many Jobs and bare Pods may own one object each before an anchor
// stands for them all (CrowdAnchor). A CronJob running every minute with a long history, a Job
// fan-out or hundreds of bare Pods would otherwise give one object an owner reference each:
// the object grows in etcd with every one, and the garbage collector reads every owner live
// each time one of them is deleted. 32 keeps the common cases (a CronJob's default history of
// 3 + 1, a few parallel Jobs) on their own owners, and an object's list to a few KiB.
const MaxUserOwners = 32

// CrowdKind is the "workload" kind of a crowd anchor: the anchor that stands for one object's
// Jobs and bare Pods when they are more than MaxUserOwners. Its name is the object's kind in
// lower case and its name ("configmap.web-config"), its one reference the object: its
// identity is the object it stands for.
const CrowdKind = "Crowd"

// AnchorPending ends the name of a user whose anchor is being created, among an object's
// blockers: not a user that cannot own, one whose owner is a moment away.
const AnchorPending = " (its anchor is being created)"

// CrowdAnchor is the anchor that stands for o's Jobs and bare Pods while they are more than
// MaxUserOwners.
func CrowdAnchor(o Object) Anchor { return NewAnchor(CrowdKind, CrowdName(o), []Object{o}) }

// CrowdName is the name a crowd anchor of o stands under ("configmap.web-config"): kind and
// name, so a ConfigMap and a Secret of one name have crowds of their own.
func CrowdName(o Object) string { return strings.ToLower(string(o.Kind)) + "." + o.Name }

// CrowdObject is the object a crowd anchor's name stands for (false: not a crowd name).
func CrowdObject(name string) (Object, bool) {
	kind, n, ok := strings.Cut(name, ".")
	for _, k := range []Kind{KindConfigMap, KindSecret} {
		if ok && n != "" && kind == strings.ToLower(string(k)) {
			return Object{k, n}, true
		}
	}
	return Object{}, false
}

// Crowd reports whether the anchor stands for an object's many Jobs and Pods (CrowdAnchor).
func (a Anchor) Crowd() bool { return a.Kind == CrowdKind }

// Anchor is what an anchor stands for: a workload's template that references Refs.
type Anchor struct {
	Kind, Name string
	// Refs are the objects the template references, sorted (CompareObjects).
	Refs []Object
}

// anchorData is an anchor's data: the workload and the objects, so that the anchor can be read
// without its annotations (data is immutable; annotations are not).
type anchorData struct {
	Workload   string   `json:"workload"`
	References []string `json:"references"`
}

// NewAnchor is the anchor of the workload kind/name whose current template references refs.
func NewAnchor(kind, name string, refs []Object) Anchor {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, CompareObjects)
	refs = slices.Compact(refs)
	return Anchor{Kind: kind, Name: name, Refs: refs}
}

// ObjectName is the anchor's name: the workload's name (cut to fit), "-cma-", the kind, and a
// hash of kind, name and references, so that one workload's anchors differ by their sets and a
// create is idempotent.
func (a Anchor) ObjectName() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s/%s\n", a.Kind, a.Name)
	for _, o := range a.Refs {
		fmt.Fprintf(h, "%s/%s\n", o.Kind, o.Name)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:10]
	name := a.Name
	if len(name) > 200 {
		name = strings.TrimRight(name[:200], ".-")
	}
	return fmt.Sprintf("%s-cma-%s-%s", name, strings.ToLower(a.Kind), sum)
}

// Workload is "Kind/name".
func (a Anchor) Workload() string { return a.Kind + "/" + a.Name }

// Uses reports whether the anchor stands for a template that references o.
func (a Anchor) Uses(o Object) bool { return slices.Contains(a.Refs, o) }

// Equal reports whether two anchors stand for the same workload and references.
func (a Anchor) Equal(b Anchor) bool {
	return a.Kind == b.Kind && a.Name == b.Name && slices.Equal(a.Refs, b.Refs)
}

// ControllerRevision is the anchor as the object the controller creates in namespace ns, whose
// UID is nsUID: its controller.
func (a Anchor) ControllerRevision(ns string, nsUID types.UID) *appsv1.ControllerRevision {
	d := anchorData{Workload: a.Workload(), References: make([]string, 0, len(a.Refs))}
	for _, o := range a.Refs {
		d.References = append(d.References, string(o.Kind)+"/"+o.Name)
	}
	raw, _ := json.Marshal(d) // cannot fail: fixed types
	controller := true
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.ObjectName(), Namespace: ns,
			Labels:      map[string]string{AnchorLabel: "true", "app.kubernetes.io/managed-by": "configmap-attacher"},
			Annotations: map[string]string{AnchorWorkloadAnnotation: a.Workload()},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: ns, UID: nsUID,
				Controller: &controller}},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: 1,
	}
}

// NamespaceController reports whether ref is the controller reference an anchor in namespace ns
// carries: its Namespace. The Namespace of an object read live in ns exists.
func NamespaceController(ref *metav1.OwnerReference, ns string) bool {
	return ref != nil && ref.APIVersion == "v1" && ref.Kind == "Namespace" && ref.Name == ns
}

// IsAnchor reports whether a ControllerRevision's labels mark it as an anchor.
func IsAnchor(m metav1.Object) bool { return m.GetLabels()[AnchorLabel] == "true" }

// ParseAnchor reads an anchor back from its ControllerRevision (false: not an anchor, or not
// one this version can read, which is then left alone). An anchor is labelled AnchorLabel and
// its one owner is its Namespace, as controller: a labelled revision with any other owner (one
// a workload controller adopted, or another revision the label was copied onto) is none, so no
// mode ever deletes it.
func ParseAnchor(cr *appsv1.ControllerRevision) (Anchor, bool) {
	if !IsAnchor(cr) || len(cr.OwnerReferences) != 1 || !NamespaceController(&cr.OwnerReferences[0], cr.Namespace) {
		return Anchor{}, false
	}
	var d anchorData
	if err := json.Unmarshal(cr.Data.Raw, &d); err != nil {
		return Anchor{}, false
	}
	kind, name, ok := strings.Cut(d.Workload, "/")
	if !ok || kind == "" || name == "" {
		return Anchor{}, false
	}
	refs := make([]Object, 0, len(d.References))
	for _, r := range d.References {
		k, n, ok := strings.Cut(r, "/")
		if !ok || (Kind(k) != KindConfigMap && Kind(k) != KindSecret) {
			return Anchor{}, false
		}
		refs = append(refs, Object{Kind(k), n})
	}
	a := NewAnchor(kind, name, refs)
	if a.Crowd() && (len(a.Refs) != 1 || CrowdName(a.Refs[0]) != name) {
		return Anchor{}, false // a crowd stands for exactly the one object its name says
	}
	return a, true
}

// AnchorState is what the controller knows of one anchor when it decides whether to delete it.
type AnchorState struct {
	// Current: its workload exists, is not being deleted, and its current template references
	// exactly the anchor's objects.
	Current bool
	// WorkloadExists: a workload of that kind and name exists (it may have moved on to another
	// template); false while it is being deleted too.
	WorkloadExists bool
	// GoneFor is how long the workload has been seen absent (while !WorkloadExists).
	GoneFor time.Duration
	// Unsettled are the anchor's objects that still need it: a user of theirs that is not one
	// of their owners yet, or that cannot own them (a blocker).
	Unsettled []Object
	// Crowd: the anchor stands for an object's many Jobs and Pods (CrowdAnchor). Current is
	// then "they are more than MaxUserOwners", and there is no grace: it stands for users that
	// own on their own once they are few, and an object whose last Job is gone goes at once, as
	// it does with Jobs that own it one by one.
	Crowd bool
	// Foreign are the anchor's objects that are another installation's to decide on (another
	// -selector or -namespaces over the same namespace, or objects whose opt-in label was
	// removed): this controller cannot see whether their users still need the anchor, so it is
	// not its to delete.
	Foreign []Object
}

// AnchorVerdict is the one rule that deletes an anchor. Deleting it can let the garbage
// collector delete config, so it is kept while it stands for the current template, while any of
// its objects has a user that does not own it yet (a live Job of a CronJob's previous template,
// a ReplicaSet whose reference is still being written, a user that cannot own), and for grace
// after its workload is gone (the delete and re-apply window). Otherwise it goes: at once when
// the workload moved on to another template, grace after the workload is gone. after, when not
// zero, is when to look again. A crowd anchor (s.Crowd) is kept while the Jobs and Pods it
// stands for are too many to own one by one, then until each of them owns the object itself.
// An anchor of objects the controller does not adopt (s.Foreign) is never its to delete: the
// installation that adopts them decides, or cleanup does.
func AnchorVerdict(s AnchorState, grace time.Duration) (del bool, after time.Duration) {
	switch {
	case s.Current, len(s.Foreign) > 0:
		return false, 0
	case !s.Crowd && !s.WorkloadExists && s.GoneFor < grace:
		return false, grace - s.GoneFor
	case len(s.Unsettled) > 0:
		return false, 5 * time.Second
	}
	return true, 0
}

// RevisionTemplate decodes the pod template of a ControllerRevision of an apps/v1 StatefulSet
// or DaemonSet: its data is the strategic merge patch {"spec":{"template":{...}}} that both
// controllers write (getPatch). Other controllers' revisions (OpenKruise, KubeVirt) have other
// formats: false.
func RevisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, bool) {
	ref := metav1.GetControllerOfNoCopy(cr)
	if ref == nil || (ref.Kind != "StatefulSet" && ref.Kind != "DaemonSet") {
		return nil, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != "apps" {
		return nil, false
	}
	var d struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, false
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.Spec.Template == nil {
		return nil, false
	}
	return d.Spec.Template, true
}
