package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	deploymentutil "k8s.io/kubernetes/pkg/controller/deployment/util"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// RevisionAnnotation is the revision number Argo Rollouts writes on each ReplicaSet.
const RevisionAnnotation = "rollout.argoproj.io/revision"

// DeploymentRevisionAnnotation is the Deployment controller's.
const DeploymentRevisionAnnotation = "deployment.kubernetes.io/revision"

// Finding types of the audit.
const (
	// FindingLost: a ReplicaSet in history references an object that does not exist.
	FindingLost = "lost"
	// FindingUnowned: an opted-in or step-named object that no ReplicaSet owns.
	FindingUnowned = "unowned"
	// FindingStray: an owner reference to a ReplicaSet of the Rollout that does not use the object.
	FindingStray = "stray"
	// FindingLegacy: the original tool's controller: true owner reference to a ReplicaSet.
	FindingLegacy = "legacy"
)

// Status of one object under one ReplicaSet in the audit.
const (
	EdgeOwned          = "owned"
	EdgeMissingOwner   = "missingOwner"
	EdgeLost           = "lost"
	EdgeAbsentOptional = "absentOptional"
	EdgeNotOptedIn     = "notOptedIn"
)

// AuditReport is what `configmap-attacher audit` found (and, with -fix, changed: the command
// line then reports the state read again after the fix). Its JSON form is the -o json output;
// every list is present (possibly empty) and sorted.
type AuditReport struct {
	Selector string         `json:"selector"`
	Rollouts []RolloutAudit `json:"rollouts"`
	// Deployments are the audited Deployments (-workloads deployments, the default).
	Deployments []RolloutAudit `json:"deployments"`
	// Gaps are, per namespace, the two figures the controller mode exports as gauges
	// (configmap_attacher_controller_unowned_objects and _lost_references), counted by the
	// same function (plugin.Gaps).
	Gaps []NamespaceGaps `json:"gaps"`
	// Unattributed holds findings about opted-in objects that no audited Rollout uses,
	// names or owns (only when whole namespaces are audited).
	Unattributed []Finding   `json:"unattributed"`
	Summary      AuditCounts `json:"summary"`
	// Fix is set with -fix.
	Fix *AuditFix `json:"fix,omitempty"`

	// additions are what -fix adds, per namespace and object.
	additions map[string]map[Object]*Candidate
}

// NamespaceGaps is one namespace's unowned objects and lost references (see Gaps).
type NamespaceGaps struct {
	Namespace      string `json:"namespace"`
	UnownedObjects int    `json:"unownedObjects"`
	LostReferences int    `json:"lostReferences"`
}

// AuditCounts counts the findings, and the owner references -fix adds (fixable) or may not
// add (the object is not opted in).
type AuditCounts struct {
	Lost          int `json:"lost"`
	Unowned       int `json:"unowned"`
	Stray         int `json:"stray"`
	Legacy        int `json:"legacy"`
	MissingOwners int `json:"missingOwners"`
	Fixable       int `json:"fixable"`
	Errors        int `json:"errors"`
}

// AuditFix is what -fix changed.
type AuditFix struct {
	// Added lists each patched object with the ReplicaSets added as its owners.
	Added []AuditAddition `json:"added"`
	// Errors are the objects -fix could not patch, one message per namespace.
	Errors []string `json:"errors"`
}

// AuditAddition is one object -fix patched.
type AuditAddition struct {
	Namespace   string   `json:"namespace"`
	Kind        Kind     `json:"kind"`
	Name        string   `json:"name"`
	ReplicaSets []string `json:"replicaSets"`
}

// RolloutAudit is one workload (a Rollout, or a Deployment): its ReplicaSets, the objects they
// use, and the findings.
type RolloutAudit struct {
	// Kind is Rollout or Deployment.
	Kind        string         `json:"kind"`
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	UID         types.UID      `json:"uid"`
	Error       string         `json:"error,omitempty"`
	ReplicaSets []ReplicaAudit `json:"replicaSets"`
	Objects     []ObjectAudit  `json:"objects"`
	Findings    []Finding      `json:"findings"`
}

// ReplicaAudit is one ReplicaSet of the Rollout and the objects its pod template references.
type ReplicaAudit struct {
	Name     string      `json:"name"`
	UID      types.UID   `json:"uid"`
	Revision string      `json:"revision,omitempty"`
	Current  bool        `json:"current"`
	Deleting bool        `json:"deleting"`
	Objects  []EdgeAudit `json:"objects"`
}

