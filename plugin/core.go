package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
)

// This file is the ownership core: every mode (the step, the command line, audit -fix and the
// controller) decides what to write with Reconcile, so there is one set of rules.

// Policy is the administrator's rule on what may be written.
type Policy struct {
	// RequireOptIn: every object that gets an owner reference must match OptIn. The step writes
	// with the Rollouts controller's privileges, so without it anyone who may edit a Rollout can
	// make any ConfigMap or Secret of the namespace a dependent of a ReplicaSet and have the
	// garbage collector delete it later (a confused deputy).
	RequireOptIn bool
	// OptIn is the opt-in selector (nil: configmap-attacher/revisioned=true).
	OptIn labels.Selector
}

func (p Policy) optIn() labels.Selector {
	if !Positive(p.OptIn) {
		return OptInSelector()
	}
	return p.OptIn
}

// Request is one reconcile of a workload's ReplicaSets.
type Request struct {
	Workload Workload
	// ReplicaSets are every ReplicaSet the workload controls, Target included.
	ReplicaSets []*appsv1.ReplicaSet
	// Target is the ReplicaSet being rolled out; required when Objects is not empty.
	Target *appsv1.ReplicaSet
	// Objects is the explicit list (the step config, -configmaps/-secrets).
	Objects           []Object
	AllowUnreferenced bool
	// Discover, when not nil, also adopts every object matching it that a ReplicaSet uses.
	Discover labels.Selector
	Policy   Policy
	DryRun   bool
}

// Skip reasons.
const (
	SkipRollback   = "rollback"
	SkipOlder      = "older"
	SkipCredential = "credential"
)

// Skip is a listed object that is left alone, and why.
type Skip struct {
	Object Object
	// Reason is SkipRollback (only ReplicaSets created after the target use it: undo re-ran a
	// newer step list on an older ReplicaSet), SkipOlder (only older revisions use it) or
	// SkipCredential (the target uses it only as a credential and it is not opted in).
	Reason string
	UsedBy []string
}

// Write is one object's patch: every ReplicaSet it gets as owner, in one request.
type Write struct {
	Object Object
	// ObjectUID, when set, is the object's UID as read: the patch carries it as a precondition.
	ObjectUID   types.UID
	ReplicaSets []*appsv1.ReplicaSet
	// Listed marks an object of the explicit list: its problems decide the verdict; those of
	// objects found by discovery are warnings.
	Listed bool
	// verify: confirm the ReplicaSets with a live read first (Candidate.VerifyOwners).
	verify bool
}

