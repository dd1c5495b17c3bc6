package audit

import (
	"context"
	"fmt"
	"sort"

	"github.com/configmap-attacher/configmap-attacher/plugin"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// queueFix records what Fix adds for a classified object: the ReplicaSets that use it
// without owning it, merged across the namespace's workloads into one candidate per object.
func queueFix(additions map[string]map[plugin.Object]*plugin.Candidate, ns string, c classified) {
	if len(c.missing) == 0 {
		return
	}
	byObj := additions[ns]
	if byObj == nil {
		byObj = map[plugin.Object]*plugin.Candidate{}
		additions[ns] = byObj
	}
	add := byObj[c.obj]
	if add == nil {
		// The snapshot may be seconds old by the time Fix writes: the UID guards against a
		// recreated object, and an object with no ReplicaSet owner yet has its new owners
		// confirmed first.
		m := c.meta
		add = &plugin.Candidate{Object: c.obj, UID: m.uid, Labels: m.labels, Owners: m.owners, VerifyOwners: !plugin.HasReplicaSetOwner(m.owners)}
		byObj[c.obj] = add
	}
	for _, rs := range c.missing {
		if !containsRS(add.ReplicaSets, rs.UID) {
			add.ReplicaSets = append(add.ReplicaSets, rs)
		}
	}
}

// Fix adds the missing owner references the audit found on opted-in and step-named objects
// through the core's adoption stage ((*plugin.Attacher).Adopt, the one ownership pipeline):
// one add-only strategic merge patch per object with every ReplicaSet it lacks, live owners
// only. It never removes or changes an existing reference. What it did is rep.Fix.
func (a *Auditor) Fix(ctx context.Context, rep *Report) {
	fix := &FixResult{Added: []Addition{}, Errors: []string{}}
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
		res, err := a.attacher().Adopt(ctx, ns, cands, plugin.Policy{}, false)
		for _, w := range res.Added {
			fix.Added = append(fix.Added, Addition{Namespace: ns, Kind: w.Object.Kind, Name: w.Object.Name, ReplicaSets: w.Names()})
		}
		for _, warn := range res.Warnings {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %s", ns, warn))
		}
		if err != nil {
			fix.Errors = append(fix.Errors, fmt.Sprintf("namespace %s: %v", ns, err))
		}
	}
}

func containsRS(rss []*appsv1.ReplicaSet, uid types.UID) bool {
	for _, rs := range rss {
		if rs.UID == uid {
			return true
		}
	}
	return false
}
