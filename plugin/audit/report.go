// Package audit reports, per Rollout and Deployment, the ReplicaSets in history, the
// ConfigMaps and Secrets they use and what is lost, unowned, stray or legacy, and with Fix
// adds the missing owner references of opted-in objects through the core's ownership
// entry point ((*plugin.Attacher).Reconcile). The command is plugin/cmd's Audit.
package audit

import (
	"github.com/configmap-attacher/configmap-attacher/plugin"

	"k8s.io/apimachinery/pkg/types"
)

// Finding types.
const (
	// FindingLost: a ReplicaSet in history references an object that does not exist.
	FindingLost = "lost"
	// FindingUnowned: an opted-in or step-named object that no ReplicaSet owns.
	FindingUnowned = "unowned"
	// FindingStray: an owner reference to a ReplicaSet of the Rollout that does not use the object.
	FindingStray = "stray"
	// FindingLegacy: the original tool's controller: true owner reference to a ReplicaSet.
	FindingLegacy = "legacy"
	// FindingShared: a user that cannot own the object (a StatefulSet, DaemonSet, Job,
	// CronJob, bare Pod, or a ReplicaSet of an unchecked controller kind) also uses it: no mode
	// writes to it, -fix included (Auditor.AddShared).
	FindingShared = "shared"
)

// Status of one object under one ReplicaSet (Edge.Status).
const (
	EdgeOwned          = "owned"
	EdgeMissingOwner   = "missingOwner"
	EdgeLost           = "lost"
	EdgeAbsentOptional = "absentOptional"
	EdgeNotOptedIn     = "notOptedIn"
)

// Report is what an audit found (and, with Fix, changed: Run then reports the state read
// again after the fix). Its JSON form is `configmap-attacher audit -o json`; every list is
// present (possibly empty) and sorted.
type Report struct {
	Selector string     `json:"selector"`
	Rollouts []Workload `json:"rollouts"`
	// Deployments are the audited Deployments (-workloads deployments, the default).
	Deployments []Workload `json:"deployments"`
	// Gaps are, per namespace, the two figures the controller mode exports as gauges
	// (configmap_attacher_controller_unowned_objects and _lost_references), counted by the
	// same function (plugin.Gaps).
	Gaps []NamespaceGaps `json:"gaps"`
	// Unattributed holds findings about opted-in objects that no audited Rollout uses,
	// names or owns (only when whole namespaces are audited).
	Unattributed []Finding `json:"unattributed"`
	Summary      Counts    `json:"summary"`
	// Warnings are what could not be checked, e.g. a namespace whose users could not be read
	// (AddShared), one message each.
	Warnings []string `json:"warnings"`
	// Fix is set once Fix ran.
	Fix *FixResult `json:"fix,omitempty"`

	// additions are what Fix adds, per namespace and object (see queueFix).
	additions map[string]map[plugin.Object]*plugin.Candidate
}

// NamespaceGaps is one namespace's unowned objects and lost references (see plugin.Gaps).
type NamespaceGaps struct {
	Namespace      string `json:"namespace"`
	UnownedObjects int    `json:"unownedObjects"`
	LostReferences int    `json:"lostReferences"`
}

// Counts counts the findings, and the owner references Fix adds (fixable) or may not add
// (the object is not opted in).
type Counts struct {
	Lost          int `json:"lost"`
	Unowned       int `json:"unowned"`
	Stray         int `json:"stray"`
	Legacy        int `json:"legacy"`
	Shared        int `json:"shared"`
	MissingOwners int `json:"missingOwners"`
	Fixable       int `json:"fixable"`
	// SharedOwners are the missing owners of shared objects: Fix may not add them.
	SharedOwners int `json:"sharedOwners"`
	Errors       int `json:"errors"`
}

// FixResult is what Fix changed.
type FixResult struct {
	// Added lists each patched object with the ReplicaSets added as its owners.
	Added []Addition `json:"added"`
	// Errors are the objects Fix could not patch, one message per namespace.
	Errors []string `json:"errors"`
	// Skipped are the objects the core's rules left alone (a user that cannot own them,
	// a credential, outside --require-opt-in), one message each.
	Skipped []string `json:"skipped"`
}

// Addition is one object Fix patched.
type Addition struct {
	Namespace   string      `json:"namespace"`
	Kind        plugin.Kind `json:"kind"`
	Name        string      `json:"name"`
	ReplicaSets []string    `json:"replicaSets"`
}

