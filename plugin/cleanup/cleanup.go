// Package cleanup removes the controller mode's anchors when the controller is uninstalled
// (`configmap-attacher cleanup`, the chart's pre-delete hook). An anchor's one owner is its
// Namespace, so nothing but the controller deletes it while the namespace lives: left behind,
// it would keep the config it owns for ever. Cleanup deletes exactly
// the ControllerRevisions plugin.IsAnchor and plugin.ParseAnchor call anchors, each with its
// UID and resourceVersion as preconditions, through one function (deleteAnchor).
//
// Safe by default: an anchor that is the last keeper of an object a live workload still uses
// (a CronJob's current config between its runs: no Job owns it yet) is not deleted, and then
// nothing is: the report names the objects, their users and what to do. -force deletes anyway.
package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Actions of an anchor in the report.
const (
	ActionDeleted     = "deleted"
	ActionWouldDelete = "would delete" // -dry-run, or nothing deleted because another anchor is needed
	ActionKept        = "kept"         // needed: the last keeper of an object a live workload uses
	ActionLeftAlone   = "left alone"   // labelled, but not readable as an anchor, or replaced meanwhile
	ActionGone        = "already gone"
	ActionChanged     = "changed" // re-created or relabelled since it was read: not deleted, run again
	ActionError       = "error"
)

// Cleaner is one cleanup run.
type Cleaner struct {
	Kube kubernetes.Interface
	// Meta reads the metadata of ConfigMaps and Secrets (never their data) and of owners.
	Meta metadata.Interface
	// Namespaces to clean (empty: every namespace).
	Namespaces []string
	// Force deletes needed anchors too; DryRun deletes nothing.
	Force, DryRun bool
	// Timeout is the deadline of each API call.
	Timeout time.Duration
	// StopNamespace/StopName name the controller's Deployment: scaled to 0 before the first
	// delete, so that a running controller does not create anchors again behind the cleanup
	// (the pre-delete hook runs while the release's Deployment still exists). Empty: not done.
	StopNamespace, StopName string
	// StopTimeout bounds the wait for the controller's pods to be gone.
	StopTimeout time.Duration
	// Poll is the interval of that wait (default 1 s).
	Poll time.Duration
}

// Need is an object that only anchors keep and that a live workload uses.
type Need struct {
	Kind  string   `json:"kind"`
	Name  string   `json:"name"`
	Users []string `json:"users"`
	// Command removes the anchor's owner reference from the object, so that it outlives the
	// anchor (and then lives until it is deleted by hand).
	Command string `json:"command"`
}

// AnchorResult is what happened to one anchor.
type AnchorResult struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Workload is "Kind/name"; WorkloadState "live", "gone" or "being deleted".
	Workload      string `json:"workload,omitempty"`
	WorkloadState string `json:"workloadState,omitempty"`
	Action        string `json:"action"`
	Reason        string `json:"reason,omitempty"`
	Needs         []Need `json:"needs,omitempty"`

	resourceVersion string
}

// Report is a run's result.
type Report struct {
	DryRun  bool           `json:"dryRun"`
	Force   bool           `json:"force"`
	Stopped string         `json:"stoppedController,omitempty"`
	Anchors []AnchorResult `json:"anchors"`
	// Note explains a run that deleted nothing on purpose.
	Note    string         `json:"note,omitempty"`
	Summary map[string]int `json:"summary"`
}

// Failed reports whether an anchor is left that the run was asked to delete: kept (needed),
// changed meanwhile, or an error.
func (r *Report) Failed() bool {
	for _, a := range r.Anchors {
		if a.Action == ActionKept || a.Action == ActionError || a.Action == ActionChanged || (a.Action == ActionWouldDelete && !r.DryRun) {
			return true
		}
	}
	return r.Note != "" && !r.DryRun
}

func (r *Report) summarize() {
	r.Summary = map[string]int{}
	for _, a := range r.Anchors {
		r.Summary[a.Action]++
	}
}

