package audit

import (
	"context"
	"fmt"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/newrs"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	deploymentutil "k8s.io/kubernetes/pkg/controller/deployment/util"
)

// auditedWorkload is what audit needs of a Rollout or a Deployment.
type auditedWorkload struct {
	w plugin.Workload
	// current finds the ReplicaSet shown as current among the workload's ReplicaSets.
	current func([]*appsv1.ReplicaSet) *appsv1.ReplicaSet
	// named and stepSels are the objects named in, and the discover selectors of, the
	// workload's configmap-attacher steps (Rollouts only).
	named    map[plugin.Object]bool
	stepSels []labels.Selector
}

// rolloutWorkload describes a Rollout for audit, its spec.workloadRef resolved by the core
// (plugin.ResolveWorkloadRef). Its "current" ReplicaSet is the controller's new one, or for a
// Rollout whose template matches none (the controller has not created it yet) the one
// status.currentPodHash names. A workloadRef's Deployment comes from listed (the namespace's
// Deployments, when audit lists them) before it costs a request.
func (a *Auditor) rolloutWorkload(ctx context.Context, ro *v1alpha1.Rollout, listed map[string]*appsv1.Deployment) (auditedWorkload, error) {
	named, stepSels := stepObjects(ro)
	aw := auditedWorkload{w: plugin.Workload{Kind: plugin.KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector},
		named: named, stepSels: stepSels}
	get := func(ctx context.Context, ns, name string) (*appsv1.Deployment, error) {
		if d, ok := listed[name]; ok {
			return d, nil
		}
		return a.getDeployment(ctx, ns, name)
	}
	res, err := plugin.ResolveWorkloadRef(ctx, get, ro)
	if apierrors.IsNotFound(err) {
		return aw, &plugin.FailError{Msg: fmt.Sprintf("Deployment %s/%s named by spec.workloadRef of Rollout %s does not exist", ro.Namespace, ro.Spec.WorkloadRef.Name, ro.Name)}
	}
	if err != nil {
		return aw, err
	}
	aw.w = res.Workload
	aw.current = func(rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
		if rs := newrs.OfRollout(res.Rollout, rss); rs != nil {
			return rs
		}
		return plugin.ByPodHash(rss, ro.Status.CurrentPodHash)
	}
	return aw, nil
}

// deploymentWorkload describes a Deployment for audit: its current ReplicaSet is the one the
// Deployment controller calls new (its own FindNewReplicaSet: template equality).
func deploymentWorkload(d *appsv1.Deployment) auditedWorkload {
	return auditedWorkload{w: plugin.Workload{Kind: plugin.KindDeployment, Namespace: d.Namespace, Name: d.Name, UID: d.UID, Selector: d.Spec.Selector},
		named: map[plugin.Object]bool{},
		current: func(rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
			return deploymentutil.FindNewReplicaSet(d, rss)
		}}
}

// stepObjects returns the objects named in the Rollout's configmap-attacher steps, and the
// discover selectors of those steps. Configs that do not parse are ignored (the step itself
// reports them).
func stepObjects(ro *v1alpha1.Rollout) (map[plugin.Object]bool, []labels.Selector) {
	named := map[plugin.Object]bool{}
	var sels []labels.Selector
	if ro.Spec.Strategy.Canary == nil {
		return named, nil
	}
	for _, st := range ro.Spec.Strategy.Canary.Steps {
		if st.Plugin == nil || !strings.Contains(st.Plugin.Name, "configmap-attacher") {
			continue
		}
		cfg, err := plugin.ParseConfig(st.Plugin.Config)
		if err != nil {
			continue
		}
		for _, o := range cfg.Objects() {
			named[o] = true
		}
		if cfg.Discover != nil {
			if s, err := cfg.Discover.LabelSelector(); err == nil && !s.Empty() {
				sels = append(sels, s)
			}
		}
	}
	return named, sels
}

// auditWorkload is one workload's report: collect its ReplicaSets and the objects that
// concern it, classify each object under each ReplicaSet, write the findings, queue what
// Fix adds, and build the per-ReplicaSet view.
func (a *Auditor) auditWorkload(aw auditedWorkload, werr error, snap *snapshot, additions map[string]map[plugin.Object]*plugin.Candidate) Workload {
	ns := aw.w.Namespace
	out := Workload{Kind: aw.w.Kind, Namespace: ns, Name: aw.w.Name, UID: aw.w.UID, ReplicaSets: []ReplicaSet{}, Objects: []Object{}, Findings: []Finding{}}
	if werr != nil {
		out.Error = werr.Error()
		return out
	}
	h, err := collect(aw, snap)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	edges := map[plugin.Object]map[types.UID]Edge{}
	for _, o := range h.objects {
		c := a.classify(o, aw, h, snap)
		edges[o] = c.edges
		queueFix(additions, ns, c)
		out.Objects = append(out.Objects, c.view)
		out.Findings = append(out.Findings, a.findings(c, aw, h)...)
	}
	sortFindings(out.Findings)
	out.ReplicaSets = h.views(edges)
	return out
}
