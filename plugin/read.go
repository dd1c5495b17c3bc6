package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
)

// The reads of one run, before anything is decided: the labels of the explicit list, discovery,
// the controllers' Leases and the namespace's users (readusage.go reads those in pages). Every
// read is metadata only; none writes.

// ReadOwnReplicaSets lists the workload's ReplicaSets: those its selector matches (every
// ReplicaSet of the namespace when it has none, e.g. a workloadRef Rollout that takes the
// Deployment's) whose controller reference carries its UID, oldest first, with their
// templates. It is the only read of a run whose target does not exist yet.
func (a *Attacher) ReadOwnReplicaSets(ctx context.Context, w Workload) ([]*appsv1.ReplicaSet, error) {
	sel := labels.Everything()
	if w.Selector != nil {
		var err error
		if sel, err = w.replicaSetSelector(); err != nil {
			return nil, err
		}
	}
	var own []appsv1.ReplicaSet
	err := a.pages(ctx, metav1.ListOptions{LabelSelector: sel.String()}, func() { own = own[:0] },
		func(ctx context.Context, opts metav1.ListOptions) (string, error) {
			l, err := a.Client.ListReplicaSets(ctx, w.Namespace, opts)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				if ref := metav1.GetControllerOfNoCopy(&l.Items[i]); ref != nil && ref.UID == w.UID {
					own = append(own, l.Items[i])
				}
			}
			return l.Continue, nil
		})
	if err != nil {
		if isForbidden(err) {
			return nil, &FailError{fmt.Sprintf("forbidden to list replicasets.apps in namespace %s (%s): grant list on replicasets.apps, see %s", w.Namespace, apiMessage(err), a.rbacHint())}
		}
		return nil, fmt.Errorf("listing the ReplicaSets of %s (selector %q) to find the one being rolled out: %w", w, sel.String(), err)
	}
	out := make([]*appsv1.ReplicaSet, len(own))
	for i := range own {
		out[i] = &own[i]
	}
	SortReplicaSets(out)
	return out, nil
}

// read is the run's reads, in order, after the rule table chose the explicit list's candidates:
// the labels the label rules need (and those rules, which decide which candidates the later
// reads see), discovery, the caller's candidates, then the namespace's users and the
// controllers' Leases (usersFor). Nothing is decided here that the plan decides.
func (a *Attacher) read(ctx context.Context, req Request, hist history, p *Plan, cands []candidate) (reading, error) {
	in := reading{ns: req.namespace()}
	metas, err := a.readLabels(ctx, req, p.Listed, cands)
	if err != nil {
		return in, err
	}
	if err := applyLabelRules(req, p, cands, metas); err != nil {
		return in, err
	}
	if req.Discover != nil {
		found, err := a.discover(ctx, req, hist.rss, hist.refs, cands)
		if err != nil {
			return in, err
		}
		cands = append(cands, found...)
	}
	for _, c := range req.Candidates {
		cands = append(cands, candidate{Candidate: c, labelsKnown: true})
	}
	users, leases, warnings, err := a.usersFor(ctx, in.ns, req, cands)
	if err != nil {
		return in, err
	}
	in.cands, in.users, in.leases, in.warnings = cands, users, leases, warnings
	return in, nil
}

// readLabels reads the metadata the label rules (applyLabelRules) need of the explicit list,
// and only that: with the policy on, one metadata list per kind, then a GET of each listed
// object the list did not return; without it, one GET per object the target uses only as a
// credential. An object that does not exist is read as nil.
func (a *Attacher) readLabels(ctx context.Context, req Request, listed []Object, cands []candidate) (map[Object]*objectMeta, error) {
	metas := map[Object]*objectMeta{}
	if len(listed) == 0 {
		return metas, nil
	}
	ns := req.Workload.Namespace
	if req.Policy.RequireOptIn {
		for _, k := range kindsOf(listed) {
			m, err := a.listMeta(ctx, ns, k, req.Policy.optIn())
			if err != nil {
				return nil, err
			}
			for name, meta := range m {
				metas[Object{k, name}] = &meta
			}
		}
	}
	creds := CredentialOnly(&req.Target.Spec.Template.Spec)
	for _, c := range cands {
		if _, read := metas[c.Object]; read || !labelsNeeded(req, creds, c.Object) {
			continue
		}
		m, err := a.getMeta(ctx, ns, c.Object)
		if err != nil {
			return nil, err
		}
		metas[c.Object] = m
	}
	return metas, nil
}