// EdgeAudit is one object a ReplicaSet references, with Status one of owned, missingOwner,
// lost, absentOptional or notOptedIn. Fixable marks a missing owner that -fix adds.
type EdgeAudit struct {
	Kind    Kind   `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Fixable bool   `json:"fixable,omitempty"`
}

// ObjectAudit is one object that concerns the Rollout: referenced by one of its ReplicaSets,
// named in one of its configmap-attacher steps, or owned by one of its ReplicaSets.
type ObjectAudit struct {
	Kind        Kind   `json:"kind"`
	Name        string `json:"name"`
	Exists      bool   `json:"exists"`
	OptedIn     bool   `json:"optedIn"`
	NamedInStep bool   `json:"namedInStep"`
	// UsedBy are the Rollout's ReplicaSets whose pod template references the object.
	UsedBy []string `json:"usedBy"`
	// Owners is metadata.ownerReferences, in order (Index is the position in that list).
	Owners []OwnerAudit `json:"owners"`
	// MissingOwners are the ReplicaSets in UsedBy that do not own the object.
	MissingOwners []string `json:"missingOwners"`
	// Fixable: -fix adds MissingOwners (the object is opted in or named in a step).
	Fixable bool `json:"fixable"`
}

// OwnerAudit is one owner reference of an object.
type OwnerAudit struct {
	Index      int       `json:"index"`
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Controller bool      `json:"controller"`
}

// Finding is one problem. Command, when set, is the exact command that repairs it by hand
// (audit never removes anything itself).
type Finding struct {
	Type       string `json:"type"`
	Namespace  string `json:"namespace"`
	Kind       Kind   `json:"kind"`
	Name       string `json:"name"`
	ReplicaSet string `json:"replicaSet,omitempty"`
	Message    string `json:"message"`
	Command    string `json:"command,omitempty"`
	// index is the owner reference's position (stray, legacy), -1 otherwise.
	index int
}

// Auditor reads Rollouts, their ReplicaSets and the namespace's ConfigMaps and Secrets, and
// reports what is lost, unowned, stray or legacy. Reads: one list (or get) of Rollouts, then
// per namespace one list each of ReplicaSets, ConfigMaps and Secrets (plus one get of the
// Deployment per workloadRef Rollout without a selector).
type Auditor struct {
	Kube     kubernetes.Interface
	Rollouts rolloutsclient.Interface
	// Metadata, when set, lists ConfigMaps and Secrets as metadata only: their data never
	// leaves the apiserver. Without it the typed client lists them, and the data is dropped.
	Metadata metadata.Interface
	// Selector opts objects in (default configmap-attacher/revisioned=true).
	Selector labels.Selector
	Log      logrus.FieldLogger
	// Workloads are the kinds audited, KindRollout and KindDeployment (empty: both).
	// WorkloadsExplicit says they were named: then a missing Rollout CRD is an error.
	Workloads         []string
	WorkloadsExplicit bool
}

func (a *Auditor) selector() labels.Selector {
	if a.Selector == nil {
		return labels.SelectorFromSet(labels.Set{DefaultDiscoverLabel: "true"})
	}
	return a.Selector
}

func (a *Auditor) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

func (a *Auditor) attacher() *Attacher {
	return &Attacher{Client: a.Kube, Meta: a.Metadata, Log: a.log(), RBACHint: JobRBACHint}
}

// objMeta is what audit keeps of a ConfigMap or Secret: never its data.
type objMeta struct {
	uid    types.UID
	labels map[string]string
	owners []metav1.OwnerReference
}

type nsSnapshot struct {
	replicaSets []appsv1.ReplicaSet
	objects     map[Object]objMeta
}

// Audit audits one Rollout (name set), every Rollout of a namespace, or, with namespace
// "", every Rollout of the cluster. A problem with one namespace or Rollout is recorded in
// the report (RolloutAudit.Error); only a failure to read the Rollouts is returned.
func (a *Auditor) Audit(ctx context.Context, namespace, name string) (*AuditReport, error) {
	rep := &AuditReport{Selector: a.selector().String(), Rollouts: []RolloutAudit{}, Deployments: []RolloutAudit{}, Gaps: []NamespaceGaps{}, Unattributed: []Finding{},
		additions: map[string]map[Object]*Candidate{}}
	var ros []v1alpha1.Rollout
	var ds []appsv1.Deployment
	if a.audits(KindRollout) {
		err := a.retry(ctx, "rollouts.argoproj.io", namespace, func(ctx context.Context) error {
			if name != "" {
				ro, err := a.Rollouts.ArgoprojV1alpha1().Rollouts(namespace).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					ros = []v1alpha1.Rollout{*ro}
				}
				return err
			}
			l, err := a.Rollouts.ArgoprojV1alpha1().Rollouts(namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				ros = l.Items
			}
			return err
		})
		switch {
		case apierrors.IsNotFound(err) && name != "":
			return nil, &FailError{fmt.Sprintf("Rollout %s/%s not found", namespace, name)}
		case apierrors.IsNotFound(err) && !a.WorkloadsExplicit:
			// The Rollout CRD is not installed: audit the Deployments.
			a.log().Warn("the Rollout CRD (rollouts.argoproj.io) is not installed: auditing Deployments only")
		case apierrors.IsNotFound(err):
			return nil, &FailError{"-workloads names rollouts, but the Rollout CRD (rollouts.argoproj.io) is not installed: install Argo Rollouts, or use -workloads deployments"}
		case err != nil:
			return nil, err
		}
	}
	if a.audits(KindDeployment) && name == "" {
		err := a.retry(ctx, "deployments.apps", namespace, func(ctx context.Context) error {
			l, err := a.Kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				ds = l.Items
			}
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
	for _, list := range [][]RolloutAudit{rep.Rollouts, rep.Deployments} {
		for _, ra := range list {
			rep.count(ra.Findings)
			if ra.Error != "" {
				rep.Summary.Errors++
			}
			for _, o := range ra.Objects {
				rep.Summary.MissingOwners += len(o.MissingOwners)
				if o.Fixable {
					rep.Summary.Fixable += len(o.MissingOwners)
				}
			}
		}
	}
	rep.count(rep.Unattributed)
	return rep, nil
}

// nsWorkloads are one namespace's audited workloads.
type nsWorkloads struct {
	rollouts    []*v1alpha1.Rollout
	deployments []*appsv1.Deployment
}

// audits reports whether the workload kind is audited (default: both).
func (a *Auditor) audits(kind string) bool {
	if len(a.Workloads) == 0 {
		return true
	}
	return slices.Contains(a.Workloads, kind)
}

func (r *AuditReport) count(fs []Finding) {
	for _, f := range fs {
		switch f.Type {
		case FindingLost:
			r.Summary.Lost++
		case FindingUnowned:
			r.Summary.Unowned++
		case FindingStray:
			r.Summary.Stray++
		case FindingLegacy:
			r.Summary.Legacy++
		}
	}
}

// ExitCode is 1 when an object is lost or something could not be audited or fixed, else 0.
func (r *AuditReport) ExitCode() int {
	if r.Summary.Lost > 0 || r.Summary.Errors > 0 || (r.Fix != nil && len(r.Fix.Errors) > 0) {
		return ExitFail
	}
	return ExitOK
}

func (a *Auditor) auditNamespace(ctx context.Context, rep *AuditReport, ns string, wl *nsWorkloads, wholeNamespace bool) {
	sort.Slice(wl.rollouts, func(i, j int) bool { return wl.rollouts[i].Name < wl.rollouts[j].Name })
	sort.Slice(wl.deployments, func(i, j int) bool { return wl.deployments[i].Name < wl.deployments[j].Name })
	snap, err := a.readNamespace(ctx, ns)
	if err != nil {
		failed := func(kind, name string, uid types.UID) RolloutAudit {
			return RolloutAudit{Kind: kind, Namespace: ns, Name: name, UID: uid, Error: err.Error(), ReplicaSets: []ReplicaAudit{}, Objects: []ObjectAudit{}, Findings: []Finding{}}
		}
		for _, ro := range wl.rollouts {
			rep.Rollouts = append(rep.Rollouts, failed(KindRollout, ro.Name, ro.UID))
		}
		for _, d := range wl.deployments {
			rep.Deployments = append(rep.Deployments, failed(KindDeployment, d.Name, d.UID))
		}
		return
	}
	seen := map[Object]bool{}
	a.log().WithFields(logrus.Fields{"namespace": ns, "rollouts": len(wl.rollouts), "deployments": len(wl.deployments), "replicaSets": len(snap.replicaSets), "objects": len(snap.objects)}).Debug("auditing namespace")
	var gaps []GapReplicaSet
	gapsOf := func(aw auditedWorkload) {
		rss, err := snap.controlled(aw.w)
		if err != nil {
			return
		}
		for _, rs := range rss {
			spec := &rs.Spec.Template.Spec
			gaps = append(gaps, GapReplicaSet{Live: Live(rs), Refs: ObjectsOf(TemplateReferences(spec)), Required: ObjectsOf(RequiredReferences(spec))})
		}
	}
	for _, ro := range wl.rollouts {
		aw, err := a.rolloutWorkload(ctx, ro)
		if err == nil {
			gapsOf(aw)
		}
		ra := a.auditWorkload(aw, err, snap, rep.additions)
		for _, o := range ra.Objects {
			seen[o.Object()] = true
		}
		rep.Rollouts = append(rep.Rollouts, ra)
	}
	for _, d := range wl.deployments {
		gapsOf(deploymentWorkload(d))
		ra := a.auditWorkload(deploymentWorkload(d), nil, snap, rep.additions)
		for _, o := range ra.Objects {
			seen[o.Object()] = true
		}
		rep.Deployments = append(rep.Deployments, ra)
	}
	// The controller mode's gauges, computed the same way (plugin.Gaps).
	u, l := Gaps(gaps, func(o Object) GapObject {
		m, ok := snap.objects[o]
		return GapObject{Exists: ok, OptedIn: ok && a.selector().Matches(labels.Set(m.labels)), ReplicaSetOwned: ok && hasReplicaSetOwner(m.owners)}
	})
	rep.Gaps = append(rep.Gaps, NamespaceGaps{Namespace: ns, UnownedObjects: u, LostReferences: l})
	if !wholeNamespace {
		return
	}
	// Opted-in objects that no Rollout uses, names or owns, and no ReplicaSet owns at all:
	// config of revisions whose ReplicaSets were deleted before anything attached it.
	var orphans []Finding
	for o, m := range snap.objects {
		if seen[o] || !a.selector().Matches(labels.Set(m.labels)) || hasReplicaSetOwner(m.owners) {
			continue
		}
		orphans = append(orphans, Finding{Type: FindingUnowned, Namespace: ns, Kind: o.Kind, Name: o.Name, index: -1,
			Message: fmt.Sprintf("opted in (%s), but no ReplicaSet owns it and no ReplicaSet of an audited workload in %s uses it: it will never be garbage-collected. If nothing uses it any more, delete it by hand%s",
				a.selector(), ns, otherOwners(m.owners))})
	}
	sortFindings(orphans)
	rep.Unattributed = append(rep.Unattributed, orphans...)
}

func (a *Auditor) readNamespace(ctx context.Context, ns string) (*nsSnapshot, error) {
	snap := &nsSnapshot{objects: map[Object]objMeta{}}
	err := a.retry(ctx, "replicasets.apps", ns, func(ctx context.Context) error {
		l, err := a.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			snap.replicaSets = l.Items
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, kind := range []Kind{KindConfigMap, KindSecret} {
		resource := "configmaps"
		if kind == KindSecret {
			resource = "secrets"
		}
		var metas []metav1.ObjectMeta
		err := a.retry(ctx, resource, ns, func(ctx context.Context) error {
			var err error
			metas, err = a.listMeta(ctx, ns, kind, resource)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			snap.objects[Object{kind, m.Name}] = objMeta{uid: m.UID, labels: m.Labels, owners: m.OwnerReferences}
		}
	}
	return snap, nil
}

// listMeta lists the ConfigMaps or Secrets of ns and keeps only their metadata.
func (a *Auditor) listMeta(ctx context.Context, ns string, kind Kind, resource string) ([]metav1.ObjectMeta, error) {
	var out []metav1.ObjectMeta
	if a.Metadata != nil {
		l, err := a.Metadata.Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out = append(out, it.ObjectMeta)
		}
		return out, nil
	}
	if kind == KindSecret {
		l, err := a.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, it := range l.Items {
			out = append(out, it.ObjectMeta) // the data is dropped here
		}
		return out, nil
	}
	l, err := a.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, it := range l.Items {
		out = append(out, it.ObjectMeta)
	}
	return out, nil
}

// retry runs one read with the Attacher's retries of transient errors and a per-request
// deadline, and words a 403 with the RBAC audit needs.
func (a *Auditor) retry(ctx context.Context, resource, ns string, f func(context.Context) error) error {
	err := a.attacher().call(ctx, f)
	where := "in namespace " + ns
	if ns == "" {
		where = "in any namespace"
	}
	switch {
	case apierrors.IsForbidden(err):
		return &FailError{fmt.Sprintf("forbidden to read %s %s (%s): audit needs list on rollouts.argoproj.io, replicasets.apps, configmaps and secrets (and get on deployments.apps for workloadRef Rollouts); -fix also patch on configmaps and secrets",
			resource, where, apiMessage(err))}
	case apierrors.IsNotFound(err):
		return err
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", resource, where, err)
	}
	return nil
}

// selectorOf is spec.selector, or for a workloadRef Rollout without one the Deployment's
// (as the command line's waiter takes it; audit does not wait for the controller to observe
// the Deployment's generation).
func (a *Auditor) selectorOf(ctx context.Context, ro *v1alpha1.Rollout) (*metav1.LabelSelector, error) {
	wr := ro.Spec.WorkloadRef
	if ro.Spec.Selector != nil || wr == nil {
		return ro.Spec.Selector, nil
	}
	if wr.Kind != "Deployment" {
		return nil, &FailError{fmt.Sprintf("Rollout %s/%s: spec.workloadRef.kind %q is not supported (only Deployment)", ro.Namespace, ro.Name, wr.Kind)}
	}
	var d *appsv1.Deployment
	err := a.retry(ctx, "deployments.apps", ro.Namespace, func(ctx context.Context) error {
		var err error
		d, err = a.Kube.AppsV1().Deployments(ro.Namespace).Get(ctx, wr.Name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, &FailError{fmt.Sprintf("Deployment %s/%s named by spec.workloadRef of Rollout %s does not exist", ro.Namespace, wr.Name, ro.Name)}
	}
	if err != nil {
		return nil, err
	}
	return d.Spec.Selector, nil
}

// stepObjects returns the objects named in the Rollout's configmap-attacher steps, and the
// discover selectors of those steps. Configs that do not parse are ignored (the step itself
// reports them).
func stepObjects(ro *v1alpha1.Rollout) (map[Object]bool, []labels.Selector) {
	named := map[Object]bool{}
	var sels []labels.Selector
	if ro.Spec.Strategy.Canary == nil {
		return named, nil
	}
	for _, st := range ro.Spec.Strategy.Canary.Steps {
		if st.Plugin == nil || !strings.Contains(st.Plugin.Name, "configmap-attacher") {
			continue
		}
		cfg, err := ParseConfig(st.Plugin.Config)
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

// rsRefs is one live ReplicaSet with what its pod template references.
type rsRefs struct {
	rs       *appsv1.ReplicaSet
	refs     References
	required References
}

// auditedWorkload is what audit needs of a Rollout or a Deployment.
type auditedWorkload struct {
	w Workload
	// current finds the ReplicaSet shown as current among the workload's ReplicaSets.
	current func([]*appsv1.ReplicaSet) *appsv1.ReplicaSet
	// named and stepSels are the objects named in, and the discover selectors of, the
	// workload's configmap-attacher steps (Rollouts only).
	named    map[Object]bool
	stepSels []labels.Selector
}

// rolloutWorkload describes a Rollout for audit. Its "current" ReplicaSet is the controller's
// new one, or for a Rollout whose template matches none (the controller has not created it
// yet) the one status.currentPodHash names.
func (a *Auditor) rolloutWorkload(ctx context.Context, ro *v1alpha1.Rollout) (auditedWorkload, error) {
	named, stepSels := stepObjects(ro)
	aw := auditedWorkload{w: Workload{Kind: KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID}, named: named, stepSels: stepSels,
		current: func(rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
			if rs := NewReplicaSet(ro, rss); rs != nil {
				return rs
			}
			return ByPodHash(rss, ro.Status.CurrentPodHash)
		}}
	sel, err := a.selectorOf(ctx, ro)
	aw.w.Selector = sel
	return aw, err
}

// deploymentWorkload describes a Deployment for audit: its current ReplicaSet is the one the
// Deployment controller calls new (its own FindNewReplicaSet: template equality).
func deploymentWorkload(d *appsv1.Deployment) auditedWorkload {
	return auditedWorkload{w: Workload{Kind: KindDeployment, Namespace: d.Namespace, Name: d.Name, UID: d.UID, Selector: d.Spec.Selector},
		named: map[Object]bool{},
		current: func(rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
			return deploymentutil.FindNewReplicaSet(d, rss)
		}}
}

func (a *Auditor) auditWorkload(aw auditedWorkload, werr error, snap *nsSnapshot, additions map[string]map[Object]*Candidate) RolloutAudit {
	ns := aw.w.Namespace
	ra := RolloutAudit{Kind: aw.w.Kind, Namespace: ns, Name: aw.w.Name, UID: aw.w.UID, ReplicaSets: []ReplicaAudit{}, Objects: []ObjectAudit{}, Findings: []Finding{}}
	if werr != nil {
		ra.Error = werr.Error()
		return ra
	}
	rss, err := snap.controlled(aw.w)
	if err != nil {
		ra.Error = err.Error()
		return ra
	}
	current := aw.current(rss)
	named, stepSels := aw.named, aw.stepSels
	optedIn := func(m objMeta) bool {
		if a.selector().Matches(labels.Set(m.labels)) {
			return true
		}
		for _, s := range stepSels {
			if s.Matches(labels.Set(m.labels)) {
				return true
			}
		}
		return false
	}

	// Every ReplicaSet, current first, then newest first by creation time (as the controller
	// orders them; undo gives a re-used ReplicaSet the newest revision number, so revision
	// order would misplace it); deleting ones are shown but neither checked nor given owners.
	var all []*appsv1.ReplicaSet
	if current != nil {
		all = append(all, current)
	}
	for i := len(rss) - 1; i >= 0; i-- {
		if rss[i] != current {
			all = append(all, rss[i])
		}
	}
	var live []rsRefs
	byUID := map[types.UID]int{} // live ReplicaSets by UID
	for _, rs := range all {
		if rs.DeletionTimestamp != nil {
			continue
		}
		byUID[rs.UID] = len(live)
		live = append(live, rsRefs{rs: rs, refs: TemplateReferences(&rs.Spec.Template.Spec), required: RequiredReferences(&rs.Spec.Template.Spec)})
	}

	// The objects that concern this Rollout.
	objs := map[Object]bool{}
	for o := range named {
		objs[o] = true
	}
	for _, l := range live {
		for n := range l.refs.ConfigMaps {
			objs[Object{KindConfigMap, n}] = true
		}
		for n := range l.refs.Secrets {
			objs[Object{KindSecret, n}] = true
		}
	}
	for o, m := range snap.objects {
		for _, ref := range m.owners {
			if _, ok := byUID[ref.UID]; ok && ref.Kind == "ReplicaSet" {
				objs[o] = true
			}
		}
	}
	keys := make([]Object, 0, len(objs))
	for o := range objs {
		keys = append(keys, o)
	}
	sortObjects(keys)

	edges := map[Object]map[types.UID]EdgeAudit{}
	for _, o := range keys {
		m, exists := snap.objects[o]
		oa := ObjectAudit{Kind: o.Kind, Name: o.Name, Exists: exists, NamedInStep: named[o], OptedIn: exists && optedIn(m),
			UsedBy: []string{}, Owners: []OwnerAudit{}, MissingOwners: []string{}}
		candidate := exists && (oa.OptedIn || oa.NamedInStep)
		have := map[types.UID]bool{}
		for i, ref := range m.owners {
			have[ref.UID] = true
			oa.Owners = append(oa.Owners, OwnerAudit{Index: i, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ref.Controller != nil && *ref.Controller})
		}
		edges[o] = map[types.UID]EdgeAudit{}
		var lostBy []string
		lostCurrent := false
		var missing []*appsv1.ReplicaSet
		for _, l := range live {
			if !l.refs.Has(o) {
				continue
			}
			oa.UsedBy = append(oa.UsedBy, l.rs.Name)
			e := EdgeAudit{Kind: o.Kind, Name: o.Name}
			switch {
			case !exists && l.required.Has(o):
				e.Status = EdgeLost
				lostBy = append(lostBy, rsLabel(l.rs, current))
				lostCurrent = lostCurrent || l.rs == current
			case !exists:
				e.Status = EdgeAbsentOptional
			case have[l.rs.UID]:
				e.Status = EdgeOwned
			case candidate:
				e.Status, e.Fixable = EdgeMissingOwner, true
				missing = append(missing, l.rs)
				oa.MissingOwners = append(oa.MissingOwners, l.rs.Name)
			case hasReplicaSetOwner(m.owners):
				// Not opted in, yet owned by other ReplicaSets: it goes with them while this
				// one still uses it. -fix may not touch it; say so.
				e.Status = EdgeMissingOwner
				oa.MissingOwners = append(oa.MissingOwners, l.rs.Name)
			default:
				e.Status = EdgeNotOptedIn
			}
			edges[o][l.rs.UID] = e
		}
		oa.Fixable = len(missing) > 0
		if len(missing) > 0 {
			byObj := additions[ns]
			if byObj == nil {
				byObj = map[Object]*Candidate{}
				additions[ns] = byObj
			}
			add := byObj[o]
			if add == nil {
				// The snapshot may be seconds old by the time -fix writes: the UID guards against a
				// recreated object, and an object with no ReplicaSet owner yet has its new owners
				// confirmed first.
				add = &Candidate{Object: o, UID: m.uid, Labels: m.labels, Owners: m.owners, VerifyOwners: !hasReplicaSetOwner(m.owners)}
				byObj[o] = add
			}
			for _, rs := range missing {
				if !containsRS(add.ReplicaSets, rs.UID) {
					add.ReplicaSets = append(add.ReplicaSets, rs)
				}
			}
		}
		ra.Objects = append(ra.Objects, oa)

		// Findings.
		var fs []Finding
		if len(lostBy) > 0 {
			consequence := fmt.Sprintf("a rollback to %s, or a restart of %s pods, would fail with CreateContainerConfigError", pronounRS(len(lostBy)), pronounPods(len(lostBy)))
			if lostCurrent {
				consequence = "pods of the current ReplicaSet cannot start (CreateContainerConfigError)"
			}
			fs = append(fs, Finding{Type: FindingLost, Namespace: ns, Kind: o.Kind, Name: o.Name, index: -1,
				Message: fmt.Sprintf("%s %s it, but it does not exist: %s. Recreate it from that revision's manifests",
					strings.Join(lostBy, ", "), verb(len(lostBy), "references", "reference"), consequence)})
		}
		if candidate && !hasReplicaSetOwner(m.owners) {
			why := "named in a configmap-attacher step"
			if oa.OptedIn {
				why = "opted in (" + a.selectorLabel(m, stepSels) + ")"
			}
			msg := fmt.Sprintf("%s, but no ReplicaSet owns it: it will never be garbage-collected%s", why, otherOwners(m.owners))
			if len(missing) > 0 {
				msg += fmt.Sprintf("; -fix adds %s, which %s it", joinNames(rsNames(missing)), verb(len(missing), "uses", "use"))
			} else {
				msg += fmt.Sprintf("; no ReplicaSet of %s uses it: if nothing else does, delete it by hand", aw.w)
			}
			fs = append(fs, Finding{Type: FindingUnowned, Namespace: ns, Kind: o.Kind, Name: o.Name, index: -1, Message: msg})
		}
		for i, ref := range m.owners {
			li, ok := byUID[ref.UID]
			if !ok || ref.Kind != "ReplicaSet" {
				continue
			}
			rs := live[li].rs
			uses := live[li].refs.Has(o)
			others := otherUsers(oa.UsedBy, rs.Name)
			f := Finding{Namespace: ns, Kind: o.Kind, Name: o.Name, ReplicaSet: rs.Name, index: i}
			switch {
			case ref.Controller != nil && *ref.Controller && uses:
				f.Type = FindingLegacy
				f.Message = fmt.Sprintf("owner reference %d is the original tool's controller reference to ReplicaSet %s (which uses it): configmap-attacher writes controller: false, so that several ReplicaSets can own an object. Turn it into a plain owner reference by hand", i, rs.Name)
				f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"replace","path":"/metadata/ownerReferences/%d/controller","value":false}`)
			case ref.Controller != nil && *ref.Controller:
				f.Type = FindingLegacy
				f.Message = fmt.Sprintf("owner reference %d is the original tool's controller reference to ReplicaSet %s, which does not use it (the wrong ReplicaSet)", i, rs.Name)
				f.Message += removalAdvice(others, oa, rs.Name)
				f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"remove","path":"/metadata/ownerReferences/%d"}`)
			case !uses:
				f.Type = FindingStray
				f.Message = fmt.Sprintf("owner reference %d is ReplicaSet %s, which does not use it: it keeps the object until that ReplicaSet is deleted", i, rs.Name)
				f.Message += removalAdvice(others, oa, rs.Name)
				f.Command = ownerRefCommand(o, ns, i, ref.UID, `{"op":"remove","path":"/metadata/ownerReferences/%d"}`)
			default:
				continue
			}
			fs = append(fs, f)
		}
		ra.Findings = append(ra.Findings, fs...)
	}
	sortFindings(ra.Findings)

	for _, rs := range all {
		r := ReplicaAudit{Name: rs.Name, UID: rs.UID, Revision: revisionOf(rs), Current: rs == current,
			Deleting: rs.DeletionTimestamp != nil, Objects: []EdgeAudit{}}
		for _, o := range keys {
			if e, ok := edges[o][rs.UID]; ok {
				r.Objects = append(r.Objects, e)
			}
		}
		ra.ReplicaSets = append(ra.ReplicaSets, r)
	}
	return ra
}

// removalAdvice warns, for a reference about to be removed by hand, when the object would
// then be left without a ReplicaSet owner although other ReplicaSets use it.
func removalAdvice(others []string, oa ObjectAudit, rs string) string {
	var missing []string
	for _, n := range oa.MissingOwners {
		if n != rs {
			missing = append(missing, n)
		}
	}
	switch {
	case len(missing) > 0 && oa.Fixable:
		return fmt.Sprintf(". %s %s it without owning it: run audit -fix first (it adds them), then remove the reference by hand", joinNames(missing), verb(len(missing), "uses", "use"))
	case len(missing) > 0:
		return fmt.Sprintf(". %s %s it without owning it, and it is not opted in: the object is deleted with its other owners. Label it %s=true and run audit -fix first, then remove the reference by hand", joinNames(missing), verb(len(missing), "uses", "use"), DefaultDiscoverLabel)
	case len(others) == 0:
		return ". No ReplicaSet of the Rollout uses it: remove the reference by hand only if the object is to be kept (without it, nothing collects the object)"
	default:
		return ". Remove it by hand"
	}
}

func otherUsers(usedBy []string, rs string) []string {
	var out []string
	for _, n := range usedBy {
		if n != rs {
			out = append(out, n)
		}
	}
	return out
}

// ownerRefCommand is a kubectl JSON patch that first tests that owner reference i is still
// uid (the garbage collector edits the list too), then applies op.
func ownerRefCommand(o Object, ns string, i int, uid types.UID, op string) string {
	resource := "configmap"
	if o.Kind == KindSecret {
		resource = "secret"
	}
	return fmt.Sprintf(`kubectl patch %s %s -n %s --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/%d/uid","value":"%s"},%s]'`,
		resource, o.Name, ns, i, uid, fmt.Sprintf(op, i))
}

