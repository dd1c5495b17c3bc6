package plugin

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Discovery and adoption: the object-keyed stage discovery, audit -fix and the controller share.

// discover adds every object matching the discovery selector (and, with the policy on, the
// opt-in selector) that a live ReplicaSet references and that lacks it as an owner: the
// candidates of one metadata list per kind that some template references, through planAdoption,
// the same stage Adopt runs for audit -fix and the controller.
func (a *Attacher) discover(ctx context.Context, req Request, rss []*appsv1.ReplicaSet, refs []References, p *Plan, attach map[Object]*Write) error {
	sel := req.Discover
	if req.Policy.RequireOptIn {
		r, _ := req.Policy.optIn().Requirements()
		sel = sel.Add(r...)
	}
	var needCM, needSecret bool
	for i, rs := range rss {
		if Live(rs) {
			needCM = needCM || len(refs[i].ConfigMaps) > 0
			needSecret = needSecret || len(refs[i].Secrets) > 0
		}
	}
	var kinds []Kind
	if needCM {
		kinds = append(kinds, KindConfigMap)
	}
	if needSecret {
		kinds = append(kinds, KindSecret)
	}
	cache := refCache{}
	for i, rs := range rss {
		cache[rs.UID] = refs[i]
	}
	var cands []Candidate
	for _, k := range kinds {
		metas, err := a.listMeta(ctx, req.Workload.Namespace, k, sel)
		if err != nil {
			return fmt.Errorf("discover: %w", err)
		}
		for name, m := range metas {
			o := Object{k, name}
			if w, ok := attach[o]; ok {
				// Listed too: the owners it already has need no write.
				w.ReplicaSets = MissingOwners(o, m.Owners, w.ReplicaSets, nil)
				continue
			}
			cands = append(cands, Candidate{Object: o, UID: m.UID, Labels: m.Labels, Owners: m.Owners, ReplicaSets: rss})
		}
	}
	ws, owned := planAdoption(cands, req.Policy, cache)
	for i := range ws {
		attach[ws[i].Object] = &ws[i]
	}
	p.Owned += owned
	return nil
}

// Candidate is an object that may be adopted without being listed: its metadata (never its
// data) and the ReplicaSets that may become its owners (only those whose pod template
// references it, and only live ones, do).
type Candidate struct {
	Object Object
	// UID is the object's UID as read (empty: unknown); the patch carries it as a precondition.
	UID    types.UID
	Labels map[string]string
	Owners []metav1.OwnerReference
	// ReplicaSets may become owners; Refs, when set, are their references in the same order
	// (a caller that keeps only references, not templates, passes them).
	ReplicaSets []*appsv1.ReplicaSet
	Refs        []References
	// VerifyOwners: the caller's view may be stale and the object has no ReplicaSet owner yet:
	// confirm with a live read that each ReplicaSet still exists before adding it.
	VerifyOwners bool
}

// refCache holds each ReplicaSet's references, so a template is walked once per run.
type refCache map[types.UID]References

func (c refCache) of(rs *appsv1.ReplicaSet) References {
	r, ok := c[rs.UID]
	if !ok {
		r = TemplateReferences(&rs.Spec.Template.Spec)
		c[rs.UID] = r
	}
	return r
}

// planAdoption decides the writes for candidates: each gets, in one write, every live
// ReplicaSet among its own that references it and does not own it yet (MissingOwners). With
// the policy on, a candidate that does not match the opt-in selector is never adopted. It
// returns the writes, sorted, and how many candidates in use already had every owner.
func planAdoption(cands []Candidate, policy Policy, cache refCache) ([]Write, int) {
	var ws []Write
	owned := 0
	for _, c := range cands {
		if policy.RequireOptIn && !policy.optIn().Matches(labels.Set(c.Labels)) {
			continue
		}
		refs := c.Refs
		if len(refs) != len(c.ReplicaSets) {
			refs = make([]References, len(c.ReplicaSets))
			for i, rs := range c.ReplicaSets {
				refs[i] = cache.of(rs)
			}
		}
		used := false
		for i, rs := range c.ReplicaSets {
			used = used || (Live(rs) && refs[i].Has(c.Object))
		}
		switch missing := MissingOwners(c.Object, c.Owners, c.ReplicaSets, refs); {
		case len(missing) > 0:
			ws = append(ws, Write{Object: c.Object, ObjectUID: c.UID, ReplicaSets: missing, verify: c.VerifyOwners})
		case used:
			owned++
		}
	}
	sortWrites(ws)
	return ws, owned
}

// Adopt is the object-keyed stage of the pipeline on its own, for callers that hold the
// objects' metadata already: audit -fix (its snapshot) and the controller (its caches). Each
// candidate gets one add-only patch with every live ReplicaSet that uses it and does not own it
// yet; with policy.RequireOptIn only opted-in candidates are adopted. A problem with one object
// (404, 403, a rejection) is a warning and an ObjectError, not the verdict: nobody listed it.
// The error is a transient one that outlived its retries (the unsent patches were abandoned).
func (a *Attacher) Adopt(ctx context.Context, ns string, cands []Candidate, policy Policy, dryRun bool) (Result, error) {
	ws, owned := planAdoption(cands, policy, refCache{})
	res := Result{Plan: Plan{Writes: ws, Owned: owned}}
	if dryRun {
		res.Added = ws
		res.Message = res.dryRunMessage()
		return res, nil
	}
	out := a.write(ctx, ns, ws)
	res.Added, res.Warnings, res.Errors = out.added, out.warnings, out.objectErrors
	res.Message = discoverMessage(res.Added, res.Owned)
	return res, out.transient
}

func sortWrites(ws []Write) {
	sort.SliceStable(ws, func(i, j int) bool {
		if ws[i].Listed != ws[j].Listed {
			return ws[i].Listed
		}
		return CompareObjects(ws[i].Object, ws[j].Object) < 0
	})
}