// discover finds the objects matching the discovery selector (and, with the policy on, the
// opt-in selector) that a live ReplicaSet of the workload references: one metadata list per
// kind that some template references. A listed object that it finds gets its metadata.
func (a *Attacher) discover(ctx context.Context, req Request, rss []*appsv1.ReplicaSet, refs []References, cands []candidate) ([]candidate, error) {
	sel := req.Discover
	if req.Policy.RequireOptIn {
		r, _ := req.Policy.optIn().Requirements()
		sel = sel.Add(r...)
	}
	used := References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	for i, rs := range rss {
		if !Live(rs) {
			continue
		}
		for n := range refs[i].ConfigMaps {
			used.ConfigMaps[n] = true
		}
		for n := range refs[i].Secrets {
			used.Secrets[n] = true
		}
	}
	var kinds []Kind
	if len(used.ConfigMaps) > 0 {
		kinds = append(kinds, KindConfigMap)
	}
	if len(used.Secrets) > 0 {
		kinds = append(kinds, KindSecret)
	}
	index := map[Object]int{}
	for i, c := range cands {
		index[c.Object] = i
	}
	var out []candidate
	for _, k := range kinds {
		metas, err := a.listMeta(ctx, req.Workload.Namespace, k, sel)
		if err != nil {
			return nil, fmt.Errorf("discover: %w", err)
		}
		for name, m := range metas {
			o := Object{k, name}
			if i, ok := index[o]; ok {
				// Listed too: the owners it already has need no write.
				c := &cands[i]
				if !c.labelsKnown {
					c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
				}
				continue
			}
			if !used.Has(o) {
				continue
			}
			out = append(out, candidate{Candidate: Candidate{Object: o, UID: m.UID, Labels: m.Labels, Owners: m.Owners}, labelsKnown: true})
		}
	}
	return out, nil
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
	var leases []ControllerLease
	var leaseWarnings []string
	if p := req.Prefetched; p != nil {
		leases, leaseWarnings = p.Leases, p.LeaseWarnings
	} else {
		leases, leaseWarnings = a.readLeases(ctx, req.Maintainers.Leases)
	}
	now := req.Maintainers.now()
	if CoversNamespace(leases, req.Workload.Kind, ns, now) {
		// Only beside a live controller: a step-only install sends no label reads.
		a.candidateLabels(ctx, ns, cands, req.Prefetched)
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

// candidateLabels reads the labels of the candidates whose labels were not read yet (a listed
// object without the opt-in policy): the controller maintains only opted-in objects. A read
// that fails leaves the labels unknown: the object then counts as not maintained, and its users
// are read (the Job's RBAC has no get on ConfigMaps and Secrets). What pre read is not read
// again.
func (a *Attacher) candidateLabels(ctx context.Context, ns string, cands []candidate, pre *Prefetched) {
	var g errgroup.Group
	g.SetLimit(a.concurrency())
	for i := range cands {
		c := &cands[i] // each goroutine writes its own element
		if c.labelsKnown || c.dropped {
			continue
		}
		if m, ok := pre.meta(c.Object); ok {
			c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
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

// sharedLabels reads the labels of the shared candidates whose labels were not read yet (a
// listed object without the opt-in policy): the controller maintains only opted-in objects.
func (a *Attacher) sharedLabels(ctx context.Context, ns string, req Request, cands []candidate) error {
	for i := range cands {
		c := &cands[i]
		if c.labelsKnown || c.dropped {
			continue
		}
		if _, ok := req.shared(req.Users.UsersOf(c.Object)); !ok {
			continue
		}
		m, err := a.getMeta(ctx, ns, c.Object)
		if err != nil {
			return err
		}
		if m != nil {
			c.UID, c.Labels, c.Owners, c.labelsKnown = m.UID, m.Labels, m.Owners, true
		}
	}
	return nil
}

// readLeases reads the controllers' leader Leases, each with the deadline and retries of call:
// what MaintainedBy judges. A Lease that is absent, forbidden or unreadable counts as no
// controller; a forbidden one is also a warning naming the missing grant (a step upgraded
// before its RBAC keeps refusing shared config, and says why).
func (a *Attacher) readLeases(ctx context.Context, refs []LeaseRef) ([]ControllerLease, []string) {
	out := make([]ControllerLease, 0, len(refs))
	var warnings []string
	for _, ref := range refs {
		cl := ControllerLease{Ref: ref}
		var l *coordinationv1.Lease
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			l, err = a.Client.GetLease(ctx, ref.Namespace, ref.Name)
			return err
		})
		switch {
		case err == nil:
			cl.Found, cl.Labels, cl.Annotations = true, l.Labels, l.Annotations
			if h := l.Spec.HolderIdentity; h != nil {
				cl.Holder = *h
			}
			if r := l.Spec.RenewTime; r != nil {
				t := r.Time
				cl.RenewTime = &t
			}
			if d := l.Spec.LeaseDurationSeconds; d != nil {
				cl.Duration = time.Duration(*d) * time.Second
			}
		case isNotFound(err):
		case apierrors.IsForbidden(err):
			cl.Forbidden = true
			warnings = append(warnings, leaseForbiddenWarning(ref, a.rbacHint()))
		default:
			cl.Err = apiMessage(err)
		}
		out = append(out, cl)
	}
	return out, warnings
}

// Prefetched is what a run scoped to its workload read beside the list of the workload's
// ReplicaSets, before it knew whether its target exists (Prefetch): the controllers' Leases,
// and the metadata of the explicit list where a live controller was expected.
type Prefetched struct {
	Leases        []ControllerLease
	LeaseWarnings []string
	metas         map[Object]objectMeta
}

func (p *Prefetched) meta(o Object) (objectMeta, bool) {
	if p == nil {
		return objectMeta{}, false
	}
	m, ok := p.metas[o]
	return m, ok
}

// Prefetch reads at once the controllers' Leases and, when labels is set, the metadata of
// objs: what a step reads next once its target exists, when a live controller covers its
// namespace (usersFor). Read beside the first list instead of after it, they cost the step no
// round trip of its own. A metadata read that fails or finds nothing is left to the run.
func (a *Attacher) Prefetch(ctx context.Context, ns string, leases []LeaseRef, objs []Object, labels bool) *Prefetched {
	p := &Prefetched{metas: map[Object]objectMeta{}}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(a.concurrency())
	g.Go(func() error {
		p.Leases, p.LeaseWarnings = a.readLeases(ctx, leases)
		return nil
	})
	if !labels {
		objs = nil
	}
	for _, o := range objs {
		g.Go(func() error {
			if m, err := a.getMeta(ctx, ns, o); err == nil && m != nil {
				mu.Lock()
				p.metas[o] = *m
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return p
}

// ReadLeases is readLeases for callers outside the package (audit): the controllers' Leases,
// and a warning per Lease the RBAC refused.
func (a *Attacher) ReadLeases(ctx context.Context, refs []LeaseRef) ([]ControllerLease, []string) {
	return a.readLeases(ctx, refs)
}

// listMeta lists the metadata of the ConfigMaps or Secrets of ns that match sel, through the
// metadata client: the data never leaves the apiserver.
func (a *Attacher) listMeta(ctx context.Context, ns string, k Kind, sel labels.Selector) (map[string]objectMeta, error) {
	out := map[string]objectMeta{}
	err := a.call(ctx, func(ctx context.Context) error {
		l, err := a.Meta.Resource(k.Resource()).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		clear(out)
		for _, it := range l.Items {
			out[it.Name] = objectMeta{UID: it.UID, Labels: it.Labels, Owners: it.OwnerReferences}
		}
		return nil
	})
	if err != nil {
		return nil, a.readError(err, "list", k, ns)
	}
	return out, nil
}

// getMeta reads one object's metadata (nil, nil when it does not exist).
func (a *Attacher) getMeta(ctx context.Context, ns string, o Object) (*objectMeta, error) {
	var m *objectMeta
	err := a.call(ctx, func(ctx context.Context) error {
		obj, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
		if err == nil {
			m = &objectMeta{UID: obj.UID, Labels: obj.Labels, Owners: obj.OwnerReferences}
		}
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, a.readError(err, "get", o.Kind, ns)
	}
	return m, nil
}

func (a *Attacher) readError(err error, verb string, k Kind, ns string) error {
	res := k.Resource().Resource
	if isForbidden(err) {
		return &FailError{fmt.Sprintf("forbidden to %s %s in namespace %s (%s): grant %s on %s, see %s", verb, res, ns, apiMessage(err), verb, res, a.rbacHint())}
	}
	return fmt.Errorf("%s %s in namespace %s: %w", verb, res, ns, err)
}

func (a *Attacher) usageError(err error, resource, ns string) error {
	if isForbidden(err) {
		return &FailError{fmt.Sprintf("forbidden to list %s in namespace %s (%s): configmap-attacher adds an owner only when it knows every user of the object in the namespace; grant list on %s, see %s",
			resource, ns, apiMessage(err), resource, a.rbacHint())}
	}
	return fmt.Errorf("listing %s in namespace %s (to find every user of the objects): %w", resource, ns, err)
}