// Workload is one audited workload (a Rollout, or a Deployment): its ReplicaSets, the
// objects they use, and the findings.
type Workload struct {
	// Kind is Rollout or Deployment.
	Kind        string       `json:"kind"`
	Namespace   string       `json:"namespace"`
	Name        string       `json:"name"`
	UID         types.UID    `json:"uid"`
	Error       string       `json:"error,omitempty"`
	ReplicaSets []ReplicaSet `json:"replicaSets"`
	Objects     []Object     `json:"objects"`
	Findings    []Finding    `json:"findings"`
}

// ReplicaSet is one ReplicaSet of the workload and the objects its pod template references.
type ReplicaSet struct {
	Name     string    `json:"name"`
	UID      types.UID `json:"uid"`
	Revision string    `json:"revision,omitempty"`
	Current  bool      `json:"current"`
	Deleting bool      `json:"deleting"`
	Objects  []Edge    `json:"objects"`
}

// Edge is one object a ReplicaSet references, with Status one of owned, missingOwner, lost,
// absentOptional or notOptedIn. Fixable marks a missing owner that Fix adds.
type Edge struct {
	Kind    plugin.Kind `json:"kind"`
	Name    string      `json:"name"`
	Status  string      `json:"status"`
	Fixable bool        `json:"fixable,omitempty"`
	// Shared marks a missing owner of a shared object (see FindingShared).
	Shared bool `json:"shared,omitempty"`
}

// Object is one object that concerns the workload: referenced by one of its ReplicaSets,
// named in one of its configmap-attacher steps, or owned by one of its ReplicaSets.
type Object struct {
	Kind        plugin.Kind `json:"kind"`
	Name        string      `json:"name"`
	Exists      bool        `json:"exists"`
	OptedIn     bool        `json:"optedIn"`
	NamedInStep bool        `json:"namedInStep"`
	// UsedBy are the workload's ReplicaSets whose pod template references the object.
	UsedBy []string `json:"usedBy"`
	// Owners is metadata.ownerReferences, in order (Index is the position in that list).
	Owners []Owner `json:"owners"`
	// MissingOwners are the ReplicaSets in UsedBy that do not own the object.
	MissingOwners []string `json:"missingOwners"`
	// Fixable: Fix adds MissingOwners (the object is opted in or named in a step, and the
	// core's rules let Fix write it).
	Fixable bool `json:"fixable"`
	// SharedWith are the users of the object that cannot own it, or (no live controller
	// maintains it) the users outside the workload (see FindingShared).
	SharedWith []string `json:"sharedWith"`

	// labels are the object's labels as read (whether a controller maintains it).
	labels map[string]string
}

// Object returns the object's identity.
func (o Object) Object() plugin.Object { return plugin.Object{Kind: o.Kind, Name: o.Name} }

// Owner is one owner reference of an object.
type Owner struct {
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
	Type       string      `json:"type"`
	Namespace  string      `json:"namespace"`
	Kind       plugin.Kind `json:"kind"`
	Name       string      `json:"name"`
	ReplicaSet string      `json:"replicaSet,omitempty"`
	Message    string      `json:"message"`
	Command    string      `json:"command,omitempty"`
	// index is the owner reference's position (stray, legacy), -1 otherwise.
	index int
}

// Failed reports an object lost, or something that could not be audited or fixed: the
// command exits 1.
func (r *Report) Failed() bool {
	return r.Summary.Lost > 0 || r.Summary.Errors > 0 || (r.Fix != nil && len(r.Fix.Errors) > 0)
}

// summarize fills Summary from the workloads and the unattributed findings.
func (r *Report) summarize() {
	for _, list := range [][]Workload{r.Rollouts, r.Deployments} {
		for _, w := range list {
			r.count(w.Findings)
			if w.Error != "" {
				r.Summary.Errors++
			}
			for _, o := range w.Objects {
				r.Summary.MissingOwners += len(o.MissingOwners)
				switch {
				case o.Fixable:
					r.Summary.Fixable += len(o.MissingOwners)
				case len(o.SharedWith) > 0:
					r.Summary.SharedOwners += len(o.MissingOwners)
				}
			}
		}
	}
	r.count(r.Unattributed)
}

func (r *Report) count(fs []Finding) {
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
		case FindingShared:
			r.Summary.Shared++
		}
	}
}

func newReport(selector string) *Report {
	return &Report{Selector: selector, Rollouts: []Workload{}, Deployments: []Workload{}, Gaps: []NamespaceGaps{}, Unattributed: []Finding{}, Warnings: []string{},
		additions: map[string]map[plugin.Object]*plugin.Candidate{}}
}
