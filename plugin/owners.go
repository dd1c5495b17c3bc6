package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/selection"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Workload kinds whose ReplicaSets own config.
const (
	KindRollout    = "Rollout"
	KindDeployment = "Deployment"
)

// Workload is the controller of a set of ReplicaSets: a Rollout (any strategy, workloadRef
// included) or a Deployment. The core needs only its identity and selector.
type Workload struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
	// Selector is spec.selector (for a workloadRef Rollout, the Deployment's selector).
	Selector *metav1.LabelSelector
}

func (w Workload) String() string {
	kind := w.Kind
	if kind == "" {
		kind = KindRollout
	}
	return kind + " " + w.Namespace + "/" + w.Name
}

// OptInSelector is the default opt-in label selector, configmap-attacher/revisioned=true.
func OptInSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{DefaultDiscoverLabel: "true"})
}

// Resource is the API resource of a kind (core/v1 configmaps or secrets), as the metadata
// client addresses it.
func (k Kind) Resource() schema.GroupVersionResource {
	if k == KindSecret {
		return corev1.SchemeGroupVersion.WithResource("secrets")
	}
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}

// OwnerPatch is the strategic merge patch that adds the ReplicaSets as owners. ObjectMeta
// declares ownerReferences with patchMergeKey uid, so the apiserver merges these entries into
// the list by UID: no read, no read-modify-write race with the garbage collector (which edits
// the same list), other owners untouched, and a repeat is a no-op that leaves the
// resourceVersion as it was. The entry carries only the identifying fields: `controller` is
// left out (false is its default), so an entry already there with the same UID — the original
// tool's `controller: true` — keeps every field it has.
func OwnerPatch(rss ...*appsv1.ReplicaSet) []byte { return ownerPatchFor("", rss) }

// ownerPatchFor is OwnerPatch with the object's UID as a precondition when uid is set: the
// apiserver refuses the patch (422, metadata.uid is immutable) if the name now belongs to
// another object (deleted and recreated since it was read), as the garbage collector's own
// patches do.
func ownerPatchFor(uid types.UID, rss []*appsv1.ReplicaSet) []byte {
	type ref struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Name       string    `json:"name"`
		UID        types.UID `json:"uid"`
	}
	refs := make([]ref, 0, len(rss))
	for _, rs := range rss {
		refs = append(refs, ref{"apps/v1", "ReplicaSet", rs.Name, rs.UID})
	}
	meta := map[string]any{"ownerReferences": refs}
	if uid != "" {
		meta["uid"] = uid
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta}) // cannot fail: fixed types
	return b
}

// Live reports whether a ReplicaSet may become an owner: one being deleted may not, since
// an object whose only owner is being deleted is collected with it.
func Live(rs *appsv1.ReplicaSet) bool { return rs != nil && rs.DeletionTimestamp == nil }

// MissingOwners is the one missing-owner computation of every mode: the live ReplicaSets
// among rss whose pod template references obj and that owners does not name yet (by UID).
// refs, when not nil, holds each ReplicaSet's references (same order as rss) so a caller
// looping over many objects walks each template once.
func MissingOwners(obj Object, owners []metav1.OwnerReference, rss []*appsv1.ReplicaSet, refs []References) []*appsv1.ReplicaSet {
	have := make(map[types.UID]bool, len(owners))
	for _, o := range owners {
		have[o.UID] = true
	}
	var out []*appsv1.ReplicaSet
	for i, rs := range rss {
		if !Live(rs) || have[rs.UID] {
			continue
		}
		var r References
		if refs != nil {
			r = refs[i]
		} else {
			r = TemplateReferences(&rs.Spec.Template.Spec)
		}
		if r.Has(obj) {
			out = append(out, rs)
		}
	}
	return out
}

// HasReplicaSetOwner tells whether any owner is an apps ReplicaSet: such an object is already
// collected with its ReplicaSets, so audit does not call it unowned, and a stale view adding
// one more owner to it cannot orphan it (the live confirmation of a stale view is only for objects without).
func HasReplicaSetOwner(owners []metav1.OwnerReference) bool {
	for _, o := range owners {
		if o.Kind == "ReplicaSet" && strings.HasPrefix(o.APIVersion, "apps/") {
			return true
		}
	}
	return false
}