// Names lists the owners' names.
func (w Write) Names() []string {
	out := make([]string, len(w.ReplicaSets))
	for i, rs := range w.ReplicaSets {
		out[i] = rs.Name
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
}

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

// Grace is how long a listed object that does not exist is waited for: a sync may create it
// a moment after the workload.
var Grace = 5 * time.Second

// Reconcile is the pipeline every mode runs: classify the explicit list by the rule table,
// apply the administrator's policy, add discovery, then write (or, in a dry run, read) once
// per object. A permanent problem with the explicit list is a *FailError and nothing is
// written (except that a listed object that is still missing after the grace does not undo
// the patches of its siblings).
func (a *Attacher) Reconcile(ctx context.Context, req Request) (Result, error) {
	var res Result
	ns := req.Workload.Namespace
	if req.Target != nil && !Live(req.Target) {
		return res, &FailError{fmt.Sprintf("ReplicaSet %s is being deleted: attaching to it would get the objects collected with it", req.Target.Name)}
	}
	if req.Target == nil && len(req.Objects) > 0 {
		return res, fmt.Errorf("internal error: an explicit list needs a target ReplicaSet")
	}
	rss := append([]*appsv1.ReplicaSet(nil), req.ReplicaSets...)
	if req.Target != nil && !containsUID(rss, req.Target) {
		rss = append(rss, req.Target)
	}
	SortReplicaSets(rss)
	refs := make([]References, len(rss))
	for i, rs := range rss {
		refs[i] = TemplateReferences(&rs.Spec.Template.Spec)
	}
	plan, attach, err := classify(req, rss, refs)
	if err != nil {
		return res, err
	}
	if err := a.checkLabels(ctx, req, &plan, attach); err != nil {
		return res, err
	}
	if req.Discover != nil {
		if err := a.discover(ctx, req, rss, refs, &plan, attach); err != nil {
			return res, err
		}
	}
	for _, o := range plan.Listed {
		if w, ok := attach[o]; ok && len(w.ReplicaSets) > 0 {
			plan.Writes = append(plan.Writes, *w)
		}
	}
	for _, w := range attach {
		if !w.Listed && len(w.ReplicaSets) > 0 {
			plan.Writes = append(plan.Writes, *w)
		}
	}
	sortWrites(plan.Writes)
	res.Plan = plan
	if req.DryRun {
		return a.dryRun(ctx, ns, res)
	}
	out := a.write(ctx, ns, plan.Writes)
	res.Added = out.added
	res.Warnings = out.warnings
	if err := out.err(); err != nil {
		return res, err
	}
	res.Message = res.message()
	return res, nil
}

func containsUID(rss []*appsv1.ReplicaSet, rs *appsv1.ReplicaSet) bool {
	for _, r := range rss {
		if r.UID == rs.UID {
			return true
		}
	}
	return false
}

// classify applies the rule table to the explicit list:
//
//	referenced by the target's template  → attach to the target and every live ReplicaSet using it
//	used only by ReplicaSets created after the target (a tie counts) → skip: a rollback
//	used only by older ReplicaSets       → skip if something listed attaches, else fail: stale list
//	used by no ReplicaSet                → fail, unless allowUnreferenced (then: the target)
//
// Creation times are compared as the controller's isRollbackWithinWindow does.
func classify(req Request, rss []*appsv1.ReplicaSet, refs []References) (Plan, map[Object]*Write, error) {
	p := Plan{Target: req.Target}
	attach := map[Object]*Write{}
	if len(req.Objects) == 0 {
		return p, attach, nil
	}
	target := TemplateReferences(&req.Target.Spec.Template.Spec)
	var older []Skip
	for _, o := range req.Objects {
		if target.Has(o) {
			w := &Write{Object: o, Listed: true}
			for i, rs := range rss {
				if Live(rs) && refs[i].Has(o) {
					w.ReplicaSets = append(w.ReplicaSets, rs)
				}
			}
			attach[o] = w
			p.Listed = append(p.Listed, o)
			continue
		}
		var newer, old []string
		for i, rs := range rss {
			if rs.UID == req.Target.UID || !refs[i].Has(o) {
				continue
			}
			if req.Target.CreationTimestamp.Before(&rs.CreationTimestamp) || req.Target.CreationTimestamp.Equal(&rs.CreationTimestamp) {
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
			attach[o] = &Write{Object: o, Listed: true, ReplicaSets: []*appsv1.ReplicaSet{req.Target}}
			p.Listed = append(p.Listed, o)
			p.Unreferenced = append(p.Unreferenced, o)
		default:
			p.Unreferenced = append(p.Unreferenced, o)
		}
	}
	if len(p.Unreferenced) > 0 && !req.AllowUnreferenced {
		n := len(p.Unreferenced)
		return p, nil, &FailError{fmt.Sprintf("refusing to attach %s: no ReplicaSet of %s references %s in its pod template (ReplicaSet %s is being rolled out). "+
			"Attaching would let the garbage collector delete %s when that ReplicaSet goes. Fix the name in the step config, or set allowUnreferenced: true (-allow-unreferenced) if this is intended",
			joinObjects(p.Unreferenced), req.Workload, pronoun(n), req.Target.Name, pronoun(n))}
	}
	if len(older) > 0 && len(p.Listed) == 0 && !anyRollback(p.Skipped) {
		var parts []string
		for _, s := range older {
			parts = append(parts, fmt.Sprintf("%s (used by %s)", s.Object, strings.Join(s.UsedBy, ", ")))
		}
		return p, nil, &FailError{fmt.Sprintf("the step list is stale: ReplicaSet %s, being rolled out, uses none of the listed objects; only older ReplicaSets use %s. "+
			"Update the list to the new revision's names (kubectl get rs %s -n %s -o yaml shows which ConfigMaps and Secrets it uses)",
			req.Target.Name, strings.Join(parts, ", "), req.Target.Name, req.Workload.Namespace)}
	}
	p.Skipped = append(p.Skipped, older...)
	return p, attach, nil
}

func anyRollback(skips []Skip) bool {
	for _, s := range skips {
		if s.Reason == SkipRollback {
			return true
		}
	}
	return false
}

// checkLabels applies the opt-in policy and the credentials rule to the explicit list. It
// reads labels only when a rule needs them: with the policy on, one metadata list per kind;
// otherwise one metadata GET per object the target uses only as a credential.
func (a *Attacher) checkLabels(ctx context.Context, req Request, p *Plan, attach map[Object]*Write) error {
	if len(p.Listed) == 0 {
		return nil
	}
	ns := req.Workload.Namespace
	optIn := req.Policy.optIn()
	creds := CredentialOnly(&req.Target.Spec.Template.Spec)
	labelled := map[Object]bool{}
	known := map[Object]bool{}
	if req.Policy.RequireOptIn {
		for _, k := range kindsOf(p.Listed) {
			m, err := a.listMeta(ctx, ns, k, optIn)
			if err != nil {
				return err
			}
			for name := range m {
				labelled[Object{k, name}] = true
				known[Object{k, name}] = true
			}
		}
	}
	var unlabelled []Object
	var keep []Object
	for _, o := range p.Listed {
		need := req.Policy.RequireOptIn || creds.Has(o)
		if !need || labelled[o] {
			keep = append(keep, o)
			continue
		}
		if !known[o] {
			m, err := a.getMeta(ctx, ns, o)
			if err != nil {
				return err
			}
			if m == nil { // absent: the write reports it after the grace
				keep = append(keep, o)
				continue
			}
			if optIn.Matches(labels.Set(m.Labels)) {
				keep = append(keep, o)
				continue
			}
		}
		if req.Policy.RequireOptIn {
			unlabelled = append(unlabelled, o)
			continue
		}
		// A credential (image pull secret, a volume's secretRef) is shared by nature: the list
		// does not make it a dependent unless its owner opted it in.
		p.Skipped = append(p.Skipped, Skip{Object: o, Reason: SkipCredential, UsedBy: []string{req.Target.Name}})
		delete(attach, o)
	}
	if len(unlabelled) > 0 {
		key, val := optInLabel(optIn)
		var cmds []string
		for _, o := range unlabelled {
			cmds = append(cmds, fmt.Sprintf("kubectl label %s %s -n %s %s=%s", strings.ToLower(string(o.Kind)), o.Name, ns, key, val))
		}
		return &FailError{fmt.Sprintf("refusing to attach %s: the administrator requires opt-in (--require-opt-in) and %s not match %s; nothing was written. "+
			"Label the objects at their source (Kustomize generatorOptions.labels, a label in the Helm chart) or now: %s",
			joinObjects(unlabelled), verb(len(unlabelled), "it does", "they do"), optIn, strings.Join(cmds, "; "))}
	}
	p.Listed = keep
	return nil
}

// optInLabel returns one key=value that satisfies sel, for messages.
func optInLabel(sel labels.Selector) (string, string) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Operator() == selection.Equals || r.Operator() == selection.DoubleEquals || r.Operator() == selection.In {
			if v := r.Values().List(); len(v) > 0 {
				return r.Key(), v[0]
			}
		}
	}
	return DefaultDiscoverLabel, "true"
}

