package plugin

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The step's reads as a formula of the namespace (docs/security.md "What the step reads"), for
// the benchmark's "floor + formula", which sends exactly these requests, and for the docs.

// Read is one request the step sends before its writes.
type Read struct {
	Verb      string // "list" or "get"
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string // a get's
	// ListOptions of a list: selectors; Limit is PageSize on a paged list (follow continue).
	ListOptions metav1.ListOptions
	// Metadata: through the metadata client (PartialObjectMetadata); otherwise typed, with
	// protobuf answers.
	Metadata bool
}

// Paged reports whether the read is a namespace-wide list read page by page.
func (r Read) Paged() bool { return r.Verb == "list" && r.ListOptions.Limit == PageSize }

// StepShape is what decides the step's reads: its Rollout and objects, the controllers'
// Leases it is configured with, and what the namespace holds.
type StepShape struct {
	Workload Workload
	Objects  []Object
	Leases   []LeaseRef
	// Maintained: a live controller maintains every object (its Lease is among Leases).
	Maintained bool
	// ControllerKinds are the kinds (Deployment, Rollout, Experiment) that control the
	// namespace's other ReplicaSets; each is listed (metadata) to confirm they are live.
	ControllerKinds []string
	// Pods is the namespace's Pods' metadata, as the step's read of it keeps it: the specs of
	// those no ReplicaSet, Job, StatefulSet or DaemonSet controls (bare, or of a controller
	// kind configmap-attacher does not know) are read (PodCensus.SpecReads).
	Pods PodCensus
}

// StepReads lists the requests a step with a target sends before its writes (with the default
// policy: no --require-opt-in, no discovery), in order; requests on one line of the formula are
// sent concurrently:
//
//	always:       list its ReplicaSets (typed, selector, paged); get each configured Lease
//	maintained:   get each object's metadata, up to 8 at once (are they opted in?); nothing else
//	otherwise:    list ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, ControllerRevisions
//	              (typed, paged) and Pods (metadata, paged); list each kind in ControllerKinds
//	              (metadata, paged); then the specs of the Pods no known controller controls:
//	              one paged list per group of them with the same label keys, by name the
//	              others, or one paged list of every Pod when more than manyPods are by name
//
// A waiting step (no target yet) sends the first list alone.
func StepReads(s StepShape) []Read {
	ns := s.Workload.Namespace
	paged := metav1.ListOptions{Limit: PageSize}
	sel := ""
	if s.Workload.Selector != nil {
		if ls, err := metav1.LabelSelectorAsSelector(s.Workload.Selector); err == nil {
			sel = ls.String()
		}
	}
	out := []Read{{Verb: "list", Resource: appsv1.SchemeGroupVersion.WithResource("replicasets"), Namespace: ns,
		ListOptions: metav1.ListOptions{LabelSelector: sel, Limit: PageSize}}}
	for _, l := range s.Leases {
		out = append(out, Read{Verb: "get", Resource: coordinationv1.SchemeGroupVersion.WithResource("leases"), Namespace: l.Namespace, Name: l.Name})
	}
	if s.Maintained {
		for _, o := range s.Objects {
			out = append(out, Read{Verb: "get", Resource: o.Kind.Resource(), Namespace: ns, Name: o.Name, Metadata: true})
		}
		return out
	}
	for _, gvr := range []schema.GroupVersionResource{appsv1.SchemeGroupVersion.WithResource("replicasets"),
		appsv1.SchemeGroupVersion.WithResource("statefulsets"), appsv1.SchemeGroupVersion.WithResource("daemonsets"),
		batchv1.SchemeGroupVersion.WithResource("jobs"), batchv1.SchemeGroupVersion.WithResource("cronjobs"),
		appsv1.SchemeGroupVersion.WithResource("controllerrevisions")} {
		out = append(out, Read{Verb: "list", Resource: gvr, Namespace: ns, ListOptions: paged})
	}
	out = append(out, Read{Verb: "list", Resource: corev1.SchemeGroupVersion.WithResource("pods"), Namespace: ns, ListOptions: paged, Metadata: true})
	for _, k := range checkedControllers {
		for _, want := range s.ControllerKinds {
			if k.kind == want {
				out = append(out, Read{Verb: "list", Resource: k.gvr, Namespace: ns, ListOptions: paged, Metadata: true})
			}
		}
	}
	for _, opts := range s.Pods.SpecReads(true) {
		out = append(out, Read{Verb: "list", Resource: corev1.SchemeGroupVersion.WithResource("pods"), Namespace: ns, ListOptions: opts})
	}
	return out
}
