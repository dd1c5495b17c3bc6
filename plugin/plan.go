package plugin

import (
	"fmt"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The pure plan: the rule table of an explicit list (docs/step.md) and the rules every
// candidate goes through, from what the run read. No request and no ctx here: each object's
// owners come from decideOwners (owners.go).

// check refuses a request no rule can serve: a target being deleted (an object it alone owned
// would be collected with it), a run without the namespace's users, a list without a target.
func (r Request) check() error {
	if r.Users == nil && (r.ReadUsers == nil || r.Maintainers == nil) {
		return fmt.Errorf("internal error: a run needs the namespace's users")
	}
	if r.Target != nil && !Live(r.Target) {
		return &FailError{targetDeleting(r.Target.Name)}
	}
	if r.Target == nil && len(r.Objects) > 0 {
		return fmt.Errorf("internal error: an explicit list needs a target ReplicaSet")
	}
	return nil
}

// historyOf is the workload's ReplicaSets (the target included), oldest first, and what each
// template references: walked once, for the rule table and discovery.
func historyOf(req Request) history {
	rss := append([]*appsv1.ReplicaSet(nil), req.ReplicaSets...)
	if req.Target != nil && !slices.ContainsFunc(rss, func(rs *appsv1.ReplicaSet) bool { return rs.UID == req.Target.UID }) {
		rss = append(rss, req.Target)
	}
	SortReplicaSets(rss)
	refs := make([]References, len(rss))
	for i, rs := range rss {
		refs[i] = TemplateReferences(&rs.Spec.Template.Spec)
	}
	return history{rss: rss, refs: refs}
}

// ruleTable applies the rule table to the explicit list:
//
//	referenced by the target's template  → a candidate: the target and every other user own it
//	used only by ReplicaSets created after the target → skip: a rollback
//	used only by older ReplicaSets       → skip if something listed attaches, else fail: stale list
//	used by no ReplicaSet                → fail, unless allowUnreferenced (then: the target)
//
// Creation times are compared as the controller's isRollbackWithinWindow does: strictly, so
// a ReplicaSet created in the same second as the target is not newer.
func ruleTable(req Request, rss []*appsv1.ReplicaSet, refs []References) (Plan, []candidate, error) {
	p := Plan{Target: req.Target}
	var cands []candidate
	if len(req.Objects) == 0 {
		return p, nil, nil
	}
	target := TemplateReferences(&req.Target.Spec.Template.Spec)
	var older []Skip
	for _, o := range req.Objects {
		if target.Has(o) {
			cands = append(cands, candidate{Candidate: Candidate{Object: o}, listed: true})
			p.Listed = append(p.Listed, o)
			continue
		}
		var newer, old []string
		for i, rs := range rss {
			if rs.UID == req.Target.UID || !refs[i].Has(o) {
				continue
			}
			if req.Target.CreationTimestamp.Before(&rs.CreationTimestamp) {
				newer = append(newer, rs.Name)
			} else {
				old = append(old, rs.Name)
			}
		}
		switch {
		case len(newer) > 0:
			p.Skipped = append(p.Skipped, Skip{Object: o, Reason: SkipRollback, UsedBy: append(newer, old...)})
		case len(old) > 0:
			older = append(older, Skip{Object: o, Reason: SkipOlder, UsedBy: old})
		case req.AllowUnreferenced:
			target := OwnerOf(req.Target)
			cands = append(cands, candidate{Candidate: Candidate{Object: o}, listed: true, forced: &target})
			p.Listed = append(p.Listed, o)
			p.Unreferenced = append(p.Unreferenced, o)
		default:
			p.Unreferenced = append(p.Unreferenced, o)
		}
	}
	if len(p.Unreferenced) > 0 && !req.AllowUnreferenced {
		return p, nil, &FailError{unreferencedRefusal(p.Unreferenced, req)}
	}
	if len(older) > 0 && len(p.Listed) == 0 && !anyRollback(p.Skipped) {
		return p, nil, &FailError{staleListRefusal(older, req)}
	}
	p.Skipped = append(p.Skipped, older...)
	return p, cands, nil
}

func anyRollback(skips []Skip) bool {
	for _, s := range skips {
		if s.Reason == SkipRollback {
			return true
		}
	}
	return false
}

// planWrites applies the rules every candidate goes through, whichever mode found it:
//
//	outside the administrator's --require-opt-in            → skipped (a listed one failed before)
//	a run scoped to its workload (Maintainers), and users
//	  outside the workload (other workloads' ReplicaSets,
//	  StatefulSets, DaemonSets, Jobs, CronJobs, bare Pods)    → a live controller maintains it: the workload's own
//	                                                           ReplicaSets only; else blocked (a listed one fails)
//	a user that cannot own it (StatefulSet, DaemonSet, Job,
//	  CronJob, bare Pod, a ReplicaSet of an unchecked kind)   → blocked: nothing written; a listed one fails the run
//	used only as a credential and not opted in               → skipped
//	otherwise                                                → every live ReplicaSet that uses it, whose
//	                                                           controller is live (or has none), and does
//	                                                           not own it yet, in one write
//
// An object that has no ReplicaSet owner yet, in a view that may be stale, has its new owners
// confirmed live (with their controllers) before the write.
func planWrites(req Request, p *Plan, in reading) error {
	req.Users = in.users // the view the run read (usersFor)
	p.Handed = append(p.Handed, handedUnread(req, in.cands, in.leases)...)
	optIn := req.Policy.optIn()
	ns, leases := in.ns, in.leases
	var refused []string
	for _, c := range in.cands {
		if c.dropped {
			continue
		}
		if !c.listed && req.Policy.RequireOptIn && !optIn.Matches(labels.Set(c.Labels)) {
			p.Skipped = append(p.Skipped, Skip{Object: c.Object, Reason: SkipOptIn, OptIn: optIn.String()})
			continue
		}
		users := req.Users.UsersOf(c.Object)
		f := ownerFacts{users: users, forced: c.forced, has: c.Owners}
		if sh, shared := req.shared(users); shared {
			// A run scoped to its workload keeps true only the workload's own ReplicaSets: the
			// other users' later revisions are a live controller's to add, or nobody's.
			lease, why := MaintainedBy(leases, req.Workload.Kind, ns, c.Labels, req.Maintainers.now())
			if lease == "" {
				who := req.workloadName()
				if who == "" {
					who = sh.Workload
				}
				b := Blocked{Object: c.Object, Users: sh.Others, Unmaintained: why, Workload: who}
				p.Blocked = append(p.Blocked, b)
				if c.listed {
					refused = append(refused, b.Message())
				}
				continue
			}
			p.Handed = append(p.Handed, Handover{Object: c.Object, Users: sh.Others, Lease: lease})
			if req.Workload.UID == "" {
				continue // no workload of its own (audit -fix): the controller writes every owner
			}
			f.only = &req.Workload
		}
		d := decideOwners(f)
		if len(d.blockers) > 0 {
			b := Blocked{Object: c.Object, Users: d.blockers}
			p.Blocked = append(p.Blocked, b)
			if c.listed {
				refused = append(refused, b.Message())
			}
			continue
		}
		if !c.listed && !optIn.Matches(labels.Set(c.Labels)) && len(d.owning) > 0 && credentialOnly(d.owning) {
			var by []string
			for _, o := range d.owning {
				by = append(by, o.ReplicaSet.Name)
			}
			p.Skipped = append(p.Skipped, Skip{Object: c.Object, Reason: SkipCredential, UsedBy: by, OptIn: optIn.String()})
			continue
		}
		if c.listed && !containsOwner(d.want, req.Target.UID) {
			refused = append(refused, targetCannotOwn(req.Target.Name, c.Object))
			continue
		}
		if len(d.add) == 0 {
			if !c.listed && len(d.want) > 0 {
				p.Owned++
			}
			continue
		}
		p.Writes = append(p.Writes, Write{Object: c.Object, ObjectUID: c.UID, Owners: d.add, Listed: c.listed, facts: f,
			verify: req.Users.Stale() && !c.ReplicaSetOwned && !HasReplicaSetOwner(c.Owners), recheck: c.recheck})
	}
	sortWrites(p.Writes)
	sort.SliceStable(p.Blocked, func(i, j int) bool { return CompareObjects(p.Blocked[i].Object, p.Blocked[j].Object) < 0 })
	if len(refused) > 0 {
		return &FailError{refusals(refused)}
	}
	return nil
}

// shared reports whether a run scoped to its workload (Maintainers) sees an object with users
// outside the workload that some mode can own (users no mode can own block as always), and
// how its users split.
func (r Request) shared(u Users) (Sharing, bool) {
	if r.Maintainers == nil {
		return Sharing{}, false
	}
	sh := SharingOf(u, r.Workload)
	return sh, len(sh.Unownable) == 0 && len(sh.Others) > 0
}

// sharedAny reports whether some candidate is shared (Request.shared): only then are the
// controllers' Leases read.
func sharedAny(req Request, cands []candidate) bool {
	for _, c := range cands {
		if _, ok := req.shared(req.Users.UsersOf(c.Object)); ok && !c.dropped {
			return true
		}
	}
	return false
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
	ns := req.namespace()
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

func sortWrites(ws []Write) {
	sort.SliceStable(ws, func(i, j int) bool {
		if ws[i].Listed != ws[j].Listed {
			return ws[i].Listed
		}
		return CompareObjects(ws[i].Object, ws[j].Object) < 0
	})
}