func kindsOf(objs []Object) []Kind {
	var cm, sec bool
	for _, o := range objs {
		cm = cm || o.Kind == KindConfigMap
		sec = sec || o.Kind == KindSecret
	}
	var out []Kind
	if cm {
		out = append(out, KindConfigMap)
	}
	if sec {
		out = append(out, KindSecret)
	}
	return out
}

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

// dryRun reads the listed objects' metadata and reports exactly which owner references a run
// would add. Discovery's additions come from its list already.
func (a *Attacher) dryRun(ctx context.Context, ns string, res Result) (Result, error) {
	for _, w := range res.Writes {
		if !w.Listed {
			res.Added = append(res.Added, w)
			continue
		}
		m, err := a.getMeta(ctx, ns, w.Object)
		if err != nil {
			return res, err
		}
		if m == nil {
			res.NotFound = append(res.NotFound, w.Object)
			continue
		}
		if missing := MissingOwners(w.Object, m.Owners, w.ReplicaSets, nil); len(missing) > 0 {
			res.Added = append(res.Added, Write{Object: w.Object, ReplicaSets: missing, Listed: true})
		}
	}
	res.Message = res.dryRunMessage()
	return res, nil
}

// writeOutcome collects what the patches did.
type writeOutcome struct {
	ns           string
	rbacHint     string
	added        []Write
	missing      []Object
	forbidden    map[Object]string
	rejected     map[Object]string
	warnings     []string
	objectErrors []ObjectError
	transient    error
}