// SortReplicaSets orders ReplicaSets oldest first by creationTimestamp, ties by name: the
// order the Rollouts controller uses (controller.ReplicaSetsByCreationTimestamp). Revision
// numbers are not used: undo gives a re-used ReplicaSet the newest revision.
func SortReplicaSets(rss []*appsv1.ReplicaSet) {
	slices.SortStableFunc(rss, func(x, y *appsv1.ReplicaSet) int { return OlderFirst(x, y) })
}

// OlderFirst compares two objects by creationTimestamp, ties by name: SortReplicaSets' order,
// for callers that hold ReplicaSets in another form (the controller's compact cache).
func OlderFirst(x, y metav1.Object) int {
	a, b := x.GetCreationTimestamp(), y.GetCreationTimestamp()
	switch {
	case a.Before(&b):
		return -1
	case b.Before(&a):
		return 1
	}
	return cmp.Compare(x.GetName(), y.GetName())
}

// call runs one API request with a per-request deadline and retries of transient errors,
// stopping as soon as ctx is done: the one retry helper of the package.
func (a *Attacher) call(ctx context.Context, f func(context.Context) error) error {
	return retry.OnError(a.backoff(), func(err error) bool { return ctx.Err() == nil && isTransient(err) }, func() error {
		rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
		defer cancel()
		return f(rctx)
	})
}

// Call runs one API request with the Attacher's per-request deadline (RequestTimeout) and
// retries of transient errors (Backoff), stopping when ctx is done: the package's one retry
// helper, call, for callers outside the package (audit's reads).
func (a *Attacher) Call(ctx context.Context, f func(context.Context) error) error {
	return a.call(ctx, f)
}

// APIMessage is the apiserver's message in err (for an error that is not an API status, its
// text), for messages that quote the apiserver.
func APIMessage(err error) string { return apiMessage(err) }

// verb picks the singular or plural form for n.
func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// objectMeta is what the core keeps of a ConfigMap or Secret: never its data.
type objectMeta struct {
	UID    types.UID
	Labels map[string]string
	Owners []metav1.OwnerReference
}

// listMeta lists the metadata of the ConfigMaps or Secrets of ns that match sel, through the
// metadata client: the data never leaves the apiserver.
func (a *Attacher) listMeta(ctx context.Context, ns string, k Kind, sel labels.Selector) (map[string]objectMeta, error) {
	out := map[string]objectMeta{}
	err := a.call(ctx, func(ctx context.Context) error {
		l, err := a.Meta.Resource(k.Resource()).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		clear(out)
		for _, it := range l.Items {
			out[it.Name] = objectMeta{UID: it.UID, Labels: it.Labels, Owners: it.OwnerReferences}
		}
		return nil
	})
	if err != nil {
		return nil, a.readError(err, "list", k, ns)
	}
	return out, nil
}

