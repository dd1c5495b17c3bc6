package plugin

import (
	"context"
	"fmt"
	"golang.org/x/sync/errgroup"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The ownership core: every mode (the step, the command line, audit -fix and the controller)
// decides what to write with Reconcile, so there is one set of rules.

// Request is one run of the ownership core, the one write entry point of every mode: the step
// and the Job (an explicit list and a target, discovery), the controller and audit -fix
// (Candidates whose metadata they hold). Modes differ only in how they find candidates and
// report outcomes; every rule is applied here.
type Request struct {
	// Namespace of every object (default Workload.Namespace).
	Namespace string
	// Users is the namespace's view of who uses what: ReadUsage, or the controller's caches.
	// Required unless ReadUsers is set.
	Users UserView
	// ReadUsers, when Users is nil, reads the namespace's users (ReadUsage) for a run scoped
	// to its workload (Maintainers): only when some object is not maintained by a live
	// controller, once. The objects a live controller maintains get the workload's own
	// ReplicaSets that use them (ReplicaSets), whatever their other users: the controller
	// keeps those (usersFor).
	ReadUsers func(ctx context.Context) (UserView, error)
	// Workload and ReplicaSets, with an explicit list or discovery: the workload the run is
	// for and its own ReplicaSets (the rule table and discovery look at its history).
	Workload    Workload
	ReplicaSets []*appsv1.ReplicaSet
	// Target is the ReplicaSet being rolled out; required when Objects is not empty.
	Target *appsv1.ReplicaSet
	// Objects is the explicit list (the step config, -configmaps/-secrets).
	Objects           []Object
	AllowUnreferenced bool
	// Discover, when not nil, also adopts every object matching it that a ReplicaSet of the
	// workload uses.
	Discover labels.Selector
	// Candidates are objects found by the caller (the controller, audit -fix), with the
	// metadata it read.
	Candidates []Candidate
	Policy     Policy
	DryRun     bool
	// Source is what the explicit list is called in messages (default "the step config"; the
	// Job: "-configmaps/-secrets").
	Source string
	// Maintainers, when set, scopes the run to its workload (the step, the Job, audit -fix): it
	// can keep true only what that workload's own later runs see again. An object whose users
	// are all the workload's ReplicaSets gets them as owners; an object other users share gets
	// the workload's own ReplicaSets only, where a live controller maintains it (one of
	// Maintainers.Leases, MaintainedBy), and is refused otherwise (a listed one fails the run,
	// nothing written). Nil: the run maintains every user itself (the controller).
	Maintainers *Maintainers
}

// Maintainers are where a run scoped to one workload looks for a controller that keeps the
// owners of shared config current.
type Maintainers struct {
	// Leases are the controllers' leader Leases to read (none: no controller).
	Leases []LeaseRef
	// Now is the clock the Leases are judged by (default time.Now).
	Now func() time.Time
}

func (m *Maintainers) now() time.Time {
	if m.Now == nil {
		return time.Now()
	}
	return m.Now()
}

// listName is what the explicit list is called in messages.
func (r Request) listName() string {
	if r.Source == "" {
		return "the step config"
	}
	return r.Source
}

// Skip reasons.
const (
	SkipRollback   = "rollback"
	SkipOlder      = "older"
	SkipCredential = "credential"
	SkipOptIn      = "opt-in"
)

// Skip is a listed object that is left alone, and why.
type Skip struct {
	Object Object
	// Reason is SkipRollback (only ReplicaSets created after the target use it: undo re-ran a
	// newer step list on an older ReplicaSet), SkipOlder (only older revisions use it) or
	// SkipCredential (the target uses it only as a credential and it is not opted in) or
	// SkipOptIn (a candidate outside the administrator's --require-opt-in).
	Reason string
	UsedBy []string
	// OptIn is the opt-in selector in force (for messages).
	OptIn string
}

// Write is one object's patch: every ReplicaSet it gets as owner, in one request.
type Write struct {
	Object Object
	// ObjectUID, when set, is the object's UID as read: the patch carries it as a precondition.
	ObjectUID types.UID
	Owners    []Owner
	// Listed marks an object of the explicit list: its problems decide the verdict; those of
	// objects found by discovery are warnings.
	Listed bool
	// verify: confirm the ReplicaSets and their controllers with a live read first (the
	// view is stale and the object has no ReplicaSet owner yet).
	verify bool
	// recheck, when set, is a rule the object had no labels to be checked against (it did not
	// exist): one that appears during the grace is read and checked before it is patched.
	recheck *labelRule
}

// Names lists the owners' names.
func (w Write) Names() []string {
	out := make([]string, len(w.Owners))
	for i, o := range w.Owners {
		out[i] = o.String()
	}
	return out
}

// Plan is what a run writes, decided from pod templates and object metadata before any write.
type Plan struct {
	Target  *appsv1.ReplicaSet
	Writes  []Write
	Skipped []Skip
	// Unreferenced are listed objects no ReplicaSet references (attached to the target only
	// with AllowUnreferenced).
	Unreferenced []Object
	// Listed are the explicit objects the target gets (already owned ones included).
	Listed []Object
	// Owned counts objects found by discovery that already have every owner they need.
	Owned int
	// Blocked are objects that a user that cannot own them also uses, or (a run scoped to its
	// workload) that other users share and no live controller maintains: nothing is written to
	// them (a listed one fails the run).
	Blocked []Blocked
	// Handed are shared objects that got only the workload's own ReplicaSets: a live
	// controller maintains their other users.
	Handed []Handover
}

// Handover is a shared object whose other users a live controller maintains.
type Handover struct {
	Object Object
	Users  []string
	// Lease is the controller's Lease (namespace/name).
	Lease string
}

// Blocked is an object left alone because not every user of it can own it.
type Blocked struct {
	Object Object
	// Users name the users that cannot own it, e.g. "StatefulSet cache"; with Unmaintained,
	// the users outside the run's workload.
	Users []string
	// Unmaintained, when set, is why no live controller maintains the object's other users
	// (one reason per Lease): the run is scoped to Workload and the object is shared.
	Unmaintained []string
	Workload     string
}

// Message is the refusal, e.g. "ConfigMap web-config-7f9c2 is also used by StatefulSet cache;
// configmap-attacher only manages config used by ReplicaSets alone".
func (b Blocked) Message() string { return blockedMessage(b) }

// Result is what Reconcile did (in a dry run: would do).
type Result struct {
	Plan
	// Added are the writes that went through (dry run: that would be sent).
	Added []Write
	// NotFound are listed objects that do not exist (dry run only; a real run fails on them).
	NotFound []Object
	// Warnings are problems with objects of older ReplicaSets found by discovery: logged and
	// reported, but they do not decide the verdict.
	Warnings []string
	// Errors are the per-object errors behind Warnings, for callers that count them by kind.
	Errors  []ObjectError
	Message string
}

// ObjectError is a write that failed for one object nobody listed.
type ObjectError struct {
	Object Object
	Err    error
}

// Reconcile is the one write entry point of every mode: sort the explicit list by the rule
// table, apply the administrator's policy, add discovery and the caller's candidates,
// then give each object every owner its users allow (users.go) and write (or, in a dry run,
// read) once per object. A permanent problem with the explicit list is a *FailError and
// nothing is written (except that a listed object that is still missing after the grace does
// not undo the patches of its siblings, which the message names).
func (a *Attacher) Reconcile(ctx context.Context, req Request) (Result, error) {
	var res Result
	ns := req.Namespace
	if ns == "" {
		ns = req.Workload.Namespace
	}
	if req.Users == nil && (req.ReadUsers == nil || req.Maintainers == nil) {
		return res, fmt.Errorf("internal error: a run needs the namespace's users")
	}
	if req.Target != nil && !Live(req.Target) {
		return res, &FailError{targetDeleting(req.Target.Name)}
	}
	if req.Target == nil && len(req.Objects) > 0 {
		return res, fmt.Errorf("internal error: an explicit list needs a target ReplicaSet")
	}
	rss := append([]*appsv1.ReplicaSet(nil), req.ReplicaSets...)
	if req.Target != nil && !slices.ContainsFunc(rss, func(rs *appsv1.ReplicaSet) bool { return rs.UID == req.Target.UID }) {
		rss = append(rss, req.Target)
	}
	SortReplicaSets(rss)
	refs := make([]References, len(rss))
	for i, rs := range rss {
		refs[i] = TemplateReferences(&rs.Spec.Template.Spec)
	}
	plan, cands, err := ruleTable(req, rss, refs)
	if err != nil {
		return res, err
	}
	if err := a.checkLabels(ctx, req, &plan, cands); err != nil {
		return res, err
	}
	if req.Discover != nil {
		found, err := a.discover(ctx, req, rss, refs, cands)
		if err != nil {
			return res, err
		}
		cands = append(cands, found...)
	}
	for _, c := range req.Candidates {
		cands = append(cands, candidate{Candidate: c, labelsKnown: true})
	}
	users, leases, warnings, err := a.usersFor(ctx, ns, req, cands)
	if err != nil {
		return res, err
	}
	req.Users = users
	res.Warnings = warnings
	plan.Handed = append(plan.Handed, handedUnread(req, cands, leases)...)
	if err := planWrites(req, &plan, cands, leases); err != nil {
		res.Plan = plan
		return res, err
	}
	res.Plan = plan
	if req.DryRun {
		return a.dryRun(ctx, ns, res)
	}
	out := a.write(ctx, ns, plan.Writes)
	out.source = req.listName()
	res.Added = out.added
	res.Warnings = append(res.Warnings, out.warnings...)
	res.Errors = out.objectErrors
	if err := out.err(); err != nil {
		return res, err
	}
	res.Message = res.message()
	return res, nil
}

// containsOwner reports whether owners hold the ReplicaSet with this UID.
func containsOwner(owners []Owner, uid types.UID) bool {
	return slices.ContainsFunc(owners, func(o Owner) bool { return o.UID == uid })
}

// usersFor is the view of the namespace's users the rules see, and the controllers' Leases a
// run scoped to its workload judges shared objects by.
//
// Given the users (Users): the Leases are read only when some candidate is shared, and the
// labels of shared candidates only beside a live controller.
//
// Reading them on demand (ReadUsers): the Leases first, then, beside a live controller, the
// labels of candidates not read yet; a candidate a live controller maintains (MaintainedBy) sees
// only the workload's own ReplicaSets (ownView), since the controller keeps its other users;
// the namespace's users are read only if some candidate is not maintained. The rule (ownersOf,
// planWrites) is the same either way.
func (a *Attacher) usersFor(ctx context.Context, ns string, req Request, cands []candidate) (UserView, []ControllerLease, []string, error) {
	if req.Users != nil {
		if req.Maintainers == nil || !sharedAny(req, cands) {
			return req.Users, nil, nil, nil
		}
		leases, warnings := a.readLeases(ctx, req.Maintainers.Leases)
		// The labels decide only beside a live controller (the Job's RBAC has no get on
		// ConfigMaps otherwise).
		if CoversNamespace(leases, req.Workload.Kind, ns, req.Maintainers.now()) {
			if err := a.sharedLabels(ctx, ns, req, cands); err != nil {
				return nil, nil, nil, err
			}
		}
		return req.Users, leases, warnings, nil
	}
	own := ownView(ns, req)
	live := 0
	for _, c := range cands {
		if !c.dropped {
			live++
		}
	}
	if live == 0 {
		return own, nil, nil, nil
	}
	leases, leaseWarnings := a.readLeases(ctx, req.Maintainers.Leases)
	now := req.Maintainers.now()
	if CoversNamespace(leases, req.Workload.Kind, ns, now) {
		// Only beside a live controller: a step-only install sends no label reads.
		a.candidateLabels(ctx, ns, cands)
	}
	covered := map[Object]bool{}
	for _, c := range cands {
		if lease, _ := MaintainedBy(leases, req.Workload.Kind, ns, c.Labels, now); lease != "" && c.labelsKnown && !c.dropped {
			covered[c.Object] = true
		}
	}
	if len(covered) == live {
		return own, leases, nil, nil
	}
	full, err := req.ReadUsers(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var warnings []string
	if w, ok := full.(interface{ ReadWarnings() []string }); ok {
		warnings = append(warnings, w.ReadWarnings()...)
	}
	view := maintainedView{own: own, full: full, covered: covered}
	// A refused Lease matters only to a shared object: a step-only install that shares
	// nothing is not warned on every run.
	if sharedAny(Request{Users: view, Workload: req.Workload, Maintainers: req.Maintainers}, cands) {
		warnings = append(warnings, leaseWarnings...)
	}
	return view, leases, warnings, nil
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

// candidateLabels reads the labels of the candidates whose labels were not read yet (a listed
// object without the opt-in policy): the controller maintains only opted-in objects. A read
// that fails leaves the labels unknown: the object then counts as not maintained, and its users
// are read (the Job's RBAC has no get on ConfigMaps and Secrets).
func (a *Attacher) candidateLabels(ctx context.Context, ns string, cands []candidate) {
	var g errgroup.Group
	g.SetLimit(a.concurrency())
	for i := range cands {
		c := &cands[i] // each goroutine writes its own element
		if c.labelsKnown || c.dropped {
			continue
		}
		g.Go(func() error {
			m, err := a.getMeta(ctx, ns, c.Object)
			switch {
			case err != nil:
				a.log().WithField("object", c.Object.String()).WithError(err).Debug("labels not read: its users will be")
			case m != nil:
				c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
			}
			return nil
		})
	}
	_ = g.Wait()
}

// handedUnread are the objects a live controller maintains whose other users the run did not
// read (maintainedView): named in the message as left to the controller.
func handedUnread(req Request, cands []candidate, leases []ControllerLease) []Handover {
	v, ok := req.Users.(maintainedView)
	var own *NamespaceUsage
	if !ok {
		if own, ok = req.Users.(*NamespaceUsage); !ok || req.ReadUsers == nil {
			return nil
		}
	}
	ns := req.Namespace
	if ns == "" {
		ns = req.Workload.Namespace
	}
	var out []Handover
	for _, c := range cands {
		if c.dropped || (own == nil && !v.covered[c.Object]) {
			continue
		}
		if lease, _ := MaintainedBy(leases, req.Workload.Kind, ns, c.Labels, req.Maintainers.now()); lease != "" {
			out = append(out, Handover{Object: c.Object, Lease: lease})
		}
	}
	return out
}