func (a *Auditor) selectorLabel(m objMeta, stepSels []labels.Selector) string {
	if a.selector().Matches(labels.Set(m.labels)) {
		return a.selector().String()
	}
	for _, s := range stepSels {
		if s.Matches(labels.Set(m.labels)) {
			return s.String() + ", a step's discover selector"
		}
	}
	return ""
}

// Object returns the object's identity.
func (o ObjectAudit) Object() Object { return Object{o.Kind, o.Name} }

func hasReplicaSetOwner(owners []metav1.OwnerReference) bool {
	for _, r := range owners {
		if r.Kind == "ReplicaSet" {
			return true
		}
	}
	return false
}

func otherOwners(owners []metav1.OwnerReference) string {
	var s []string
	for _, r := range owners {
		if r.Kind != "ReplicaSet" {
			s = append(s, r.Kind+" "+r.Name)
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " with the Rollout's history (only with its other owners: " + strings.Join(s, ", ") + ")"
}

func containsRS(rss []*appsv1.ReplicaSet, uid types.UID) bool {
	for _, rs := range rss {
		if rs.UID == uid {
			return true
		}
	}
	return false
}

func rsNames(rss []*appsv1.ReplicaSet) []string {
	out := make([]string, len(rss))
	for i, rs := range rss {
		out[i] = rs.Name
	}
	return out
}

func joinNames(names []string) string {
	if len(names) == 1 {
		return "ReplicaSet " + names[0]
	}
	return "ReplicaSets " + strings.Join(names, ", ")
}

func rsLabel(rs, current *appsv1.ReplicaSet) string {
	var notes []string
	if rs == current {
		notes = append(notes, "current")
	}
	if r := rs.Annotations[RevisionAnnotation]; r != "" {
		notes = append(notes, "revision "+r)
	}
	if len(notes) == 0 {
		return "ReplicaSet " + rs.Name
	}
	return fmt.Sprintf("ReplicaSet %s (%s)", rs.Name, strings.Join(notes, ", "))
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func pronounRS(n int) string { return verb(n, "that ReplicaSet", "those ReplicaSets") }

func pronounPods(n int) string { return verb(n, "its", "their") }

func revision(rs *appsv1.ReplicaSet) int {
	n, err := strconv.Atoi(rs.Annotations[RevisionAnnotation])
	if err != nil {
		return -1
	}
	return n
}

// sortFindings orders findings by object, lost and unowned first, then the owner-reference
// findings by descending index: their commands can then be run in the order shown, since
// removing a later entry does not move an earlier one.
func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		x, y := fs[i], fs[j]
		if x.Namespace != y.Namespace {
			return x.Namespace < y.Namespace
		}
		if x.Kind != y.Kind {
			return x.Kind < y.Kind
		}
		if x.Name != y.Name {
			return x.Name < y.Name
		}
		rank := func(f Finding) int {
			switch f.Type {
			case FindingLost:
				return 0
			case FindingUnowned:
				return 1
			}
			return 2
		}
		if rank(x) != rank(y) {
			return rank(x) < rank(y)
		}
		return x.index > y.index
	})
}