// Run plans, stops the controller when asked, plans again and deletes. While any anchor is
// needed (and not -force) it deletes nothing: the controller keeps running and the
// report says what to do. An error that stops the run is returned with the report so far.
func (c *Cleaner) Run(ctx context.Context) (*Report, error) {
	rep := &Report{DryRun: c.DryRun, Force: c.Force}
	defer rep.summarize()
	plan, err := c.plan(ctx)
	rep.Anchors = plan
	if err != nil {
		return rep, err
	}
	if c.DryRun {
		return rep, nil
	}
	if needed(plan) && !c.Force {
		c.holdBack(rep)
		return rep, nil
	}
	if c.StopName != "" {
		if err := c.stopController(ctx); err != nil {
			return rep, err
		}
		rep.Stopped = c.StopNamespace + "/" + c.StopName
		// The controller may have created or deleted anchors until it stopped.
		if plan, err = c.plan(ctx); err != nil {
			rep.Anchors = plan
			return rep, err
		}
		rep.Anchors = plan
		if needed(plan) && !c.Force {
			c.holdBack(rep)
			return rep, nil
		}
	}
	for i := range rep.Anchors {
		a := &rep.Anchors[i]
		if a.Action != ActionWouldDelete && (a.Action != ActionKept || !c.Force) {
			continue
		}
		a.Action, a.Reason = c.deleteAnchor(ctx, a.Namespace, a.Name, a.UID, a.resourceVersion, a.Reason)
	}
	return rep, nil
}

func needed(plan []AnchorResult) bool {
	return slices.ContainsFunc(plan, func(a AnchorResult) bool { return a.Action == ActionKept })
}

// holdBack is the refusal: nothing is deleted while an anchor is needed, so that a failed
// uninstall leaves the controller and every anchor as they were.
func (c *Cleaner) holdBack(rep *Report) {
	rep.Note = "nothing was deleted: the anchors marked kept are the last keepers of objects live workloads use. " +
		"Remove their owner references as shown (the objects then live until deleted by hand), or stop using them, " +
		"and run cleanup again; or run it with -force (chart: cleanup.force=true) and the garbage collector deletes them"
}

// deleteAnchor is the one delete of cleanup: an anchor, by name, only while it is the object
// that was read (UID and resourceVersion preconditions: a re-created object, or one whose
// labels changed since, is left alone).
func (c *Cleaner) deleteAnchor(ctx context.Context, ns, name string, uid types.UID, rv, reason string) (action, why string) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	pre := metav1.Preconditions{UID: &uid}
	if rv != "" {
		pre.ResourceVersion = &rv
	}
	err := c.Kube.AppsV1().ControllerRevisions(ns).Delete(rctx, name, metav1.DeleteOptions{Preconditions: &pre})
	switch {
	case err == nil:
		return ActionDeleted, reason
	case apierrors.IsNotFound(err):
		return ActionGone, "deleted meanwhile"
	case apierrors.IsConflict(err):
		return ActionChanged, "changed or replaced since it was read (UID or resourceVersion precondition): run cleanup again"
	}
	return ActionError, fmt.Errorf("deleting ControllerRevision %s/%s: %w", ns, name, err).Error()
}

func (c *Cleaner) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return plugin.DefaultRequestTimeout
}

