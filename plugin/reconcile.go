package plugin

import "context"

// The top: Reconcile, which runs the layers in order. Reading down from here: read.go (what
// the run reads), plan.go (the pure plan) and owners.go (decideOwners), write.go (per object:
// confirm.go's live facts, decideOwners, then send.go's patch).

// Reconcile is the one write entry point of every mode. Its layers, in order: the rule table
// sorts the explicit list (plan.go); the run reads what its rules need: labels, discovery, the
// namespace's users and the controllers' Leases (read.go); the plan gives each object the
// owners decideOwners decides (plan.go, owners.go); then each object is written once (write.go):
// a stale view's owners confirmed live (confirm.go), decided again, and sent (send.go). A dry
// run reads instead of writing. A permanent problem with the explicit list is a *FailError and
// nothing is written (except that a listed object that is still missing after the grace does
// not undo the patches of its siblings, which the message names).
func (a *Attacher) Reconcile(ctx context.Context, req Request) (Result, error) {
	var res Result
	if err := req.check(); err != nil {
		return res, err
	}
	hist := historyOf(req)
	plan, cands, err := ruleTable(req, hist.rss, hist.refs)
	if err != nil {
		return res, err
	}
	in, err := a.read(ctx, req, hist, &plan, cands)
	if err != nil {
		return res, err
	}
	res.Warnings = in.warnings
	err = planWrites(req, &plan, in)
	res.Plan = plan
	if err != nil {
		return res, err
	}
	if req.DryRun {
		return a.dryRun(ctx, in.ns, res)
	}
	out := a.write(ctx, in.ns, plan.Writes)
	out.source = req.listName()
	return res.finish(out)
}
