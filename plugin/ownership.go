package plugin

import (
	"encoding/json"
	"errors"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"
)

// The pure ownership rules: the patch body, which owners are missing, which ReplicaSets may
// own, and the lost and unowned gaps audit reports. No request is sent from here.

// OwnerPatch is the strategic merge patch that adds the ReplicaSets as owners. ObjectMeta
// declares ownerReferences with patchMergeKey uid, so the apiserver merges these entries into
// the list by UID: no read, no read-modify-write race with the garbage collector (which edits
// the same list), other owners untouched, and a repeat is a no-op that leaves the
// resourceVersion as it was. The entry carries only the identifying fields: `controller` is
// left out (false is its default), so an entry already there with the same UID — the original
// tool's `controller: true` — keeps every field it has.
func OwnerPatch(rss ...*appsv1.ReplicaSet) []byte {
	owners := make([]Owner, len(rss))
	for i, rs := range rss {
		owners[i] = OwnerOf(rs)
	}
	return ownerPatchFor("", owners)
}

// Owner is the object that stands for one user's lifetime, as an owner: only what an owner
// reference names and whether it may own. The core takes owners in this form from every view
// of the namespace (a read, or the controller's caches), so no rule can read a template it was
// not given. Kind is one of OwnerKinds; empty is a ReplicaSet (the step's, the Job's and
// audit's only owner kind).
type Owner struct {
	Kind string
	Name string
	UID  types.UID
	// Deleting: the owner has a deletionTimestamp (it may not become an owner).
	Deleting bool
	// Controller is its controller reference (nil: none), for messages and the live
	// confirmation.
	Controller *metav1.OwnerReference
}

// The owner kinds: what stands for each user's lifetime (docs/security.md, "Every user owns").
const (
	OwnerReplicaSet         = "ReplicaSet"
	OwnerControllerRevision = "ControllerRevision" // a StatefulSet's or DaemonSet's revision, or an anchor
	OwnerJob                = "Job"
	OwnerPod                = "Pod"
)

// ownerAPIVersions are the owner kinds' API versions, as an owner reference names them.
var ownerAPIVersions = map[string]string{
	OwnerReplicaSet: "apps/v1", OwnerControllerRevision: "apps/v1", OwnerJob: "batch/v1", OwnerPod: "v1",
}

// KindOf is the owner's kind (a ReplicaSet when unset).
func (o Owner) KindOf() string {
	if o.Kind == "" {
		return OwnerReplicaSet
	}
	return o.Kind
}

// APIVersion is the owner kind's API version.
func (o Owner) APIVersion() string { return ownerAPIVersions[o.KindOf()] }

// String names the owner in messages: a ReplicaSet by its name alone (as every message
// always has), any other kind as "Kind name".
func (o Owner) String() string {
	if o.KindOf() == OwnerReplicaSet {
		return o.Name
	}
	return o.KindOf() + " " + o.Name
}

// OwnerOf is a ReplicaSet's identity as an owner.
func OwnerOf(rs *appsv1.ReplicaSet) Owner {
	return Owner{Name: rs.Name, UID: rs.UID, Deleting: rs.DeletionTimestamp != nil, Controller: metav1.GetControllerOfNoCopy(rs)}
}

// ownerPatchFor is OwnerPatch with the object's UID as a precondition when uid is set: the
// apiserver refuses the patch (422, metadata.uid is immutable) if the name now belongs to
// another object (deleted and recreated since it was read), as the garbage collector's own
// patches do.
func ownerPatchFor(uid types.UID, rss []Owner) []byte {
	type ref struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Name       string    `json:"name"`
		UID        types.UID `json:"uid"`
	}
	refs := make([]ref, 0, len(rss))
	for _, o := range rss {
		refs = append(refs, ref{o.APIVersion(), o.KindOf(), o.Name, o.UID})
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

// withoutOwners drops the ReplicaSets that owners names already (by UID).
func withoutOwners(rss []Owner, owners []metav1.OwnerReference) []Owner {
	have := make(map[types.UID]bool, len(owners))
	for _, o := range owners {
		have[o.UID] = true
	}
	var out []Owner
	for _, rs := range rss {
		if !have[rs.UID] {
			out = append(out, rs)
		}
	}
	return out
}

// errAllGone: every ReplicaSet a write would add no longer exists (the caller's view was
// stale); nothing is written, and the caller's view catches up.
var errAllGone = errors.New("every ReplicaSet to add is gone")

// isAllGone reports a write skipped because its ReplicaSets no longer exist.
func isAllGone(err error) bool { return errors.Is(err, errAllGone) }

// GapReplicaSet is what Gaps needs of one ReplicaSet of a watched or audited workload.
type GapReplicaSet struct {
	Live bool
	// Refs are the objects its pod template references, Required those its pods cannot start
	// without (RequiredReferences).
	Refs, Required []Object
}

// GapObject is an object's state as Gaps needs it.
type GapObject struct {
	Exists, OptedIn, ReplicaSetOwned bool
}

// Gaps counts one namespace's two continuous-audit figures, for audit's summary and the
// controller mode's gauges alike: unowned, the distinct opted-in objects that a live
// ReplicaSet references and that no ReplicaSet owns (never collected; a prune deletes them);
// and lost, the references from a live ReplicaSet to a required object that does not exist
// (each is a revision whose pods, or a rollback to it, would fail).
func Gaps(rss []GapReplicaSet, lookup func(Object) GapObject) (unowned, lost int) {
	seen := map[Object]bool{}
	for _, rs := range rss {
		if !rs.Live {
			continue
		}
		for _, o := range rs.Refs {
			if seen[o] {
				continue
			}
			seen[o] = true
			if g := lookup(o); g.Exists && g.OptedIn && !g.ReplicaSetOwned {
				unowned++
			}
		}
		for _, o := range rs.Required {
			if !lookup(o).Exists {
				lost++
			}
		}
	}
	return unowned, lost
}