// write sends the patches, Concurrency at a time. A listed object that does not exist is
// tried again for Grace. A transient error that outlived its retries stops the patches not
// yet sent: the controller retries the whole step anyway, and 100 objects each waiting out
// their own retries would hold the controller's worker for minutes.
func (a *Attacher) write(ctx context.Context, ns string, ws []Write) writeOutcome {
	out := writeOutcome{ns: ns, rbacHint: a.rbacHint(), forbidden: map[Object]string{}, rejected: map[Object]string{}}
	if len(ws) == 0 {
		return out
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(a.concurrency())
	for _, w := range ws {
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil // abandoned after a transient failure; out.transient says why
			}
			var err error
			if w.verify {
				// A stale view: keep only the ReplicaSets a live read still shows.
				if w.ReplicaSets, err = a.existing(ctx, ns, w.ReplicaSets); err == nil && len(w.ReplicaSets) == 0 {
					err = errAllGone
				}
			}
			if err == nil {
				err = a.safePatch(ctx, ns, w)
			}
			if err != nil && isNotFound(err) && w.Listed {
				err = a.awaitCreation(ctx, ns, w)
			}
			mu.Lock()
			defer mu.Unlock()
			out.record(w, err, ctx.Err() != nil, cancel)
			return nil
		})
	}
	_ = g.Wait()
	sortWrites(out.added)
	sortObjects(out.missing)
	for _, w := range out.added {
		a.log().WithFields(map[string]any{"object": w.Object.String(), "owners": strings.Join(w.Names(), ",")}).Debug("owner references in place")
	}
	return out
}

// awaitCreation retries the patch of a listed object that was not found, for Grace.
func (a *Attacher) awaitCreation(ctx context.Context, ns string, w Write) error {
	deadline := time.Now().Add(Grace)
	var err error
	for {
		wait := min(time.Second, Grace)
		select {
		case <-ctx.Done():
			return notFound(w.Object) // the last answer was 404; the caller's time is up
		case <-time.After(wait):
		}
		err = a.safePatch(ctx, ns, w)
		if err == nil || !isNotFound(err) || !time.Now().Before(deadline) {
			return err
		}
	}
}

func notFound(o Object) error {
	return apierrors.NewNotFound(o.Kind.Resource().GroupVersion().WithResource(o.Kind.Resource().Resource).GroupResource(), o.Name)
}

func (o *writeOutcome) record(w Write, err error, cancelled bool, cancel func()) {
	switch {
	case err != nil && cancelled && o.transient != nil:
		// Cancelled by a sibling's transient failure: already reported.
	case err == nil:
		o.added = append(o.added, w)
	case isAllGone(err):
		// Nothing to add: the view was stale. Not a problem of the object.
	case !w.Listed:
		// An older ReplicaSet's object found by discovery: the explicit list decides the verdict.
		msg := fmt.Sprintf("could not add owner %s to %s: %s", strings.Join(w.Names(), ", "), w.Object, describeAPIError(err))
		if isForbidden(err) {
			msg = forbiddenMessage([]Object{w.Object}, apiMessage(err), o.ns, o.rbacHint)
		}
		o.warnings = append(o.warnings, msg)
		o.objectErrors = append(o.objectErrors, ObjectError{w.Object, err})
		if isTransient(err) && o.transient == nil {
			o.transient = fmt.Errorf("patching %s: %w", w.Object, err)
			cancel()
		}
	case isNotFound(err):
		o.missing = append(o.missing, w.Object)
	case isForbidden(err):
		o.forbidden[w.Object] = apiMessage(err)
	case isTransient(err):
		if o.transient == nil {
			o.transient = fmt.Errorf("patching %s: %w", w.Object, err)
		}
		cancel()
	default:
		o.rejected[w.Object] = apiMessage(err)
	}
}