// stopController scales the controller's Deployment to 0 and waits until it has no pod left
// (a missing Deployment is stopped).
func (c *Cleaner) stopController(ctx context.Context) error {
	deps := c.Kube.AppsV1().Deployments(c.StopNamespace)
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	_, err := deps.Patch(rctx, c.StopName, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}, "scale")
	cancel()
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("scaling the controller's Deployment %s/%s to 0: %w", c.StopNamespace, c.StopName, err)
	}
	poll := c.Poll
	if poll <= 0 {
		poll = time.Second
	}
	deadline := time.Now().Add(c.StopTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		d, err := deps.Get(rctx, c.StopName, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading the controller's Deployment %s/%s: %w", c.StopNamespace, c.StopName, err)
		case d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == 0 &&
			(d.Status.TerminatingReplicas == nil || *d.Status.TerminatingReplicas == 0):
			// Replicas counts no terminating pod; where the apiserver reports them
			// (DeploymentReplicaSetTerminatingReplicas), those are waited for too.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller's Deployment %s/%s still has %d pod(s) after %v: not deleting anchors it could create again", c.StopNamespace, c.StopName, d.Status.Replicas, c.StopTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the controller to stop: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// anchorItem is a listed anchor with what it stands for.
type anchorItem struct {
	cr     *appsv1.ControllerRevision
	anchor plugin.Anchor
}

// workloadState is what is known of an anchor's workload.
type workloadState struct {
	state string // live, gone, being deleted
	// uses: the live workload's current template references the object (nil: kind whose
	// template is not read; every object of the anchor counts as used).
	uses func(plugin.Object) bool
}

// plan lists the anchors and decides each: would delete, kept (needed) or left alone.
func (c *Cleaner) plan(ctx context.Context) ([]AnchorResult, error) {
	byNS := map[string][]anchorItem{}
	var out []AnchorResult
	namespaces := c.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		crs, err := c.listAnchors(ctx, ns)
		if err != nil {
			return out, err
		}
		for i := range crs {
			cr := &crs[i]
			res := AnchorResult{Namespace: cr.Namespace, Name: cr.Name, UID: cr.UID, resourceVersion: cr.ResourceVersion}
			a, ok := plugin.ParseAnchor(cr)
			switch {
			case !plugin.IsAnchor(cr) || !ok:
				res.Action, res.Reason = ActionLeftAlone, "labelled "+plugin.AnchorLabel+" but not readable as an anchor of this version"
				out = append(out, res)
				continue
			case cr.DeletionTimestamp != nil:
				res.Action, res.Reason = ActionGone, "being deleted"
				out = append(out, res)
				continue
			}
			byNS[cr.Namespace] = append(byNS[cr.Namespace], anchorItem{cr: cr, anchor: a})
		}
	}
	nss := make([]string, 0, len(byNS))
	for ns := range byNS {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		res, err := c.planNamespace(ctx, ns, byNS[ns])
		out = append(out, res...)
		if err != nil {
			return out, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// listAnchors lists the ControllerRevisions labelled as anchors in ns (all: ""), page by page.
func (c *Cleaner) listAnchors(ctx context.Context, ns string) ([]appsv1.ControllerRevision, error) {
	var items []appsv1.ControllerRevision
	opts := metav1.ListOptions{LabelSelector: plugin.AnchorLabel + "=true", Limit: 500}
	for {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		l, err := c.Kube.AppsV1().ControllerRevisions(ns).List(rctx, opts)
		cancel()
		if err != nil {
			where := "every namespace"
			if ns != "" {
				where = "namespace " + ns
			}
			return nil, fmt.Errorf("listing the anchors (ControllerRevisions labelled %s) in %s: %w", plugin.AnchorLabel, where, err)
		}
		items = append(items, l.Items...)
		if l.Continue == "" {
			return items, nil
		}
		opts.Continue = l.Continue
	}
}

// planNamespace decides the anchors of one namespace. An anchor is needed when, once every
// anchor is gone, an object it owns would have no live owner while its workload is live and
// uses it: the garbage collector would delete config in use.
func (c *Cleaner) planNamespace(ctx context.Context, ns string, items []anchorItem) ([]AnchorResult, error) {
	anchorUIDs := map[types.UID]bool{}
	for _, it := range items {
		anchorUIDs[it.cr.UID] = true
	}
	workloads := map[string]workloadState{}
	objects := map[plugin.Object]*metav1.PartialObjectMetadata{}
	liveOwner := map[types.UID]bool{}
	var out []AnchorResult
	for _, it := range items {
		a := it.anchor
		ws, ok := workloads[a.Workload()]
		if !ok {
			var err error
			if ws, err = c.workload(ctx, ns, a.Kind, a.Name); err != nil {
				return out, err
			}
			workloads[a.Workload()] = ws
		}
		res := AnchorResult{Namespace: ns, Name: it.cr.Name, UID: it.cr.UID, resourceVersion: it.cr.ResourceVersion,
			Workload: a.Workload(), WorkloadState: ws.state, Action: ActionWouldDelete}
		if ws.state != "live" {
			res.Reason = "its workload is " + ws.state
			out = append(out, res)
			continue
		}
		res.Reason = "its workload is live, and no object it uses is left without another live owner"
		for _, o := range a.Refs {
			if ws.uses != nil && !ws.uses(o) {
				continue // the workload moved on: its current template does not use o
			}
			m, ok := objects[o]
			if !ok {
				var err error
				if m, err = c.object(ctx, ns, o); err != nil {
					return out, err
				}
				objects[o] = m
			}
			if m == nil || m.DeletionTimestamp != nil {
				continue
			}
			idx := slices.IndexFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == it.cr.UID })
			if idx < 0 {
				continue // not an owner of it: deleting the anchor changes nothing for o
			}
			kept := false
			for _, ref := range m.OwnerReferences {
				if anchorUIDs[ref.UID] {
					continue
				}
				live, ok := liveOwner[ref.UID]
				if !ok {
					var err error
					if live, err = c.ownerLive(ctx, ns, ref); err != nil {
						return out, err
					}
					liveOwner[ref.UID] = live
				}
				if live {
					kept = true
					break
				}
			}
			if kept {
				continue
			}
			res.Needs = append(res.Needs, Need{Kind: string(o.Kind), Name: o.Name, Users: usersOf(items, workloads, o, m),
				Command: removeRefCommand(ns, o, idx, it.cr.UID)})
		}
		if len(res.Needs) > 0 {
			res.Action = ActionKept
			res.Reason = "the last keeper of objects its live workload uses"
		}
		out = append(out, res)
	}
	return out, nil
}

// usersOf names the live workloads among the anchors owning o whose templates use it.
func usersOf(items []anchorItem, workloads map[string]workloadState, o plugin.Object, m *metav1.PartialObjectMetadata) []string {
	var users []string
	for _, it := range items {
		ws := workloads[it.anchor.Workload()]
		if ws.state != "live" || !it.anchor.Uses(o) || (ws.uses != nil && !ws.uses(o)) {
			continue
		}
		if !slices.ContainsFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == it.cr.UID }) {
			continue
		}
		if w := it.anchor.Workload(); !slices.Contains(users, w) {
			users = append(users, w)
		}
	}
	sort.Strings(users)
	return users
}