// RequiredReferences is TemplateReferences without the references a pod starts without:
// optional ones (optional: true on a volume, a projected source, envFrom or a key ref) and
// image pull secrets (the kubelet warns and pulls anyway). A name counts as required when
// at least one of its references is. The occurrences are counted with the kubelet's walkers,
// so a reference kind they know and this function does not is treated as required.
func RequiredReferences(spec *corev1.PodSpec) References {
	req := References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	if spec == nil {
		return req
	}
	total := map[Object]int{}
	pod := &corev1.Pod{Spec: *spec}
	podutil.VisitPodConfigmapNames(pod, func(n string) bool { total[Object{KindConfigMap, n}]++; return true })
	podutil.VisitPodSecretNames(pod, func(n string) bool { total[Object{KindSecret, n}]++; return true })
	optional := map[Object]int{}
	opt := func(k Kind, name string, o *bool) {
		if name != "" && o != nil && *o {
			optional[Object{k, name}]++
		}
	}
	for _, ps := range spec.ImagePullSecrets {
		if ps.Name != "" {
			optional[Object{KindSecret, ps.Name}]++
		}
	}
	for c := range podutil.ContainerIter(spec, podutil.AllContainers) {
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				opt(KindConfigMap, ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional)
			}
			if ef.SecretRef != nil {
				opt(KindSecret, ef.SecretRef.Name, ef.SecretRef.Optional)
			}
		}
		for _, ev := range c.Env {
			if ev.ValueFrom == nil {
				continue
			}
			if r := ev.ValueFrom.ConfigMapKeyRef; r != nil {
				opt(KindConfigMap, r.Name, r.Optional)
			}
			if r := ev.ValueFrom.SecretKeyRef; r != nil {
				opt(KindSecret, r.Name, r.Optional)
			}
		}
	}
	// The same switch as the walkers: one source per volume, projected first.
	for _, v := range spec.Volumes {
		switch src := v.VolumeSource; {
		case src.Projected != nil:
			for _, s := range src.Projected.Sources {
				if s.ConfigMap != nil {
					opt(KindConfigMap, s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					opt(KindSecret, s.Secret.Name, s.Secret.Optional)
				}
			}
		case src.ConfigMap != nil:
			opt(KindConfigMap, src.ConfigMap.Name, src.ConfigMap.Optional)
		case src.Secret != nil:
			opt(KindSecret, src.Secret.SecretName, src.Secret.Optional)
		}
	}
	for o, n := range total {
		if n > optional[o] {
			if o.Kind == KindSecret {
				req.Secrets[o.Name] = true
			} else {
				req.ConfigMaps[o.Name] = true
			}
		}
	}
	return req
}

