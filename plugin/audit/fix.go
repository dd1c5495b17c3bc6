package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// queueFix records a classified object that Fix may give owners: one candidate per object,
// merged across the namespace's workloads. Which ReplicaSets become its owners is the core's
// to say (every user in the namespace counts), not the workload's that found it.
func queueFix(additions map[string]map[plugin.Object]*plugin.Candidate, ns string, c classified) {
	if len(c.missing) == 0 {
		return
	}
	byObj := additions[ns]
	if byObj == nil {
		byObj = map[plugin.Object]*plugin.Candidate{}
		additions[ns] = byObj
	}
	if byObj[c.obj] == nil {
		// The snapshot may be seconds old by the time Fix writes: the UID guards against a
		// recreated object.
		m := c.meta
		byObj[c.obj] = &plugin.Candidate{Object: c.obj, UID: m.uid, Labels: m.labels, Owners: m.owners}
	}
}

// Fix adds the missing owner references the audit found through the core's one write entry
// point ((*plugin.Attacher).Reconcile), under the administrator's Policy: what the step or the
// controller would write for the same objects, and never more. Each namespace's users are
// read again first (every user counts, whatever controls it); each object gets one add-only
// strategic merge patch with every live ReplicaSet it lacks. It never removes or changes an
// existing reference. What it did is rep.Fix.
func (a *Auditor) Fix(ctx context.Context, rep *Report) {
	fix := &FixResult{Added: []Addition{}, Errors: []string{}, Skipped: []string{}}
	rep.Fix = fix
	nss := make([]string, 0, len(rep.additions))
	for ns := range rep.additions {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		var cands []plugin.Candidate
		for _, c := range rep.additions[ns] {
			cands = append(cands, *c)
		}
		users, err := a.attacher().ReadUsage(ctx, ns)
		if err != nil {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: nothing written: %v", ns, err))
			continue
		}
		res, err := a.attacher().Reconcile(ctx, plugin.Request{Namespace: ns, Users: users, Candidates: cands, Policy: a.Policy,
			Maintainers: &plugin.Maintainers{Leases: a.ControllerLeases}})
		for _, w := range res.Added {
			fix.Added = append(fix.Added, Addition{Namespace: ns, Kind: w.Object.Kind, Name: w.Object.Name, ReplicaSets: w.Names()})
		}
		for _, h := range res.Handed {
			fix.Skipped = append(fix.Skipped, fmt.Sprintf("namespace %s: %s is also used by %s: left to the controller of Lease %s, which maintains those owners", ns, h.Object, strings.Join(h.Users, ", "), h.Lease))
		}
		for _, b := range res.Blocked {
			fix.Skipped = append(fix.Skipped, fmt.Sprintf("namespace %s: %s", ns, b.Message()))
		}
		for _, sk := range res.Skipped {
			fix.Skipped = append(fix.Skipped, fmt.Sprintf("namespace %s: %s", ns, plugin.SkipMessage(sk)))
		}
		for _, warn := range res.Warnings {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %s", ns, warn))
		}
		if err != nil {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %v", ns, err))
		}
	}
}
