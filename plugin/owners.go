package plugin

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Who owns an object: decideOwners, the one function that computes an object's final owner
// set, and the users rule it applies (ownersOf: every user counts). Before an object gets an
// owner, every user of it in the namespace is known: every live ReplicaSet whose template
// references it becomes an owner, whatever controls it, unless its controller is gone (the
// garbage collector deletes such a ReplicaSet, and an object it alone owned with it); a pod
// template that cannot own it (a StatefulSet, DaemonSet, Job, CronJob or a Pod no ReplicaSet
// controls, or a ReplicaSet whose controller's existence cannot be confirmed) blocks its
// adoption. Pure: no request.

// decideOwners is the one function that decides an object's owners, in every mode, from
// everything read and confirmed about it:
//
//	the users rule (ownersOf)         every live user's owner whose controller is live (or that has
//	                                  none; owners being deleted never); the Jobs and Pods past
//	                                  MaxUserOwners through their crowd anchor; blockers named
//	a scoped run's shared object      only its workload's own ReplicaSets (f.only), no blockers
//	an unreferenced listed object     the target too (f.forced)
//	owners it has                     not added again (by UID)
//	confirmed live (f.live)           only those a live read still shows
//
// The plan calls it with what the run read; the write calls it again, for a stale view, with
// the live confirmation, and sends exactly its add.
func decideOwners(f ownerFacts) ownerDecision {
	var d ownerDecision
	d.owning, d.blockers = ownersOf(f.users)
	if f.only != nil {
		d.owning, d.blockers = SharingOf(f.users, *f.only).Own, nil
	}
	d.want = make([]Owner, 0, len(d.owning)+1)
	for _, o := range d.owning {
		d.want = append(d.want, o.ReplicaSet)
	}
	if f.forced != nil && !containsOwner(d.want, f.forced.UID) {
		d.want = append(d.want, *f.forced)
	}
	have := make(map[types.UID]bool, len(f.has))
	for _, o := range f.has {
		have[o.UID] = true
	}
	for _, o := range d.want {
		if !have[o.UID] && (f.live == nil || f.live[o.UID]) {
			d.add = append(d.add, o)
		}
	}
	return d
}

// containsOwner reports whether owners hold the owner with this UID.
func containsOwner(owners []Owner, uid types.UID) bool {
	return slices.ContainsFunc(owners, func(o Owner) bool { return o.UID == uid })
}

// ownersOf is the users rule, which decideOwners applies and the modes' questions share
// (OwnersOf, SharingOf, Blockers, CrowdNeeded): the owners are the live ReplicaSets, and the live owners of the other users (revisions, Jobs,
// Pods, anchors), whose controller is live (or that have none); the blockers are the users that
// cannot own it, named for messages. More than MaxUserOwners Jobs and Pods own through their
// crowd anchor instead (capMany).
func ownersOf(u Users) (owners []ReplicaSetUser, blockers []string) {
	owners, blockers = eachOwner(u)
	return capMany(owners, blockers, u)
}

// eachOwner is ownersOf before the cap: every user's own owner.
func eachOwner(u Users) (owners []ReplicaSetUser, blockers []string) {
	for _, r := range u.ReplicaSets {
		if r.ReplicaSet.Deleting {
			continue
		}
		switch r.Controller {
		case ControllerGone:
			continue
		case ControllerUnknown:
			who := "a controller"
			if ref := r.ReplicaSet.Controller; ref != nil {
				who = ref.Kind + " " + ref.Name
			}
			blockers = append(blockers, fmt.Sprintf("ReplicaSet %s (controlled by %s, whose existence configmap-attacher cannot confirm)", r.ReplicaSet.Name, who))
			continue
		}
		owners = append(owners, r)
	}
	for _, o := range u.Owners {
		switch {
		case o.Owner.Deleting, o.Controller == ControllerGone:
			continue
		case o.Controller == ControllerUnknown:
			blockers = append(blockers, fmt.Sprintf("%s (whose controller's existence configmap-attacher cannot confirm)", o.Owner))
			continue
		}
		// The owning user in the form every rule takes (the field keeps the ReplicaSet's name).
		owners = append(owners, ReplicaSetUser{ReplicaSet: o.Owner, Controller: o.Controller})
	}
	for _, o := range u.Others {
		blockers = append(blockers, o.String())
	}
	return owners, blockers
}

// many reports an owner that stands for one Job or one bare Pod: the kinds that come by the
// hundred (a CronJob's history, a fan-out), whose owner lists capMany bounds.
func many(o Owner) bool { return o.KindOf() == OwnerJob || o.KindOf() == OwnerPod }

func countMany(owners []ReplicaSetUser) int {
	n := 0
	for _, o := range owners {
		if many(o.ReplicaSet) {
			n++
		}
	}
	return n
}

// capMany bounds an object's owners: while its Jobs and Pods are too many to own it one by
// one (crowdCalled), none of them is added and its crowd anchor is added instead (until the
// anchor exists, the object waits for it: a blocker named with AnchorPending). The anchor lives
// while any of them does (AnchorVerdict), so the object is never left with owners that are all
// going away while a user lives; the Jobs and Pods that own it already stay owners (writes
// only add).
func capMany(owners []ReplicaSetUser, blockers []string, u Users) ([]ReplicaSetUser, []string) {
	if !crowdCalled(owners, u) {
		return owners, blockers
	}
	n := countMany(owners)
	kept := make([]ReplicaSetUser, 0, len(owners)-n+1)
	for _, o := range owners {
		if !many(o.ReplicaSet) {
			kept = append(kept, o)
		}
	}
	if u.Crowd == nil || u.Crowd.Deleting {
		return kept, append(blockers, fmt.Sprintf("%d Jobs and Pods%s", n, AnchorPending))
	}
	return append(kept, ReplicaSetUser{ReplicaSet: *u.Crowd, Controller: ControllerNone}), blockers
}