// safePatch runs the patch and turns a panic into an error: these goroutines are outside the
// RPC layer's recover, and a panic there would kill the process every Rollout shares.
func (a *Attacher) safePatch(ctx context.Context, ns string, w Write) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error patching %s: %v", w.Object, r)
		}
	}()
	return a.addOwners(ctx, ns, w.Object, w.ObjectUID, w.ReplicaSets)
}

// errAllGone: every ReplicaSet a write would add no longer exists (the caller's view was
// stale); nothing is written, and the caller's view catches up.
var errAllGone = errors.New("every ReplicaSet to add is gone")

// isAllGone reports a write skipped because its ReplicaSets no longer exist.
func isAllGone(err error) bool { return errors.Is(err, errAllGone) }

// err turns the outcome into the verdict: nil when every listed object is attached, a
// *FailError for problems a retry cannot fix (missing, forbidden, rejected), or the
// transient error for the caller to retry.
func (o writeOutcome) err() error {
	var parts []string
	if len(o.missing) > 0 {
		parts = append(parts, fmt.Sprintf("not found in namespace %s: %s (create %s, or fix the name in the step config)", o.ns, joinObjects(o.missing), pronoun(len(o.missing))))
	}
	if len(o.forbidden) > 0 {
		objs := keysOf(o.forbidden)
		parts = append(parts, forbiddenMessage(objs, o.forbidden[objs[0]], o.ns, o.rbacHint))
	}
	for _, obj := range keysOf(o.rejected) {
		parts = append(parts, fmt.Sprintf("the apiserver rejected the owner reference on %s: %s", obj, o.rejected[obj]))
	}
	if len(parts) > 0 {
		msg := strings.Join(parts, "; ")
		var attached []Object
		for _, w := range o.added {
			attached = append(attached, w.Object)
		}
		if len(attached) > 0 {
			msg += fmt.Sprintf(" (attached meanwhile, and correct: %s)", joinObjects(attached))
		}
		return &FailError{msg}
	}
	return o.transient
}