// removeRefCommand is the kubectl command that removes owner reference idx (the anchor's) from
// o, guarded by a test of its UID.
func removeRefCommand(ns string, o plugin.Object, idx int, uid types.UID) string {
	return fmt.Sprintf(`kubectl patch %s %s -n %s --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/%d/uid","value":"%s"},{"op":"remove","path":"/metadata/ownerReferences/%d"}]'`,
		strings.ToLower(string(o.Kind)), o.Name, ns, idx, uid, idx)
}

// object reads o's metadata (nil: it does not exist).
func (c *Cleaner) object(ctx context.Context, ns string, o plugin.Object) (*metav1.PartialObjectMetadata, error) {
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	if o.Kind == plugin.KindSecret {
		gvr = corev1.SchemeGroupVersion.WithResource("secrets")
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	m, err := c.Meta.Resource(gvr).Namespace(ns).Get(rctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s in namespace %s (its owners): %w", o, ns, err)
	}
	return m, nil
}

// ownerResources are the owner kinds whose existence cleanup checks. An owner of another kind
// is not counted as live: the anchor stays the keeper (safe by default).
var ownerResources = map[schema.GroupKind]string{
	{Group: "apps", Kind: "ReplicaSet"}:              "replicasets",
	{Group: "apps", Kind: "ControllerRevision"}:      "controllerrevisions",
	{Group: "apps", Kind: "Deployment"}:              "deployments",
	{Group: "apps", Kind: "StatefulSet"}:             "statefulsets",
	{Group: "apps", Kind: "DaemonSet"}:               "daemonsets",
	{Group: "batch", Kind: "Job"}:                    "jobs",
	{Group: "batch", Kind: "CronJob"}:                "cronjobs",
	{Group: "", Kind: "Pod"}:                         "pods",
	{Group: "argoproj.io", Kind: plugin.KindRollout}: "rollouts",
	{Group: "argoproj.io", Kind: "Experiment"}:       "experiments",
}

// ownerLive reports whether the owner ref names exists with its UID and is not being deleted.
func (c *Cleaner) ownerLive(ctx context.Context, ns string, ref metav1.OwnerReference) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, nil
	}
	res, ok := ownerResources[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}]
	if !ok {
		return false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	m, err := c.Meta.Resource(gv.WithResource(res)).Namespace(ns).Get(rctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading owner %s %s in namespace %s: %w", ref.Kind, ref.Name, ns, err)
	}
	return m.UID == ref.UID && m.DeletionTimestamp == nil, nil
}