// getMeta reads one object's metadata (nil, nil when it does not exist).
func (a *Attacher) getMeta(ctx context.Context, ns string, o Object) (*objectMeta, error) {
	var m *objectMeta
	err := a.call(ctx, func(ctx context.Context) error {
		obj, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
		if err == nil {
			m = &objectMeta{UID: obj.UID, Labels: obj.Labels, Owners: obj.OwnerReferences}
		}
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.readError(err, "get", o.Kind, ns)
	}
	return m, nil
}

func (a *Attacher) readError(err error, verb string, k Kind, ns string) error {
	res := k.Resource().Resource
	if isForbidden(err) {
		return &FailError{fmt.Sprintf("forbidden to %s %s in namespace %s (%s): grant %s on %s, see %s", verb, res, ns, apiMessage(err), verb, res, a.rbacHint())}
	}
	return fmt.Errorf("%s %s in namespace %s: %w", verb, res, ns, err)
}

// patchOwners sends one patch adding every ReplicaSet in rss as an owner of o (uid, when set,
// is o's UID as a precondition).
func (a *Attacher) patchOwners(ctx context.Context, ns string, o Object, uid types.UID, rss []*appsv1.ReplicaSet) error {
	patch := ownerPatchFor(uid, rss)
	return a.call(ctx, func(ctx context.Context) error {
		_, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Patch(ctx, o.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil && isTransient(err) {
			a.log().WithField("object", o.String()).WithError(err).Debug("transient error, retrying")
		}
		return err
	})
}

// addOwners is the write of every mode (through write and safePatch): one add-only patch that
// makes each live ReplicaSet in rss an owner of o (ReplicaSets being deleted are dropped;
// nothing to add is no request).
func (a *Attacher) addOwners(ctx context.Context, ns string, o Object, uid types.UID, rss []*appsv1.ReplicaSet) error {
	var live []*appsv1.ReplicaSet
	for _, rs := range rss {
		if Live(rs) {
			live = append(live, rs)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return a.patchOwners(ctx, ns, o, uid, live)
}

// IsReplaced reports the answer to a patch whose UID precondition failed: the name now belongs
// to another object than the one read (deleted and recreated in between).
func IsReplaced(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(apiMessage(err), "metadata.uid")
}

// existing keeps the ReplicaSets that a live read shows still exist with the same UID and no
// deletionTimestamp, and whose controller, if they have one, does too (kind, name and UID). A
// caller whose view may be stale (the controller's caches, audit's snapshot) confirms the
// owners of an object that has no ReplicaSet owner yet: if every ReplicaSet it adds were
// already gone, or about to be collected with its deleted workload, the garbage collector
// would delete the object, although a ReplicaSet the view does not show yet may use it. One
// list per ReplicaSet and per controller, by name (list is in every mode's RBAC, get is not).
func (a *Attacher) existing(ctx context.Context, ns string, rss []*appsv1.ReplicaSet) ([]*appsv1.ReplicaSet, error) {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		var l *appsv1.ReplicaSetList
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			l, err = a.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rs.Name})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("confirming ReplicaSet %s in namespace %s: %w", rs.Name, ns, err)
		}
		for i := range l.Items {
			if l.Items[i].UID != rs.UID || !Live(&l.Items[i]) {
				continue
			}
			ok, err := a.controllerLive(ctx, ns, &l.Items[i])
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, rs)
			}
		}
	}
	return out, nil
}

// controllerLive confirms that the ReplicaSet's controller exists with the UID its reference
// names and is not being deleted (true without a controller; false for a kind whose
// existence is not checked, which the users rule has blocked already).
func (a *Attacher) controllerLive(ctx context.Context, ns string, rs *appsv1.ReplicaSet) (bool, error) {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil {
		return true, nil
	}
	k, ok := checkedKind(ref)
	if !ok {
		return false, nil
	}
	var items []metav1.PartialObjectMetadata
	err := a.call(ctx, func(ctx context.Context) error {
		l, err := a.Meta.Resource(k.gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ref.Name})
		if err == nil {
			items = l.Items
		}
		return err
	})
	if isNotFound(err) { // the kind is not served: the controller cannot exist
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirming %s %s, the controller of ReplicaSet %s, in namespace %s: %w", ref.Kind, ref.Name, rs.Name, ns, err)
	}
	for i := range items {
		if items[i].UID == ref.UID && (items[i].DeletionTimestamp == nil || Orphaning(&items[i])) {
			return true, nil // live, or orphaning (the ReplicaSet lives on without it)
		}
	}
	return false, nil
}

// Positive reports whether an opt-in selector requires something an object must carry: at
// least one requirement `key`, `key=value` or `key in (…)`. An empty selector matches every
// object, and one made only of `!key`, `key!=v` or `key notin (…)` matches every object
// without that label: either would adopt static and shared config, so every mode refuses
// them.
func Positive(sel labels.Selector) bool {
	if sel == nil {
		return false
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In, selection.Exists:
			return true
		}
	}
	return false
}

// NotPositive is the message for a selector Positive refuses.
const NotPositive = "selects every object without a given label (or everything): give a label objects must carry, such as " + DefaultDiscoverLabel + "=true"
