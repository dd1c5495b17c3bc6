package plugin

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
)

// The top: Reconcile, which runs the layers in order. Reading down from here: read.go (what
// the run reads), plan.go (the pure plan) and owners.go (decideOwners), write.go (per object:
// confirm.go's live facts, decideOwners, then send.go's patch).

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
