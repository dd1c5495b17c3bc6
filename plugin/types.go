package plugin

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The types of a run, which every layer shares: what Reconcile takes (Request, Candidate),
// what it decides (Plan, Write, Skip, Blocked, Handover), what it returns (Result), and Owner,
// the object that stands for one user's lifetime. No logic beyond naming them.

// Request is one run of the ownership core, the one write entry point of every mode: the step
// and the Job (an explicit list and a target, discovery), the controller and audit -fix
// (Candidates whose metadata they hold). Modes differ only in how they find candidates and
// report outcomes; every rule is applied here.
type Request struct {
	// Namespace of every object (default Workload.Namespace).
	Namespace string
	// Users is the namespace's view of who uses what: ReadUsage, or the controller's caches.
	// Required unless ReadUsers is set.
	Users UserView
	// ReadUsers, when Users is nil, reads the namespace's users (ReadUsage) for a run scoped
	// to its workload (Maintainers): only when some object is not maintained by a live
	// controller, once. The objects a live controller maintains get the workload's own
	// ReplicaSets that use them (ReplicaSets), whatever their other users: the controller
	// keeps those (usersFor).
	ReadUsers func(ctx context.Context) (UserView, error)
	// Workload and ReplicaSets, with an explicit list or discovery: the workload the run is
	// for and its own ReplicaSets (the rule table and discovery look at its history).
	Workload    Workload
	ReplicaSets []*appsv1.ReplicaSet
	// Target is the ReplicaSet being rolled out; required when Objects is not empty.
	Target *appsv1.ReplicaSet
	// Objects is the explicit list (the step config, -configmaps/-secrets).
	Objects           []Object
	AllowUnreferenced bool
	// Discover, when not nil, also adopts every object matching it that a ReplicaSet of the
	// workload uses.
	Discover labels.Selector
	// Candidates are objects found by the caller (the controller, audit -fix), with the
	// metadata it read.
	Candidates []Candidate
	Policy     Policy
	DryRun     bool
	// Source is what the explicit list is called in messages (default "the step config"; the
	// Job: "-configmaps/-secrets").
	Source string
	// Maintainers, when set, scopes the run to its workload (the step, the Job, audit -fix): it
	// can keep true only what that workload's own later runs see again. An object whose users
	// are all the workload's ReplicaSets gets them as owners; an object other users share gets
	// the workload's own ReplicaSets only, where a live controller maintains it (one of
	// Maintainers.Leases, MaintainedBy), and is refused otherwise (a listed one fails the run,
	// nothing written). Nil: the run maintains every user itself (the controller).
	Maintainers *Maintainers
	// Prefetched, with Maintainers and ReadUsers, is what the run read beside its first list
	// (Prefetch): its Leases and metadata are not read again.
	Prefetched *Prefetched
}

// Maintainers are where a run scoped to one workload looks for a controller that keeps the
// owners of shared config current.
type Maintainers struct {
	// Leases are the controllers' leader Leases to read (none: no controller).
	Leases []LeaseRef
	// Now is the clock the Leases are judged by (default time.Now).
	Now func() time.Time
}

func (m *Maintainers) now() time.Time {
	if m.Now == nil {
		return time.Now()
	}
	return m.Now()
}

// namespace is the namespace of every object of the run.
func (r Request) namespace() string {
	if r.Namespace == "" {
		return r.Workload.Namespace
	}
	return r.Namespace
}

// listName is what the explicit list is called in messages.
func (r Request) listName() string {
	if r.Source == "" {
		return "the step config"
	}
	return r.Source
}

// workloadName names the run's workload in messages ("" without one).
func (r Request) workloadName() string {
	if r.Workload.Name == "" {
		return ""
	}
	return r.Workload.String()
}

// Skip reasons.
const (
	SkipRollback   = "rollback"
	SkipOlder      = "older"
	SkipCredential = "credential"
	SkipOptIn      = "opt-in"
)

// Skip is a listed object that is left alone, and why.
type Skip struct {
	Object Object
	// Reason is SkipRollback (only ReplicaSets created after the target use it: undo re-ran a
	// newer step list on an older ReplicaSet), SkipOlder (only older revisions use it) or
	// SkipCredential (the target uses it only as a credential and it is not opted in) or
	// SkipOptIn (a candidate outside the administrator's --require-opt-in).
	Reason string
	UsedBy []string
	// OptIn is the opt-in selector in force (for messages).
	OptIn string
}

