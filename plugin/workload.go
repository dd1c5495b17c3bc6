package plugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The workload and its ReplicaSets: identity and selector, spec.workloadRef, which
// ReplicaSets are its own, which one is new, and history order.

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
	// RefDeployment is the Deployment a workloadRef Rollout takes its template from: its
	// ReplicaSets are made from the Rollout's own templates, so a run for the Rollout sees
	// their revisions as its own (SharingOf).
	RefDeployment string
}

func (w Workload) String() string {
	kind := w.Kind
	if kind == "" {
		kind = KindRollout
	}
	return kind + " " + w.Namespace + "/" + w.Name
}

// PodTemplateHashLabel is the label Argo Rollouts puts on each ReplicaSet (and its pods)
// with the hash that status.currentPodHash and status.stableRS name.
const PodTemplateHashLabel = "rollouts-pod-template-hash"

// RevisionAnnotation is the revision number Argo Rollouts writes on each ReplicaSet.
const RevisionAnnotation = "rollout.argoproj.io/revision"

// DeploymentRevisionAnnotation is the Deployment controller's.
const DeploymentRevisionAnnotation = "deployment.kubernetes.io/revision"

// DeploymentGetter reads one Deployment. The caller chooses the client, the retries and the
// wording of its errors; ResolveWorkloadRef returns them unchanged (a caller tells a missing
// Deployment by apierrors.IsNotFound).
type DeploymentGetter func(ctx context.Context, namespace, name string) (*appsv1.Deployment, error)

// ResolvedRollout is a Rollout as the Rollouts controller sees it once spec.workloadRef is
// resolved.
type ResolvedRollout struct {
	// Rollout is the Rollout itself, or for a workloadRef Rollout a copy whose template is the
	// Deployment's (and whose selector, when it has none, the Deployment's): pass it to
	// newrs.OfRollout.
	Rollout *v1alpha1.Rollout
	// Deployment is the Deployment spec.workloadRef names; nil without a workloadRef.
	Deployment *appsv1.Deployment
	// Workload is the Rollout's identity and selector: spec.selector, else the Deployment's.
	Workload Workload
}

// ResolveWorkloadRef resolves a Rollout's spec.workloadRef by the Rollouts controller's rule
// (rollout/templateref.go): the referenced workload must be a Deployment; its pod template
// always stands in for the Rollout's; its selector only when the Rollout has none. A Rollout
// without a workloadRef is returned as it is, with no request. The one resolution of every
// mode: the command line (which in addition waits until status.workloadObservedGeneration is
// Deployment.Generation) and audit.
func ResolveWorkloadRef(ctx context.Context, get DeploymentGetter, ro *v1alpha1.Rollout) (ResolvedRollout, error) {
	res := ResolvedRollout{Rollout: ro,
		Workload: Workload{Kind: KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector}}
	wr := ro.Spec.WorkloadRef
	if wr == nil {
		return res, nil
	}
	if wr.Kind != "Deployment" {
		return res, &FailError{fmt.Sprintf("Rollout %s/%s: spec.workloadRef.kind %q is not supported (only Deployment)", ro.Namespace, ro.Name, wr.Kind)}
	}
	d, err := get(ctx, ro.Namespace, wr.Name)
	if err != nil {
		return res, err
	}
	res.Workload.RefDeployment = wr.Name
	resolved := ro.DeepCopy()
	resolved.Spec.Template = d.Spec.Template
	if resolved.Spec.Selector == nil {
		resolved.Spec.Selector = d.Spec.Selector
		res.Workload.Selector = d.Spec.Selector
	}
	res.Rollout, res.Deployment = resolved, d
	return res, nil
}

// replicaSetSelector is the workload's selector as a labels.Selector; a workload without one,
// or with an invalid one, is a *FailError (nothing tells which ReplicaSets are its own).
func (w Workload) replicaSetSelector() (labels.Selector, error) {
	if w.Selector == nil {
		return nil, &FailError{fmt.Sprintf("%s has no spec.selector: cannot tell which ReplicaSets are its own", w)}
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		return nil, &FailError{fmt.Sprintf("%s: spec.selector is invalid: %v", w, err)}
	}
	return sel, nil
}

// OwnReplicaSets picks the workload's ReplicaSets out of a list of its namespace's already
// made (audit lists each namespace once for every workload in it): those matching its
// selector whose controller reference carries its UID, oldest first.
func OwnReplicaSets(items []appsv1.ReplicaSet, w Workload) ([]*appsv1.ReplicaSet, error) {
	sel, err := w.replicaSetSelector()
	if err != nil {
		return nil, err
	}
	var match []appsv1.ReplicaSet
	for i := range items {
		if sel.Matches(labels.Set(items[i].Labels)) {
			match = append(match, items[i])
		}
	}
	return controlled(match, w.UID), nil
}

// controlled returns the ReplicaSets whose controller reference carries uid, oldest first.
func controlled(items []appsv1.ReplicaSet, uid types.UID) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for i := range items {
		if ref := metav1.GetControllerOf(&items[i]); ref != nil && ref.UID == uid {
			out = append(out, &items[i])
		}
	}
	SortReplicaSets(out)
	return out
}

// ByPodHash returns the ReplicaSet labelled with the Rollouts controller's pod-template hash
// (status.currentPodHash), or nil.
func ByPodHash(rss []*appsv1.ReplicaSet, hash string) *appsv1.ReplicaSet {
	if hash == "" {
		return nil
	}
	for _, rs := range rss {
		if rs.Labels[PodTemplateHashLabel] == hash {
			return rs
		}
	}
	return nil
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
