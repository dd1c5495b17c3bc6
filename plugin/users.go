package plugin

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Who uses an object: the rule "every user counts". Before an object gets an owner, every
// user of it in the namespace is known: every live ReplicaSet whose template references it
// becomes an owner, whatever controls it, unless its controller is gone (the garbage
// collector deletes such a ReplicaSet, and an object it alone owned with it); a pod template
// that cannot own it (a StatefulSet, DaemonSet, Job, CronJob or a Pod no ReplicaSet controls,
// or a ReplicaSet whose controller's existence cannot be confirmed) blocks its adoption.

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

// ownersOf is the one rule that decides an object's owners from its users, in every mode: the
// owners are the live ReplicaSets, and the live owners of the other users (revisions, Jobs,
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

// controllerKind is a controller kind whose existence is checked: its API resource.
type controllerKind struct {
	group, kind string
	gvr         schema.GroupVersionResource
}

// checkedControllers are the controllers whose existence is confirmed: of ReplicaSets,
// Deployments, Rollouts and Experiments (Argo Rollouts' Experiments run ReplicaSets of their
// own); of the other owners, StatefulSets, DaemonSets and CronJobs.
var checkedControllers = []controllerKind{
	{"apps", KindDeployment, appsv1.SchemeGroupVersion.WithResource("deployments")},
	{"argoproj.io", KindRollout, schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}},
	{"argoproj.io", "Experiment", schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "experiments"}},
	// The controllers of the other owner kinds: a StatefulSet's or DaemonSet's revisions, a
	// CronJob's Jobs (the controller mode's owners).
	{"apps", "StatefulSet", appsv1.SchemeGroupVersion.WithResource("statefulsets")},
	{"apps", "DaemonSet", appsv1.SchemeGroupVersion.WithResource("daemonsets")},
	{"batch", "CronJob", schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}},
}

func checkedKind(ref *metav1.OwnerReference) (controllerKind, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return controllerKind{}, false
	}
	for _, k := range checkedControllers {
		if k.group == gv.Group && k.kind == ref.Kind {
			return k, true
		}
	}
	return controllerKind{}, false
}

// ControllerRef identifies a workload whose liveness is known: kind, name, UID, and whether
// it is being deleted.
type ControllerRef struct {
	Kind, Name string
	UID        types.UID
	Deleting   bool
	// Orphaning: being deleted with the orphan finalizer (kubectl delete --cascade=orphan):
	// the garbage collector removes its ReplicaSets' controller references and keeps them.
	Orphaning bool
}

// RefOf is the ControllerRef of a workload as read (its metadata).
func RefOf(kind string, m metav1.Object) ControllerRef {
	return ControllerRef{Kind: kind, Name: m.GetName(), UID: m.GetUID(), Deleting: m.GetDeletionTimestamp() != nil, Orphaning: Orphaning(m)}
}

// Orphaning reports a workload being deleted with the orphan finalizer: its ReplicaSets live
// on without a controller, so they count as ReplicaSets without one (owners), not as gone.
func Orphaning(m metav1.Object) bool {
	return m.GetDeletionTimestamp() != nil && slices.Contains(m.GetFinalizers(), metav1.FinalizerOrphanDependents)
}

// template is a pod template that cannot own: its references.
type template struct {
	user OtherUser
	// parent, for a StatefulSet's or DaemonSet's revision, is that set: a user named once
	// when both its current template and a revision reference the object.
	parent OtherUser
	refs   References
}

// NamespaceUsage is one namespace's users, read for one run (ReadUsage) or assembled from
// lists a caller already made (NewUsage).
type NamespaceUsage struct {
	Namespace string
	// ReplicaSets are every ReplicaSet of the namespace, oldest first. In a usage ReadUsage
	// read they are metadata only (identity, labels, owner references, timestamps): their
	// templates' references are kept beside them, not the templates.
	ReplicaSets []*appsv1.ReplicaSet
	// Warnings are reads the RBAC refused that the usage did without (ReadUsage: the
	// ControllerRevisions), naming the grant.
	Warnings    []string
	refs        []References
	creds       []References
	controllers []ControllerState
	templates   []template
	stale       bool
}

// UsageInput is what NewUsage assembles a NamespaceUsage from.
type UsageInput struct {
	ReplicaSets []appsv1.ReplicaSet
	// Controllers are the workloads of the checked kinds that exist (ListedKinds says which
	// kinds were listed in full: a ReplicaSet controlled by another workload of such a kind
	// has a ControllerGone controller; of a kind not listed, ControllerUnknown).
	Controllers []ControllerRef
	ListedKinds []string
	// Pod templates that cannot own.
	StatefulSets []appsv1.StatefulSet
	DaemonSets   []appsv1.DaemonSet
	Jobs         []batchv1.Job
	CronJobs     []batchv1.CronJob
	// BarePods are the Pods that no ReplicaSet, StatefulSet, DaemonSet or Job controls.
	BarePods []corev1.Pod
	// Stale: see UserView.Stale.
	Stale bool
}