// revisionOf is the revision the workload's controller wrote on the ReplicaSet.
func revisionOf(rs *appsv1.ReplicaSet) string {
	if r := rs.Annotations[RevisionAnnotation]; r != "" {
		return r
	}
	return rs.Annotations[DeploymentRevisionAnnotation]
}

// Fix adds the missing owner references the audit found on opted-in and step-named objects:
// one strategic merge patch per object with every ReplicaSet it lacks (as discovery does). It
// never removes or changes an existing reference.
func (a *Auditor) Fix(ctx context.Context, rep *AuditReport) {
	fix := &AuditFix{Added: []AuditAddition{}, Errors: []string{}}
	rep.Fix = fix
	nss := make([]string, 0, len(rep.additions))
	for ns := range rep.additions {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		var cands []Candidate
		for _, c := range rep.additions[ns] {
			cands = append(cands, *c)
		}
		// The core's adoption stage: MissingOwners over each object's ReplicaSets, the same
		// add-only patch, one per object, live owners only.
		res, err := a.attacher().Adopt(ctx, ns, cands, Policy{}, false)
		for _, w := range res.Added {
			fix.Added = append(fix.Added, AuditAddition{Namespace: ns, Kind: w.Object.Kind, Name: w.Object.Name, ReplicaSets: w.Names()})
		}
		for _, warn := range res.Warnings {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %s", ns, warn))
		}
		if err != nil {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %v", ns, err))
		}
	}
}

