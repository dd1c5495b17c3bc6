package audit

import (
	"fmt"
	"slices"

	"github.com/configmap-attacher/configmap-attacher/plugin"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// history is one workload's ReplicaSets and the objects that concern it.
type history struct {
	// all is every ReplicaSet, current first, then newest first by creation time.
	all     []*appsv1.ReplicaSet
	current *appsv1.ReplicaSet
	// live are the ReplicaSets not being deleted, in the order of all, with their references;
	// byUID indexes them.
	live  []rsRefs
	byUID map[types.UID]int
	// objects are those the workload's ReplicaSets reference or own or its steps name, sorted.
	objects []plugin.Object
}

// rsRefs is one live ReplicaSet with what its pod template references.
type rsRefs struct {
	rs       *appsv1.ReplicaSet
	refs     plugin.References
	required plugin.References
	// creds are the objects the template uses only as a credential (plugin.CredentialOnly).
	creds plugin.References
}

// collect gathers the workload's ReplicaSets from the snapshot (plugin.OwnReplicaSets: its
// selector and controller UID, oldest first by creation time, as plugin.SortReplicaSets
// orders them) and the objects that concern it. The order shown is the current ReplicaSet,
// then newest first by creation time, as the controller orders them: undo gives a re-used
// ReplicaSet the newest revision number, so revision order would misplace it. ReplicaSets
// being deleted are shown but neither checked nor given owners.
func collect(aw auditedWorkload, snap *snapshot) (*history, error) {
	rss, err := plugin.OwnReplicaSets(snap.replicaSets, aw.w)
	if err != nil {
		return nil, err
	}
	h := &history{current: aw.current(rss), byUID: map[types.UID]int{}}
	if h.current != nil {
		h.all = append(h.all, h.current)
	}
	for i := len(rss) - 1; i >= 0; i-- {
		if rss[i] != h.current {
			h.all = append(h.all, rss[i])
		}
	}
	for _, rs := range h.all {
		if !plugin.Live(rs) {
			continue
		}
		spec := &rs.Spec.Template.Spec
		h.byUID[rs.UID] = len(h.live)
		h.live = append(h.live, rsRefs{rs: rs, refs: plugin.TemplateReferences(spec), required: plugin.RequiredReferences(spec), creds: plugin.CredentialOnly(spec)})
	}

	objs := map[plugin.Object]bool{}
	for o := range aw.named {
		objs[o] = true
	}
	for _, l := range h.live {
		for _, o := range plugin.ObjectsOf(l.refs) {
			objs[o] = true
		}
	}
	for o, m := range snap.objects {
		for _, ref := range m.owners {
			if _, ok := h.byUID[ref.UID]; ok && ref.Kind == "ReplicaSet" {
				objs[o] = true
			}
		}
	}
	for o := range objs {
		h.objects = append(h.objects, o)
	}
	slices.SortFunc(h.objects, plugin.CompareObjects)
	return h, nil
}

// classified is one object's state under the workload's ReplicaSets.
type classified struct {
	obj    plugin.Object
	meta   objMeta
	exists bool
	// candidate: Fix may add owners (the object exists, is opted in or named in a step, and
	// the core's rules let Fix write it: refused says why not).
	candidate bool
	// refused, when set, is why an object opted in or named in a step is no candidate: the
	// administrator's -require-opt-in, or the credentials rule (see Auditor.refusal).
	refused string
	view    Object
	// edges are the object's status under each live ReplicaSet that references it, by UID.
	edges map[types.UID]Edge
	// lostBy labels the ReplicaSets that require the object although it does not exist;
	// lostCurrent says the current one is among them.
	lostBy      []string
	lostCurrent bool
	// missing are the ReplicaSets that use the object without owning it and that Fix adds.
	missing []*appsv1.ReplicaSet
}

// classify decides the object's status under each live ReplicaSet that references it:
//
//	does not exist, required by the template → lost
//	does not exist, optional                 → absentOptional
//	the ReplicaSet owns it                   → owned
//	opted in or named in a step              → missingOwner, fixable (Fix adds it)
//	owned by other ReplicaSets only          → missingOwner, not fixable (not opted in)
//	otherwise                                → notOptedIn
func (a *Auditor) classify(o plugin.Object, aw auditedWorkload, h *history, snap *snapshot) classified {
	m, exists := snap.objects[o]
	c := classified{obj: o, meta: m, exists: exists, edges: map[types.UID]Edge{},
		view: Object{Kind: o.Kind, Name: o.Name, Exists: exists, NamedInStep: aw.named[o], OptedIn: exists && a.optedIn(m, aw.stepSels),
			UsedBy: []string{}, Owners: []Owner{}, MissingOwners: []string{}, SharedWith: []string{}, labels: m.labels}}
	if exists && (c.view.OptedIn || c.view.NamedInStep) {
		c.refused = a.refusal(o, m, h)
		c.candidate = c.refused == ""
	}
	have := map[types.UID]bool{}
	for i, ref := range m.owners {
		have[ref.UID] = true
		c.view.Owners = append(c.view.Owners, Owner{Index: i, APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ref.Controller != nil && *ref.Controller})
	}
	for _, l := range h.live {
		if !l.refs.Has(o) {
			continue
		}
		c.view.UsedBy = append(c.view.UsedBy, l.rs.Name)
		e := Edge{Kind: o.Kind, Name: o.Name}
		switch {
		case !exists && l.required.Has(o):
			e.Status = EdgeLost
			c.lostBy = append(c.lostBy, rsLabel(l.rs, h.current))
			c.lostCurrent = c.lostCurrent || l.rs == h.current
		case !exists:
			e.Status = EdgeAbsentOptional
		case have[l.rs.UID]:
			e.Status = EdgeOwned
		case c.candidate:
			e.Status, e.Fixable = EdgeMissingOwner, true
			c.missing = append(c.missing, l.rs)
			c.view.MissingOwners = append(c.view.MissingOwners, l.rs.Name)
		case plugin.HasReplicaSetOwner(m.owners):
			// Not opted in, yet owned by other ReplicaSets: it goes with them while this
			// one still uses it. Fix may not touch it; say so.
			e.Status = EdgeMissingOwner
			c.view.MissingOwners = append(c.view.MissingOwners, l.rs.Name)
		default:
			e.Status = EdgeNotOptedIn
		}
		c.edges[l.rs.UID] = e
	}
	c.view.Fixable = len(c.missing) > 0
	return c
}

// policyOptIn is the administrator's opt-in selector (plugin.Policy's default when unset).
func (a *Auditor) policyOptIn() labels.Selector {
	if !plugin.Positive(a.Policy.OptIn) {
		return plugin.OptInSelector()
	}
	return a.Policy.OptIn
}

// refusal is why Fix may not write an object that the audit counts as opted in or that a step
// names ("" when it may), by the rules the core applies to a candidate (plugin planWrites):
// outside the administrator's -require-opt-in; or used by the workload's ReplicaSets only as
// a credential (an image pull secret, a volume's secretRef) without matching the policy's
// opt-in selector. (A user that cannot own the object is AddShared's, which reads them.)
func (a *Auditor) refusal(o plugin.Object, m objMeta, h *history) string {
	optIn := a.policyOptIn()
	if optIn.Matches(labels.Set(m.labels)) {
		return ""
	}
	if a.Policy.RequireOptIn {
		return fmt.Sprintf("-require-opt-in is set and it does not match %s", optIn)
	}
	used, creds := false, true
	for _, l := range h.live {
		if l.refs.Has(o) {
			used = true
			creds = creds && l.creds.Has(o)
		}
	}
	if used && creds {
		return fmt.Sprintf("its ReplicaSets use it only as a credential (imagePullSecrets or a volume's secretRef) and it does not match %s", optIn)
	}
	return ""
}

// optedIn: the object matches the opt-in selector or a step's discover selector.
func (a *Auditor) optedIn(m objMeta, stepSels []labels.Selector) bool {
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

// optInLabel names the selector that opts the object in ("" for none).
func (a *Auditor) optInLabel(m objMeta, stepSels []labels.Selector) string {
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

// views is the per-ReplicaSet view: every ReplicaSet in the order of h.all, with the edges of
// the objects it references (in object order).
func (h *history) views(edges map[plugin.Object]map[types.UID]Edge) []ReplicaSet {
	out := []ReplicaSet{}
	for _, rs := range h.all {
		r := ReplicaSet{Name: rs.Name, UID: rs.UID, Revision: revisionOf(rs), Current: rs == h.current,
			Deleting: rs.DeletionTimestamp != nil, Objects: []Edge{}}
		for _, o := range h.objects {
			if e, ok := edges[o][rs.UID]; ok {
				r.Objects = append(r.Objects, e)
			}
		}
		out = append(out, r)
	}
	return out
}

// revisionOf is the revision the workload's controller wrote on the ReplicaSet.
func revisionOf(rs *appsv1.ReplicaSet) string {
	if r := rs.Annotations[plugin.RevisionAnnotation]; r != "" {
		return r
	}
	return rs.Annotations[plugin.DeploymentRevisionAnnotation]
}