func keysOf(m map[Object]string) []Object {
	out := make([]Object, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	sortObjects(out)
	return out
}

// forbiddenMessage says which rule refused the patch: an admission webhook, the
// OwnerReferencesPermissionEnforcement admission plugin, or RBAC.
func forbiddenMessage(objs []Object, apiMsg, ns, rbacHint string) string {
	if name, ok := webhookName(apiMsg); ok {
		return fmt.Sprintf("the admission webhook %q denied the owner reference on %s: %s (this is the webhook's policy, not RBAC: ask its owner to allow metadata.ownerReferences changes by this service account)", name, joinObjects(objs), apiMsg)
	}
	if strings.Contains(apiMsg, "can't delete") || strings.Contains(apiMsg, "cannot set blockOwnerDeletion") {
		// The OwnerReferencesPermissionEnforcement admission plugin (OpenShift has it on) lets
		// only users who may delete an object change its owner references.
		return fmt.Sprintf("forbidden to change the owner references of %s: the OwnerReferencesPermissionEnforcement admission plugin requires verb delete on %s in namespace %s in addition to patch (apply examples/rbac-ownerreferences-enforcement.yaml): %s",
			joinObjects(objs), resourcesOf(objs), ns, apiMsg)
	}
	return fmt.Sprintf("forbidden to patch %s: %s; the service account needs verb patch on %s in namespace %s (apply %s; on clusters with the OwnerReferencesPermissionEnforcement admission plugin, such as OpenShift, also delete: examples/rbac-ownerreferences-enforcement.yaml)",
		joinObjects(objs), apiMsg, resourcesOf(objs), ns, rbacHint)
}

// webhookName finds the webhook in an apiserver denial: `admission webhook "x.y" denied the request: ...`.
func webhookName(msg string) (string, bool) {
	const prefix = `admission webhook "`
	i := strings.Index(msg, prefix)
	if i < 0 {
		return "", false
	}
	rest := msg[i+len(prefix):]
	j := strings.Index(rest, `"`)
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// describeAPIError words an error for a warning about an object nobody listed.
func describeAPIError(err error) string {
	switch {
	case isNotFound(err):
		return "it no longer exists (the garbage collector or a prune removed it after the list)"
	case isForbidden(err):
		return "forbidden: " + apiMessage(err)
	default:
		return apiMessage(err)
	}
}

// message says what was attached, skipped and discovered.
func (r Result) message() string {
	var msg string
	if r.Target != nil {
		msg = successMessage(r.Target.Name, append([]Object(nil), r.Listed...), r.Skipped)
	}
	var disc []Write
	for _, w := range r.Added {
		if !w.Listed {
			disc = append(disc, w)
		}
	}
	if len(disc) > 0 || r.Owned > 0 || (r.Target == nil) {
		d := discoverMessage(disc, r.Owned)
		if msg == "" {
			msg = d
		} else {
			msg += "; " + d
		}
	}
	for _, w := range r.Warnings {
		msg += "; warning: " + w
	}
	return msg
}

func discoverMessage(disc []Write, owned int) string {
	if len(disc) == 0 {
		return fmt.Sprintf("discover: every opted-in object in use already has its owners (%d)", owned)
	}
	return fmt.Sprintf("discover: added %d owner reference(s): %s", countRefs(disc), writesString(disc))
}

func (r Result) dryRunMessage() string {
	msg := "dry run, nothing written: "
	var listed, disc []Write
	for _, w := range r.Added {
		if w.Listed {
			listed = append(listed, w)
		} else {
			disc = append(disc, w)
		}
	}
	switch {
	case len(listed) > 0:
		msg += "would add " + writesString(listed)
	case r.Target != nil:
		msg += "no listed object lacks an owner it needs (target ReplicaSet " + r.Target.Name + ")"
	default:
		msg += "nothing listed"
	}
	if len(r.NotFound) > 0 {
		msg += fmt.Sprintf("; not found (the run would fail): %s", joinObjects(r.NotFound))
	}
	if len(disc) > 0 {
		msg += fmt.Sprintf("; discover would add %d owner reference(s): %s", countRefs(disc), writesString(disc))
	}
	if r.Target != nil {
		for _, sk := range r.Skipped {
			msg += "; " + skipMessage(sk, r.Target.Name)
		}
	}
	return msg
}

func countRefs(ws []Write) int {
	n := 0
	for _, w := range ws {
		n += len(w.ReplicaSets)
	}
	return n
}

// writesString summarises writes, e.g. "ConfigMap a ← web-1, web-2; Secret b ← web-1".
func writesString(ws []Write) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s ← %s", w.Object, strings.Join(w.Names(), ", "))
	}
	return strings.Join(parts, "; ")
}

func skipMessage(sk Skip, target string) string {
	switch sk.Reason {
	case SkipRollback:
		return fmt.Sprintf("skipped %s: not used by %s but by %s, created after it (a rollback re-ran a newer step list)", sk.Object, target, strings.Join(sk.UsedBy, ", "))
	case SkipOlder:
		return fmt.Sprintf("skipped %s: not used by %s but only by the older %s (an older revision's object in the list; left as it is)", sk.Object, target, strings.Join(sk.UsedBy, ", "))
	default:
		return fmt.Sprintf("skipped %s: %s uses it only as a credential (imagePullSecrets or a volume's secretRef), which is shared by nature; add the opt-in label %s=true to it if it is revisioned", sk.Object, target, DefaultDiscoverLabel)
	}
}