// controlled returns the workload's ReplicaSets from the namespace's one list: those matching
// its selector whose controller reference carries its UID, as Attacher.ListReplicaSets decides.
func (s *nsSnapshot) controlled(w Workload) ([]*appsv1.ReplicaSet, error) {
	if w.Selector == nil {
		return nil, &FailError{fmt.Sprintf("%s has no spec.selector: cannot tell which ReplicaSets are its own", w)}
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		return nil, &FailError{fmt.Sprintf("%s: spec.selector is invalid: %v", w, err)}
	}
	var match []appsv1.ReplicaSet
	for i := range s.replicaSets {
		if sel.Matches(labels.Set(s.replicaSets[i].Labels)) {
			match = append(match, s.replicaSets[i])
		}
	}
	return Controlled(match, w.UID), nil
}

// WriteText writes the report as a tree per Rollout, the findings with their repair
// commands, what -fix did (or would do), and a summary line.
func (r *AuditReport) WriteText(w io.Writer) {
	for _, ra := range append(append([]RolloutAudit(nil), r.Rollouts...), r.Deployments...) {
		kind := ra.Kind
		if kind == "" {
			kind = KindRollout
		}
		fmt.Fprintf(w, "%s %s/%s\n", kind, ra.Namespace, ra.Name)
		if ra.Error != "" {
			fmt.Fprintf(w, "└─ ERROR %s\n\n", ra.Error)
			continue
		}
		type node struct {
			label string
			lines [][2]string // object label, status
		}
		var nodes []node
		width := 0
		findingTypes := map[Object][]string{}
		for _, f := range ra.Findings {
			o := Object{f.Kind, f.Name}
			if !slices.Contains(findingTypes[o], f.Type) {
				findingTypes[o] = append(findingTypes[o], f.Type)
			}
		}
		for _, rs := range ra.ReplicaSets {
			var notes []string
			if rs.Current {
				notes = append(notes, "current")
			}
			if rs.Revision != "" {
				notes = append(notes, "revision "+rs.Revision)
			}
			if rs.Deleting {
				notes = append(notes, "being deleted")
			}
			n := node{label: "ReplicaSet " + rs.Name}
			if len(notes) > 0 {
				n.label += " (" + strings.Join(notes, ", ") + ")"
			}
			for _, e := range rs.Objects {
				n.lines = append(n.lines, [2]string{string(e.Kind) + " " + e.Name, edgeText(e)})
			}
			nodes = append(nodes, n)
		}
		other := node{label: "not used by any ReplicaSet"}
		for _, o := range ra.Objects {
			if len(o.UsedBy) > 0 {
				continue
			}
			var st []string
			for _, t := range findingTypes[o.Object()] {
				if t == FindingStray || t == FindingLegacy {
					t += " owner"
				}
				st = append(st, strings.ToUpper(t))
			}
			switch {
			case len(st) > 0:
			case !o.Exists:
				st = append(st, "absent (named in a step)")
			case len(o.Owners) > 0:
				st = append(st, "owned")
			default:
				st = append(st, "no owner")
			}
			other.lines = append(other.lines, [2]string{string(o.Kind) + " " + o.Name, strings.Join(st, ", ")})
		}
		if len(other.lines) > 0 {
			nodes = append(nodes, other)
		}
		if len(nodes) == 0 {
			nodes = append(nodes, node{label: "(no ReplicaSets)"})
		}
		for _, n := range nodes {
			for _, l := range n.lines {
				width = max(width, len(l[0]))
			}
		}
		for i, n := range nodes {
			branch, indent := "├─ ", "│  "
			if i == len(nodes)-1 {
				branch, indent = "└─ ", "   "
			}
			fmt.Fprintf(w, "%s%s\n", branch, n.label)
			for j, l := range n.lines {
				b := "├─ "
				if j == len(n.lines)-1 {
					b = "└─ "
				}
				fmt.Fprintf(w, "%s%s%-*s  %s\n", indent, b, width, l[0], l[1])
			}
		}
		writeFindings(w, ra.Findings)
		fmt.Fprintln(w)
	}
	if len(r.Unattributed) > 0 {
		fmt.Fprintf(w, "Opted-in objects (%s) that no audited Rollout uses or owns\n", r.Selector)
		writeFindings(w, r.Unattributed)
		fmt.Fprintln(w)
	}
	s := r.Summary
	switch {
	case r.Fix != nil:
		n := 0
		parts := make([]string, len(r.Fix.Added))
		for i, add := range r.Fix.Added {
			n += len(add.ReplicaSets)
			parts[i] = fmt.Sprintf("%s/%s %s ← %s", add.Namespace, add.Kind, add.Name, strings.Join(add.ReplicaSets, ", "))
		}
		if len(parts) == 0 {
			fmt.Fprintln(w, "fixed: nothing to add")
		} else {
			fmt.Fprintf(w, "fixed: added %d owner reference(s) to %d object(s): %s\n", n, len(parts), strings.Join(parts, "; "))
		}
		for _, e := range r.Fix.Errors {
			fmt.Fprintf(w, "fix failed: %s\n", e)
		}
	case s.Fixable > 0:
		fmt.Fprintf(w, "missing owners: %d owner reference(s) can be added: run again with -fix\n", s.Fixable)
	}
	if s.MissingOwners > s.Fixable {
		fmt.Fprintf(w, "not opted in: %d ReplicaSet(s) use objects that other ReplicaSets own; -fix leaves them alone (label them %s=true to let it add owners)\n",
			s.MissingOwners-s.Fixable, DefaultDiscoverLabel)
	}
	if s.Errors > 0 {
		fmt.Fprintf(w, "errors: %d Rollout(s) could not be audited\n", s.Errors)
	}
	fmt.Fprintf(w, "findings: %d lost, %d unowned, %d stray, %d legacy\n", s.Lost, s.Unowned, s.Stray, s.Legacy)
}