// Write is one object's patch: every ReplicaSet it gets as owner, in one request.
type Write struct {
	Object Object
	// ObjectUID, when set, is the object's UID as read: the patch carries it as a precondition.
	ObjectUID types.UID
	Owners    []Owner
	// Listed marks an object of the explicit list: its problems decide the verdict; those of
	// objects found by discovery are warnings.
	Listed bool
	// verify: confirm the ReplicaSets and their controllers with a live read first (the
	// view is stale and the object has no ReplicaSet owner yet).
	verify bool
	// recheck, when set, is a rule the object had no labels to be checked against (it did not
	// exist): one that appears during the grace is read and checked before it is patched.
	recheck *labelRule
	// facts are what decided Owners (decideOwners), for the write to decide again with the
	// live confirmation (verify) and the dry run with the object as read.
	facts ownerFacts
}

// Names lists the owners' names.
func (w Write) Names() []string {
	out := make([]string, len(w.Owners))
	for i, o := range w.Owners {
		out[i] = o.String()
	}
	return out
}

// Plan is what a run writes, decided from pod templates and object metadata before any write.
type Plan struct {
	Target  *appsv1.ReplicaSet
	Writes  []Write
	Skipped []Skip
	// Unreferenced are listed objects no ReplicaSet references (attached to the target only
	// with AllowUnreferenced).
	Unreferenced []Object
	// Listed are the explicit objects the target gets (already owned ones included).
	Listed []Object
	// Owned counts objects found by discovery that already have every owner they need.
	Owned int
	// Blocked are objects that a user that cannot own them also uses, or (a run scoped to its
	// workload) that other users share and no live controller maintains: nothing is written to
	// them (a listed one fails the run).
	Blocked []Blocked
	// Handed are shared objects that got only the workload's own ReplicaSets: a live
	// controller maintains their other users.
	Handed []Handover
}

// Handover is a shared object whose other users a live controller maintains.
type Handover struct {
	Object Object
	Users  []string
	// Lease is the controller's Lease (namespace/name).
	Lease string
}

// Blocked is an object left alone because not every user of it can own it.
type Blocked struct {
	Object Object
	// Users name the users that cannot own it, e.g. "StatefulSet cache"; with Unmaintained,
	// the users outside the run's workload.
	Users []string
	// Unmaintained, when set, is why no live controller maintains the object's other users
	// (one reason per Lease): the run is scoped to Workload and the object is shared.
	Unmaintained []string
	Workload     string
}

// Result is what Reconcile did (in a dry run: would do).
type Result struct {
	Plan
	// Added are the writes that went through (dry run: that would be sent).
	Added []Write
	// NotFound are listed objects that do not exist (dry run only; a real run fails on them).
	NotFound []Object
	// Warnings are problems with objects of older ReplicaSets found by discovery: logged and
	// reported, but they do not decide the verdict.
	Warnings []string
	// Errors are the per-object errors behind Warnings, for callers that count them by kind.
	Errors  []ObjectError
	Message string
}

// ObjectError is a write that failed for one object nobody listed.
type ObjectError struct {
	Object Object
	Err    error
}

// Candidate is an object a caller found (the controller's caches, audit's snapshot) with the
// metadata it read (never the data). Who may own it is not the caller's to say: Reconcile asks
// the namespace's users (Request.Users).
type Candidate struct {
	Object Object
	// UID is the object's UID as read (empty: unknown); the patch carries it as a precondition.
	UID    types.UID
	Labels map[string]string
	// Owners are its owner references as read (only UIDs are compared).
	Owners []metav1.OwnerReference
	// ReplicaSetOwned: an apps ReplicaSet is among its owners, for callers whose Owners keep
	// only UIDs (the controller's cache); otherwise HasReplicaSetOwner(Owners) says it.
	ReplicaSetOwned bool
}

// candidate is a Candidate on its way through Reconcile.
type candidate struct {
	Candidate
	// listed: in the explicit list, whose problems decide the verdict.
	listed bool
	// labelsKnown: Labels (and UID, Owners) were read.
	labelsKnown bool
	// forced is the target of an allowUnreferenced object: an owner though its template does
	// not reference the object.
	forced *Owner
	// recheck is the label rule of a listed object that did not exist at the check.
	recheck *labelRule
	// dropped: skipped by checkLabels (a credential).
	dropped bool
}