// workload reads an anchor's workload: whether it is live and, for the kinds whose template is
// read here, which objects its current template uses.
func (c *Cleaner) workload(ctx context.Context, ns, kind, name string) (workloadState, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	var meta metav1.Object
	var spec *corev1.PodSpec
	var err error
	switch kind {
	case plugin.KindDeployment:
		var d *appsv1.Deployment
		if d, err = c.Kube.AppsV1().Deployments(ns).Get(rctx, name, metav1.GetOptions{}); err == nil {
			meta, spec = d, &d.Spec.Template.Spec
		}
	case "StatefulSet":
		var s *appsv1.StatefulSet
		if s, err = c.Kube.AppsV1().StatefulSets(ns).Get(rctx, name, metav1.GetOptions{}); err == nil {
			meta, spec = s, &s.Spec.Template.Spec
		}
	case "DaemonSet":
		var s *appsv1.DaemonSet
		if s, err = c.Kube.AppsV1().DaemonSets(ns).Get(rctx, name, metav1.GetOptions{}); err == nil {
			meta, spec = s, &s.Spec.Template.Spec
		}
	case "CronJob":
		var j *batchv1.CronJob
		if j, err = c.Kube.BatchV1().CronJobs(ns).Get(rctx, name, metav1.GetOptions{}); err == nil {
			meta, spec = j, &j.Spec.JobTemplate.Spec.Template.Spec
		}
	default:
		// A Rollout (its template may live in a Deployment it refers to) or a kind this version
		// does not know: its existence only, and every object of the anchor counts as used.
		gvr := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}
		if kind != plugin.KindRollout {
			return workloadState{state: "live"}, nil
		}
		var m *metav1.PartialObjectMetadata
		if m, err = c.Meta.Resource(gvr).Namespace(ns).Get(rctx, name, metav1.GetOptions{}); err == nil {
			meta = m
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return workloadState{state: "gone"}, nil
	case err != nil:
		return workloadState{}, fmt.Errorf("reading the anchor's workload %s/%s in namespace %s: %w", kind, name, ns, err)
	case meta.GetDeletionTimestamp() != nil:
		return workloadState{state: "being deleted"}, nil
	}
	ws := workloadState{state: "live"}
	if spec != nil {
		refs := plugin.TemplateReferences(spec)
		ws.uses = refs.Has
	}
	return ws, nil
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// WriteText writes one line per anchor, the needs of kept ones with their commands, the note
// and a summary.
func (r *Report) WriteText(w io.Writer) {
	if r.Stopped != "" {
		fmt.Fprintf(w, "stopped the controller: Deployment %s scaled to 0\n", r.Stopped)
	}
	if len(r.Anchors) == 0 {
		fmt.Fprintln(w, "no anchors (ControllerRevisions labelled "+plugin.AnchorLabel+"=true)")
	}
	for _, a := range r.Anchors {
		what := a.Workload
		if a.WorkloadState != "" {
			what += ", " + a.WorkloadState
		}
		if what != "" {
			what = " (" + what + ")"
		}
		reason := ""
		if a.Reason != "" {
			reason = ": " + a.Reason
		}
		fmt.Fprintf(w, "%-12s anchor %s/%s%s%s\n", strings.ToUpper(a.Action), a.Namespace, a.Name, what, reason)
		for _, n := range a.Needs {
			fmt.Fprintf(w, "             %s %s is used by %s and no other live owner keeps it\n", n.Kind, n.Name, strings.Join(n.Users, ", "))
			fmt.Fprintf(w, "             to keep it after the uninstall: $ %s\n", n.Command)
		}
	}
	if r.Note != "" {
		fmt.Fprintln(w, r.Note)
	}
	var parts []string
	for _, k := range []string{ActionDeleted, ActionWouldDelete, ActionKept, ActionLeftAlone, ActionGone, ActionChanged, ActionError} {
		if n := r.Summary[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		parts = []string{"nothing to do"}
	}
	fmt.Fprintf(w, "anchors: %s\n", strings.Join(parts, ", "))
}
