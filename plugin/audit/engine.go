package audit

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Auditor reads Rollouts and Deployments, their ReplicaSets and the namespace's ConfigMaps
// and Secrets, and reports what is lost, unowned, stray or legacy. Reads: one list (or get)
// of Rollouts and one list of Deployments, then per namespace one list each of ReplicaSets,
// ConfigMaps and Secrets (plus one get of the Deployment per workloadRef Rollout).
type Auditor struct {
	// Lister makes every read.
	Lister Lister
	// Attacher is the core: its Call retries the reads, its Reconcile writes what Fix adds.
	// nil: a default Attacher without clients (reads only).
	Attacher *plugin.Attacher
	// Selector opts objects in (default configmap-attacher/revisioned=true).
	Selector labels.Selector
	Log      logrus.FieldLogger
	// Workloads are the kinds audited, plugin.KindRollout and plugin.KindDeployment (empty:
	// both). WorkloadsExplicit says they were named: then a missing Rollout CRD is an error.
	Workloads         []string
	WorkloadsExplicit bool
	// Policy is the administrator's (-require-opt-in, -opt-in-selector): Fix writes under it
	// exactly what the step and the controller would.
	Policy plugin.Policy
	// ControllerLeases are where a live controller is looked for (-controller-lease): an
	// object shared beyond one workload is the controller's to maintain; -fix leaves it alone,
	// and the report names the shared objects no live controller maintains.
	ControllerLeases []plugin.LeaseRef
}

// RBACHint is the example RBAC of audit (and -fix), named in a forbidden write's message.
const RBACHint = "examples/rbac-audit.yaml"

// New is an Auditor on the clients: reads through NewLister, writes through an Attacher whose
// forbidden messages point to audit's RBAC.
func New(cl clientset.Clients, log logrus.FieldLogger) *Auditor {
	return &Auditor{Lister: NewLister(cl), Log: log,
		Attacher: &plugin.Attacher{Client: clientset.Typed(cl.Kube), Meta: cl.Meta, Log: log, RBACHint: RBACHint}}
}

func (a *Auditor) selector() labels.Selector {
	if a.Selector == nil {
		return plugin.OptInSelector()
	}
	return a.Selector
}

func (a *Auditor) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

func (a *Auditor) attacher() *plugin.Attacher {
	if a.Attacher == nil {
		return &plugin.Attacher{Log: a.log(), RBACHint: RBACHint}
	}
	return a.Attacher
}

// audits reports whether the workload kind is audited (default: both).
func (a *Auditor) audits(kind string) bool {
	return len(a.Workloads) == 0 || slices.Contains(a.Workloads, kind)
}

// Run audits, and with fix adds the missing owner references and audits again: the report
// then shows the state after the fix (the patches may have moved owner references, and the
// repair commands address them by index) and, in Fix, what it added.
func (a *Auditor) Run(ctx context.Context, namespace, name string, fix bool) (*Report, error) {
	rep, err := a.Audit(ctx, namespace, name)
	if err != nil || !fix {
		return rep, err
	}
	a.Fix(ctx, rep)
	after, err := a.Audit(ctx, namespace, name)
	if err != nil {
		a.log().WithError(err).Warn("could not re-read after -fix; the report shows the state before it")
		return rep, nil
	}
	after.Fix = rep.Fix
	return after, nil
}