// crowdCalled reports whether the crowd anchor stands for the Jobs and Pods among owners: they
// are more than MaxUserOwners, or those that do not own the object yet would take its
// references past MaxUserOwners beside the ones it has (other than its other owners and the
// crowd: the references of Jobs that are gone count until the collector removes them). The
// object's list then never holds more than MaxUserOwners references besides its other owners
// and the crowd.
func crowdCalled(owners []ReplicaSetUser, u Users) bool {
	n := countMany(owners)
	if n > MaxUserOwners {
		return true
	}
	owned := make(map[types.UID]bool, len(u.Owned))
	for _, uid := range u.Owned {
		owned[uid] = true
	}
	if u.Crowd != nil {
		delete(owned, u.Crowd.UID)
	}
	fresh := 0
	for _, o := range owners {
		switch {
		case !many(o.ReplicaSet):
			delete(owned, o.ReplicaSet.UID)
		case !owned[o.ReplicaSet.UID]:
			fresh++
		}
	}
	return fresh > 0 && len(owned)+fresh > MaxUserOwners
}

// CrowdNeeded reports whether the object's Jobs and bare Pods are too many to own it one by
// one (crowdCalled): its crowd anchor stands for them.
func CrowdNeeded(u Users) bool {
	owners, _ := eachOwner(u)
	return crowdCalled(owners, u)
}

// OwnersOf is the rule for a caller that keeps an object's owners current (the controller
// deciding whether an anchor may go): the owners the object's users call for, and the users
// that block it.
func OwnersOf(u Users) (owners []Owner, blockers []string) {
	us, blockers := ownersOf(u)
	for _, o := range us {
		owners = append(owners, o.ReplicaSet)
	}
	return owners, blockers
}

// Sharing is an object's users split for a run that sees one workload only (the step, the Job,
// audit): the owners ownersOf calls for that are that workload's ReplicaSets, the users outside
// it, and the users no mode can own.
type Sharing struct {
	// Own are the owners that are ReplicaSets of the workload.
	Own []ReplicaSetUser
	// Others name every other user: ReplicaSets of other workloads or of none, and what owns
	// only through a revision, a Job, a Pod or an anchor (StatefulSets, DaemonSets, Jobs,
	// CronJobs, bare Pods), e.g. "ReplicaSet worker-5d4f (of Deployment worker)".
	Others []string
	// Unownable are the users that block in every mode (a ReplicaSet or owner whose
	// controller's existence cannot be confirmed).
	Unownable []string
	// Workload names the workload Own belongs to when SharingOf picked it ("Deployment api").
	Workload string
}

// SharingOf splits an object's users by ownersOf, the one rule, for workload w: its
// ReplicaSets are those its UID controls, and those of the Deployment a workloadRef Rollout
// takes its template from (w.RefDeployment); an empty UID stands for the workload of the first
// ReplicaSet owner (audit, which looks at an object, not a run).
func SharingOf(u Users, w Workload) Sharing {
	var s Sharing
	owners, _ := ownersOf(u)
	_, s.Unownable = ownersOf(Users{ReplicaSets: u.ReplicaSets, Owners: u.Owners, Crowd: u.Crowd, Owned: u.Owned})
	uid := w.UID
	for _, o := range owners {
		ref := o.ReplicaSet.Controller
		if uid == "" && ref != nil && o.ReplicaSet.KindOf() == OwnerReplicaSet {
			uid, s.Workload = ref.UID, ref.Kind+" "+ref.Name
		}
		refDeployment := w.RefDeployment != "" && ref != nil && ref.Kind == KindDeployment && ref.Name == w.RefDeployment
		if ref != nil && (ref.UID == uid || refDeployment) && o.ReplicaSet.KindOf() == OwnerReplicaSet {
			s.Own = append(s.Own, o)
			continue
		}
		s.Others = append(s.Others, userName(o.ReplicaSet))
	}
	for _, o := range u.Others {
		s.Others = append(s.Others, o.String())
	}
	return s
}

// userName names an owning user for messages: "ReplicaSet worker-5d4f (of Deployment worker)".
func userName(o Owner) string {
	name := o.KindOf() + " " + o.Name
	switch {
	case o.Controller != nil:
		return fmt.Sprintf("%s (of %s %s)", name, o.Controller.Kind, o.Controller.Name)
	case o.KindOf() == OwnerReplicaSet:
		return name + " (no controller)"
	}
	return name
}

// Blockers are the users of an object that cannot own it (plugin.Blocked.Users), as the
// core's rule names them: for audit's shared finding.
func Blockers(u Users) []string {
	_, b := ownersOf(u)
	return b
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

// Live reports whether a ReplicaSet may become an owner: one being deleted may not, since
// an object whose only owner is being deleted is collected with it.
func Live(rs *appsv1.ReplicaSet) bool { return rs != nil && rs.DeletionTimestamp == nil }