// NewUsage assembles a namespace's users.
func NewUsage(ns string, in UsageInput) *NamespaceUsage {
	u := &NamespaceUsage{Namespace: ns, stale: in.Stale}
	for i := range in.ReplicaSets {
		u.ReplicaSets = append(u.ReplicaSets, &in.ReplicaSets[i])
	}
	SortReplicaSets(u.ReplicaSets)
	live := map[string]ControllerRef{}
	for _, c := range in.Controllers {
		live[c.Kind+"/"+c.Name] = c
	}
	for _, rs := range u.ReplicaSets {
		spec := &rs.Spec.Template.Spec
		u.refs = append(u.refs, TemplateReferences(spec))
		u.creds = append(u.creds, CredentialOnly(spec))
		u.controllers = append(u.controllers, controllerState(rs, live, in.ListedKinds))
	}
	add := func(kind, name string, spec *corev1.PodSpec) {
		u.templates = append(u.templates, template{user: OtherUser{kind, name}, refs: TemplateReferences(spec)})
	}
	for i := range in.StatefulSets {
		add("StatefulSet", in.StatefulSets[i].Name, &in.StatefulSets[i].Spec.Template.Spec)
	}
	for i := range in.DaemonSets {
		add("DaemonSet", in.DaemonSets[i].Name, &in.DaemonSets[i].Spec.Template.Spec)
	}
	for i := range in.Jobs {
		add("Job", in.Jobs[i].Name, &in.Jobs[i].Spec.Template.Spec)
	}
	for i := range in.CronJobs {
		add("CronJob", in.CronJobs[i].Name, &in.CronJobs[i].Spec.JobTemplate.Spec.Template.Spec)
	}
	for i := range in.BarePods {
		add("Pod", in.BarePods[i].Name, &in.BarePods[i].Spec)
	}
	return u
}

// controllerState classifies a ReplicaSet's controller against the workloads that exist.
func controllerState(rs *appsv1.ReplicaSet, live map[string]ControllerRef, listed []string) ControllerState {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil {
		return ControllerNone
	}
	k, ok := checkedKind(ref)
	if !ok {
		return ControllerUnknown
	}
	c, found := live[k.kind+"/"+ref.Name]
	switch {
	case found && c.UID == ref.UID && c.Orphaning:
		return ControllerNone
	case found && c.UID == ref.UID && !c.Deleting:
		return ControllerLive
	case found, slices.Contains(listed, k.kind):
		return ControllerGone
	}
	return ControllerUnknown
}

// UsersOf implements UserView.
func (u *NamespaceUsage) UsersOf(o Object) Users {
	var out Users
	for i, rs := range u.ReplicaSets {
		if u.refs[i].Has(o) {
			out.ReplicaSets = append(out.ReplicaSets, ReplicaSetUser{ReplicaSet: OwnerOf(rs), Controller: u.controllers[i], CredentialOnly: u.creds[i].Has(o)})
		}
	}
	for _, t := range u.templates {
		if t.refs.Has(o) && (t.parent.Kind == "" || !slices.Contains(out.Others, t.parent)) {
			out.Others = append(out.Others, t.user)
		}
	}
	return out
}

// ReadWarnings returns Warnings, for Reconcile, which reports them.
func (u *NamespaceUsage) ReadWarnings() []string { return u.Warnings }

// Stale implements UserView.
func (u *NamespaceUsage) Stale() bool { return u.stale }

// Own returns the workload's ReplicaSets among the namespace's (its selector and controller
// UID, oldest first), as OwnReplicaSets picks them.
func (u *NamespaceUsage) Own(w Workload) ([]*appsv1.ReplicaSet, error) {
	sel, err := w.replicaSetSelector()
	if err != nil {
		return nil, err
	}
	// The usage's own pointers (callers compare ReplicaSets by identity), already oldest first.
	var own []*appsv1.ReplicaSet
	for _, rs := range u.ReplicaSets {
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == w.UID && sel.Matches(labels.Set(rs.Labels)) {
			own = append(own, rs)
		}
	}
	return own, nil
}

// ReplicaSetPod reports whether a Pod with this controller is a ReplicaSet's: its spec is the
// ReplicaSet's template, which is read. Every other Pod's own spec counts.
func ReplicaSetPod(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != "ReplicaSet" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == "apps"
}