// Audit audits one Rollout (name set), every Rollout and Deployment of a namespace, or, with
// namespace "", of the cluster. A problem with one namespace or workload is recorded in the
// report (Workload.Error); only a failure to read the workloads is returned.
func (a *Auditor) Audit(ctx context.Context, namespace, name string) (*Report, error) {
	rep := newReport(a.selector().String())
	ros, err := a.readRollouts(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	var ds []appsv1.Deployment
	if a.audits(plugin.KindDeployment) && name == "" {
		err := a.read(ctx, "deployments.apps", namespace, func(ctx context.Context) error {
			var err error
			ds, err = a.Lister.ListDeployments(ctx, namespace)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	byNS := map[string]*nsWorkloads{}
	var nss []string
	at := func(ns string) *nsWorkloads {
		if byNS[ns] == nil {
			byNS[ns] = &nsWorkloads{}
			nss = append(nss, ns)
		}
		return byNS[ns]
	}
	for i := range ros {
		at(ros[i].Namespace).rollouts = append(at(ros[i].Namespace).rollouts, &ros[i])
	}
	for i := range ds {
		at(ds[i].Namespace).deployments = append(at(ds[i].Namespace).deployments, &ds[i])
	}
	sort.Strings(nss)
	for _, ns := range nss {
		a.auditNamespace(ctx, rep, ns, byNS[ns], name == "")
	}
	rep.summarize()
	return rep, nil
}

// readRollouts gets the named Rollout, or lists those of the namespace. Without the Rollout
// CRD and with the kinds defaulted, there are none (Deployments only).
func (a *Auditor) readRollouts(ctx context.Context, namespace, name string) ([]v1alpha1.Rollout, error) {
	if !a.audits(plugin.KindRollout) {
		return nil, nil
	}
	var ros []v1alpha1.Rollout
	err := a.read(ctx, "rollouts.argoproj.io", namespace, func(ctx context.Context) error {
		if name != "" {
			ro, err := a.Lister.GetRollout(ctx, namespace, name)
			if err == nil {
				ros = []v1alpha1.Rollout{*ro}
			}
			return err
		}
		var err error
		ros, err = a.Lister.ListRollouts(ctx, namespace)
		return err
	})
	switch {
	case apierrors.IsNotFound(err) && name != "":
		return nil, &plugin.FailError{Msg: fmt.Sprintf("Rollout %s/%s not found", namespace, name)}
	case apierrors.IsNotFound(err) && !a.WorkloadsExplicit:
		a.log().Warn("the Rollout CRD (rollouts.argoproj.io) is not installed: auditing Deployments only")
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, &plugin.FailError{Msg: "-workloads names rollouts, but the Rollout CRD (rollouts.argoproj.io) is not installed: install Argo Rollouts, or use -workloads deployments"}
	case err != nil:
		return nil, err
	}
	return ros, nil
}

// nsWorkloads are one namespace's audited workloads.
type nsWorkloads struct {
	rollouts    []*v1alpha1.Rollout
	deployments []*appsv1.Deployment
}

// auditNamespace audits one namespace's workloads against one snapshot of it: each
// workload's report, the namespace's gaps and, for a whole namespace, the opted-in objects
// nothing uses or owns.
func (a *Auditor) auditNamespace(ctx context.Context, rep *Report, ns string, wl *nsWorkloads, wholeNamespace bool) {
	sort.Slice(wl.rollouts, func(i, j int) bool { return wl.rollouts[i].Name < wl.rollouts[j].Name })
	sort.Slice(wl.deployments, func(i, j int) bool { return wl.deployments[i].Name < wl.deployments[j].Name })
	snap, err := a.readNamespace(ctx, ns)
	if err != nil {
		failed := func(kind, name string, uid types.UID) Workload {
			return Workload{Kind: kind, Namespace: ns, Name: name, UID: uid, Error: err.Error(), ReplicaSets: []ReplicaSet{}, Objects: []Object{}, Findings: []Finding{}}
		}
		for _, ro := range wl.rollouts {
			rep.Rollouts = append(rep.Rollouts, failed(plugin.KindRollout, ro.Name, ro.UID))
		}
		for _, d := range wl.deployments {
			rep.Deployments = append(rep.Deployments, failed(plugin.KindDeployment, d.Name, d.UID))
		}
		return
	}
	a.log().WithFields(logrus.Fields{"namespace": ns, "rollouts": len(wl.rollouts), "deployments": len(wl.deployments), "replicaSets": len(snap.replicaSets), "objects": len(snap.objects)}).Debug("auditing namespace")
	seen := map[plugin.Object]bool{}
	var gaps []plugin.GapReplicaSet
	auditOne := func(aw auditedWorkload, werr error) Workload {
		if werr == nil {
			gaps = append(gaps, gapsOf(aw, snap)...)
		}
		w := a.auditWorkload(aw, werr, snap, rep.additions)
		for _, o := range w.Objects {
			seen[o.Object()] = true
		}
		return w
	}
	listed := map[string]*appsv1.Deployment{}
	for _, d := range wl.deployments {
		listed[d.Name] = d
	}
	for _, ro := range wl.rollouts {
		aw, err := a.rolloutWorkload(ctx, ro, listed)
		rep.Rollouts = append(rep.Rollouts, auditOne(aw, err))
	}
	for _, d := range wl.deployments {
		rep.Deployments = append(rep.Deployments, auditOne(deploymentWorkload(d), nil))
	}
	// The controller mode's gauges, computed the same way (plugin.Gaps).
	u, l := plugin.Gaps(gaps, func(o plugin.Object) plugin.GapObject {
		m, ok := snap.objects[o]
		return plugin.GapObject{Exists: ok, OptedIn: ok && a.selector().Matches(labels.Set(m.labels)), ReplicaSetOwned: ok && plugin.HasReplicaSetOwner(m.owners)}
	})
	rep.Gaps = append(rep.Gaps, NamespaceGaps{Namespace: ns, UnownedObjects: u, LostReferences: l})
	if wholeNamespace {
		rep.Unattributed = append(rep.Unattributed, a.orphans(ns, snap, seen)...)
	}
}

// gapsOf is what plugin.Gaps needs of the workload's ReplicaSets.
func gapsOf(aw auditedWorkload, snap *snapshot) []plugin.GapReplicaSet {
	rss, err := plugin.OwnReplicaSets(snap.replicaSets, aw.w)
	if err != nil {
		return nil
	}
	var gaps []plugin.GapReplicaSet
	for _, rs := range rss {
		spec := &rs.Spec.Template.Spec
		gaps = append(gaps, plugin.GapReplicaSet{Live: plugin.Live(rs), Refs: plugin.ObjectsOf(plugin.TemplateReferences(spec)), Required: plugin.ObjectsOf(plugin.RequiredReferences(spec))})
	}
	return gaps
}

// orphans are the opted-in objects that no audited workload uses, names or owns, and that
// nothing owns at all: config of revisions whose ReplicaSets were deleted before anything
// attached it. An object with any owner is not one: the garbage collector deletes it with its
// last owner (a StatefulSet's or DaemonSet's revision, a Job, a Pod or an anchor, which the
// controller makes owners of the config their users take), so "delete it by hand" would be
// advice to delete what something may still use.
func (a *Auditor) orphans(ns string, snap *snapshot, seen map[plugin.Object]bool) []Finding {
	var out []Finding
	for o, m := range snap.objects {
		if seen[o] || !a.selector().Matches(labels.Set(m.labels)) || len(m.owners) > 0 {
			continue
		}
		out = append(out, Finding{Type: FindingUnowned, Namespace: ns, Kind: o.Kind, Name: o.Name, index: -1,
			Message: fmt.Sprintf("opted in (%s), but nothing owns it and no ReplicaSet of an audited workload in %s uses it: it will never be garbage-collected. If nothing uses it any more, delete it by hand",
				a.selector(), ns)})
	}
	sortFindings(out)
	return out
}