// objectMeta is what the core keeps of a ConfigMap or Secret: never its data.
type objectMeta struct {
	UID    types.UID
	Labels map[string]string
	Owners []metav1.OwnerReference
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

// history is the run's workload's ReplicaSets, oldest first, and the references of each
// template (refs[i] is rss[i]'s).
type history struct {
	rss  []*appsv1.ReplicaSet
	refs []References
}

// reading is what a run read (read.go) for its plan (plan.go): the candidates with the metadata
// read of them, the namespace's users as the rules see them, the controllers' Leases, and the
// warnings of reads done without.
type reading struct {
	ns       string
	cands    []candidate
	users    UserView
	leases   []ControllerLease
	warnings []string
}

// ownerFacts is everything read and confirmed about one object that its owners depend on:
// the plan fills in what the run read, the write adds what the live confirmation found.
type ownerFacts struct {
	// users are every user of the object in its namespace (the run's UserView).
	users Users
	// only, when set, limits the owners to that workload's ReplicaSets: a run scoped to it
	// sees the object shared, and a live controller maintains the other users.
	only *Workload
	// forced is the target of an explicit object no template references (allowUnreferenced).
	forced *Owner
	// has are the object's owner references as read (only UIDs are compared).
	has []metav1.OwnerReference
	// live, once the owners were confirmed with a live read (confirm.go), holds the UIDs of
	// those still there, with their controllers; nil: not confirmed (a view that is not stale,
	// or the plan, before any confirmation).
	live map[types.UID]bool
}

// ownerDecision is what decideOwners decides for one object.
type ownerDecision struct {
	// owning are the users that own it (for the credentials rule, which looks at how they use it).
	owning []ReplicaSetUser
	// want is every owner the object gets (those it has included).
	want []Owner
	// add are the owners to write: want, minus those it has, minus (once confirmed) those a
	// live read no longer shows. Empty: nothing to send.
	add []Owner
	// blockers name the users that cannot own it: nothing may be written.
	blockers []string
}

// Policy is the administrator's rule on what may be written.
type Policy struct {
	// RequireOptIn: every object that gets an owner reference must match OptIn. The step writes
	// with the Rollouts controller's privileges, so without it anyone who may edit a Rollout can
	// make any ConfigMap or Secret of the namespace a dependent of a ReplicaSet and have the
	// garbage collector delete it later (a confused deputy).
	RequireOptIn bool
	// OptIn is the opt-in selector (nil: configmap-attacher/revisioned=true).
	OptIn labels.Selector
}

// labelRule is a rule on the labels of a listed object, for one that did not exist when the
// labels were checked and appears during the grace: it is read and checked before its patch.
type labelRule struct {
	optIn        labels.Selector
	requireOptIn bool // the administrator's policy
	credential   bool // the target uses it only as a credential
	ns           string
}

// ControllerState is what is known of a ReplicaSet's controller.
type ControllerState int

const (
	// ControllerNone: the ReplicaSet has no controller (created by hand, or orphaned with
	// --cascade=orphan). It runs its pods for as long as it exists, so it can own.
	ControllerNone ControllerState = iota
	// ControllerLive: the controller exists with the UID the reference names and is not
	// being deleted.
	ControllerLive
	// ControllerGone: the controller is absent, has another UID (deleted and re-created) or
	// is being deleted. The garbage collector deletes the ReplicaSet: it never becomes an
	// owner, and it does not keep an object alive.
	ControllerGone
	// ControllerUnknown: a kind whose existence configmap-attacher does not check. Such a
	// ReplicaSet blocks adoption: an owner reference to it could be a reference to the dead.
	ControllerUnknown
)

// ReplicaSetUser is a ReplicaSet whose pod template references the object.
type ReplicaSetUser struct {
	ReplicaSet Owner
	Controller ControllerState
	// CredentialOnly: the template uses the object only as a credential (CredentialOnly).
	CredentialOnly bool
}

// OtherUser is a pod template that references the object and cannot own it, e.g.
// "StatefulSet cache".
type OtherUser struct {
	Kind, Name string
}

func (u OtherUser) String() string { return u.Kind + " " + u.Name }

// OwnerUser is a user that owns through an object other than a ReplicaSet (every user owns,
// in the controller mode): a StatefulSet's or DaemonSet's ControllerRevision, a Job, a Pod no
// controller owns, or the anchor of a workload's current template (anchor.go).
type OwnerUser struct {
	Owner      Owner
	Controller ControllerState
}

// Users are every user of one object in its namespace: the ReplicaSets that use it, the other
// users that own through an object a view maintains (Owners: only the controller's view,
// which keeps them current), and the users that cannot own it (Others: they block).
type Users struct {
	ReplicaSets []ReplicaSetUser
	Owners      []OwnerUser
	Others      []OtherUser
	// Crowd is the object's crowd anchor (CrowdAnchor) when it exists: the owner that stands
	// for its Jobs and bare Pods once they are more than MaxUserOwners.
	Crowd *Owner
	// Owned are the UIDs of the object's owner references as the view knows them (the
	// controller's cache and the references it has just written): the references of Jobs that
	// are gone, which the garbage collector has not removed yet, take room too (capMany).
	// Nil: a view in which no Job or Pod owns.
	Owned []types.UID
}

// UserView answers who uses an object in one namespace: a NamespaceUsage read for the run
// (the step, the Job, audit) or the controller's caches.
type UserView interface {
	UsersOf(o Object) Users
	// Stale reports whether the view may lag the apiserver (caches, a snapshot written to
	// later): a ReplicaSet that would become an object's first ReplicaSet owner is then
	// confirmed live, with its controller, before the write.
	Stale() bool
}
