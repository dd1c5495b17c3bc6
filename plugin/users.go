package plugin

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The views of who uses an object in a namespace (UserView): NamespaceUsage, read for a run
// (readusage.go) or assembled from lists a caller made (NewUsage), and the views a run scoped to
// its workload sees (ownView, maintainedView); which controllers' existence is checked, and how
// a ReplicaSet's controller is judged (controllerState). The rule these views feed, "every user
// counts", is ownersOf in owners.go.

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

// ownView is the users a run's workload alone accounts for: its own ReplicaSets, their
// controller (the workload) live.
func ownView(ns string, req Request) *NamespaceUsage {
	in := UsageInput{Controllers: []ControllerRef{{Kind: req.Workload.Kind, Name: req.Workload.Name, UID: req.Workload.UID}}}
	seen := map[types.UID]bool{}
	for _, rs := range append(append([]*appsv1.ReplicaSet(nil), req.ReplicaSets...), req.Target) {
		if rs != nil && !seen[rs.UID] {
			seen[rs.UID] = true
			in.ReplicaSets = append(in.ReplicaSets, *rs)
		}
	}
	return NewUsage(ns, in)
}

// maintainedView answers for the objects a live controller maintains with the workload's own
// users, and for the others with the namespace's.
type maintainedView struct {
	own, full UserView
	covered   map[Object]bool
}

func (v maintainedView) UsersOf(o Object) Users {
	if v.covered[o] {
		return v.own.UsersOf(o)
	}
	return v.full.UsersOf(o)
}

func (v maintainedView) Stale() bool { return v.full.Stale() }