func writeFindings(w io.Writer, fs []Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "  %-8s %s %s: %s\n", strings.ToUpper(f.Type), f.Kind, f.Name, f.Message)
		if f.Command != "" {
			fmt.Fprintf(w, "  %-8s $ %s\n", "", f.Command)
		}
	}
}

func edgeText(e EdgeAudit) string {
	switch e.Status {
	case EdgeOwned:
		return "owned"
	case EdgeMissingOwner:
		if e.Fixable {
			return "MISSING OWNER"
		}
		return "MISSING OWNER (not opted in: -fix leaves it alone)"
	case EdgeLost:
		return "LOST (does not exist)"
	case EdgeAbsentOptional:
		return "absent (optional reference)"
	case EdgeNotOptedIn:
		return "not opted in"
	}
	return e.Status
}

// WriteJSON writes the report as one indented JSON document.
func (r *AuditReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// AuditCLI is `configmap-attacher audit`: it reports, per Rollout, the ReplicaSets in
// history, the ConfigMaps and Secrets they use and what is lost, unowned, stray or legacy,
// and with -fix adds the missing owner references of opted-in objects.
type AuditCLI struct {
	Stdout, Stderr io.Writer
	// NewClients builds the clients (tests inject fakes).
	NewClients func(ClientOptions) (Clients, error)
}

type auditOptions struct {
	namespace, rollout string
	all, fix           bool
	output, selector   string
	logLevel           string
	workloads          string
	client             ClientOptions
}

func (c *AuditCLI) flags(o *auditOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher audit", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Rollouts to audit")
	fs.StringVar(&o.rollout, "rollout", "", "audit only this Rollout (needs -namespace)")
	fs.BoolVar(&o.all, "A", false, "audit the Rollouts of every namespace")
	fs.BoolVar(&o.all, "all-namespaces", false, "same as -A")
	fs.StringVar(&o.output, "o", "text", "output: text (a tree) or json")
	fs.BoolVar(&o.fix, "fix", false, "add the missing owner references of opted-in and step-named objects (never removes anything)")
	fs.StringVar(&o.selector, "selector", "", "label selector of opted-in objects (default "+DefaultDiscoverLabel+"=true)")
	fs.StringVar(&o.workloads, "workloads", "rollouts,deployments", "workload kinds to audit: rollouts, deployments, or both (a missing Rollout CRD is an error only when rollouts is named)")
	fs.StringVar(&o.client.Kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn, error (logs go to stderr)")
	fs.Usage = func() {
		fmt.Fprintf(c.Stderr, "Usage: configmap-attacher audit (-namespace NS [-rollout NAME] | -A) [-o text|json] [-fix] [flags]\n\n"+
			"Reports, per Rollout and Deployment, the ReplicaSets in history and the ConfigMaps and Secrets they use:\n"+
			"lost (referenced, does not exist), unowned (opted in or named in a step, no ReplicaSet owns it),\n"+
			"stray (owned by a ReplicaSet that does not use it) and legacy (the original tool's controller\n"+
			"reference). -fix adds missing owner references to opted-in objects only; it never removes one.\n"+
			"Exit codes: 0 nothing lost, 1 something lost or an error, 2 bad usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// Main runs the audit and returns the exit code.
func (c *AuditCLI) Main(args []string) int {
	var o auditOptions
	fs := c.flags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected argument %q: all input is given by flags", fs.Arg(0)))
	}
	switch {
	case o.all && (o.namespace != "" || o.rollout != ""):
		problems = append(problems, "-A audits every namespace: do not combine it with -namespace or -rollout")
	case !o.all && o.namespace == "":
		problems = append(problems, "-namespace is required (or -A for every namespace)")
	}
	if o.output != "text" && o.output != "json" {
		problems = append(problems, fmt.Sprintf("-o %q: use text or json", o.output))
	}
	var sel labels.Selector
	if o.selector != "" {
		var err error
		sel, err = labels.Parse(o.selector)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("-selector %q: %v", o.selector, err))
		case !Positive(sel):
			problems = append(problems, fmt.Sprintf("-selector %q %s", o.selector, NotPositive))
		}
	}
	kinds, kindProblems := ParseWorkloads(o.workloads)
	problems = append(problems, kindProblems...)
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "workloads" })
	if o.rollout != "" && !slices.Contains(kinds, KindRollout) {
		problems = append(problems, "-rollout audits one Rollout: -workloads must include rollouts")
	}
	log := logrus.New()
	log.SetOutput(c.Stderr)
	if err := ConfigureLogger(log, o.logLevel, "text"); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(c.Stderr, "configmap-attacher audit: %s\n", p)
		}
		fmt.Fprintf(c.Stderr, "Run configmap-attacher audit -help for usage.\n")
		return ExitUsage
	}

	newClients := c.NewClients
	if newClients == nil {
		newClients = NewClients
	}
	cl, err := newClients(o.client)
	if err != nil {
		fmt.Fprintf(c.Stderr, "configmap-attacher audit: %v\n", err)
		return ExitFail
	}
	aud := &Auditor{Kube: cl.Kube, Rollouts: cl.Rollouts, Metadata: cl.Meta, Selector: sel, Log: log, Workloads: kinds, WorkloadsExplicit: explicit}
	ctx := context.Background()
	rep, err := aud.Audit(ctx, o.namespace, o.rollout)
	if err != nil {
		fmt.Fprintf(c.Stderr, "configmap-attacher audit: %v\n", err)
		return ExitFail
	}
	if o.fix {
		aud.Fix(ctx, rep)
		// Report the state after the fix: the patches may have moved owner references, and
		// the repair commands address them by index.
		after, err := aud.Audit(ctx, o.namespace, o.rollout)
		if err != nil {
			log.WithError(err).Warn("could not re-read after -fix; the report shows the state before it")
		} else {
			after.Fix = rep.Fix
			rep = after
		}
	}
	if o.output == "json" {
		if err := rep.WriteJSON(c.Stdout); err != nil {
			fmt.Fprintf(c.Stderr, "configmap-attacher audit: %v\n", err)
			return ExitFail
		}
	} else {
		rep.WriteText(c.Stdout)
	}
	return rep.ExitCode()
}

// ParseWorkloads reads a -workloads value ("rollouts,deployments") into workload kinds,
// reporting every unknown word.
func ParseWorkloads(v string) ([]string, []string) {
	var kinds, problems []string
	for _, w := range splitList(v) {
		switch strings.ToLower(w) {
		case "rollouts", "rollout":
			if !slices.Contains(kinds, KindRollout) {
				kinds = append(kinds, KindRollout)
			}
		case "deployments", "deployment":
			if !slices.Contains(kinds, KindDeployment) {
				kinds = append(kinds, KindDeployment)
			}
		default:
			problems = append(problems, fmt.Sprintf("-workloads: %q is not a workload kind: use rollouts, deployments or both (rollouts,deployments)", w))
		}
	}
	if len(kinds) == 0 && len(problems) == 0 {
		problems = append(problems, "-workloads is empty: use rollouts, deployments or both (rollouts,deployments)")
	}
	return kinds, problems
}
