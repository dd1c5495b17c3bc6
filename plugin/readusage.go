package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The bounded reads: what a run needs to know of a namespace, and no more. A run scoped to
// one workload (the step, the Job) first lists only that workload's ReplicaSets
// (ReadOwnReplicaSets); the namespace's other users are read (ReadUsage) only once the target
// exists and some object is not maintained by a live controller (Reconcile). ReadUsage reads
// them in pages of PageSize, keeps only what the rule needs (the references of each pod
// template, the identity of each ReplicaSet), and reads a Pod's spec only where no known
// controller's template stands for it, found from its controller reference (never from its
// labels, which anyone can copy; labels only choose the list that reads those specs,
// podspecs.go).

// usageReads bounds the namespace-wide reads (ReadUsage) in flight in one process. The Rollouts
// controller runs up to ten steps at once through one plugin process, inside its own pod: each
// read holds up to a page of full objects of several kinds, so ten at once in a busy namespace
// would multiply the process's peak memory by ten. Two at a time keeps the peak near one
// read's while a quiet namespace's reads (a few ms) barely wait; a run that waits past its
// deadline gets a transient error, which the Rollouts controller retries.
var usageReads = make(chan struct{}, 2)

// usageRead is one ReadUsage in progress: what it keeps of each page, under mu.
type usageRead struct {
	a  *Attacher
	ns string
	mu sync.Mutex
	u  *NamespaceUsage
	// revisions: the StatefulSets' and DaemonSets' revisions were read; else (forbidden) their
	// Pods' specs are read instead.
	revisions bool
	// pods is what the Pods' metadata said: which Pods' specs may be needed, and their labels.
	pods PodCensus
	// read counts the objects read so far, for the message of a read that ran out of time.
	read atomic.Int64
}

// ReadUsage reads a namespace's users for one run, by the formula (docs/security.md):
//
//	ReplicaSets                       typed protobuf, paged; kept: identity, labels, controller, template references
//	the controllers of other
//	  ReplicaSets (Deployments,
//	  Rollouts, Experiments)          metadata, only the kinds that control one (other than known)
//	StatefulSets, DaemonSets,
//	  Jobs, CronJobs                  typed protobuf, paged; kept: template references
//	ControllerRevisions               typed protobuf, paged; of apps/v1 StatefulSets and DaemonSets: their
//	                                  template's references (they stand for those sets' Pods, old revisions too)
//	Pods                              metadata, paged
//	the specs of Pods no ReplicaSet,
//	  Job, or (revisions read)
//	  StatefulSet or DaemonSet
//	  controls                        typed protobuf: a paged list per group with the same label keys
//	                                  (PodCensus.SpecReads), the others by name; kept by UID
//
// A forbidden list is a *FailError naming the grant (without it not every user is known),
// except ControllerRevisions: without them the Pods of StatefulSets and DaemonSets are read in
// full, with a warning naming the grant. A read that does not finish within ctx's deadline is
// an error saying that the namespace is too large to read in one run, and what to do.
func (a *Attacher) ReadUsage(ctx context.Context, ns string, known ...ControllerRef) (*NamespaceUsage, error) {
	select {
	case usageReads <- struct{}{}:
		defer func() { <-usageReads }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for other runs' reads of their namespaces (%d at a time) to read namespace %s: %w", cap(usageReads), ns, ctx.Err())
	}
	r := &usageRead{a: a, ns: ns, u: &NamespaceUsage{Namespace: ns}}
	err := r.run(ctx, known)
	if err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, r.tooLarge(err)
	}
	if err != nil {
		return nil, err
	}
	return r.u, nil
}

func (r *usageRead) run(ctx context.Context, known []ControllerRef) error {
	g, gctx := errgroup.WithContext(ctx)
	var rss []*appsv1.ReplicaSet
	g.Go(func() error {
		var err error
		if rss, err = r.replicaSets(gctx); err != nil {
			return err
		}
		ctrls, listed, err := r.a.controllersOf(gctx, r.ns, rss, known)
		if err != nil {
			return err
		}
		live := map[string]ControllerRef{}
		for _, c := range ctrls {
			live[c.Kind+"/"+c.Name] = c
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, rs := range r.u.ReplicaSets {
			r.u.controllers = append(r.u.controllers, controllerState(rs, live, listed))
		}
		return nil
	})
	g.Go(func() error {
		return templates(gctx, r, "statefulsets.apps", "StatefulSet", r.a.Client.ListStatefulSets,
			func(l *appsv1.StatefulSetList) (string, []appsv1.StatefulSet) { return l.Continue, l.Items },
			func(s *appsv1.StatefulSet) (string, *corev1.PodSpec) { return s.Name, &s.Spec.Template.Spec })
	})
	g.Go(func() error {
		return templates(gctx, r, "daemonsets.apps", "DaemonSet", r.a.Client.ListDaemonSets,
			func(l *appsv1.DaemonSetList) (string, []appsv1.DaemonSet) { return l.Continue, l.Items },
			func(s *appsv1.DaemonSet) (string, *corev1.PodSpec) { return s.Name, &s.Spec.Template.Spec })
	})
	g.Go(func() error {
		return templates(gctx, r, "jobs.batch", "Job", r.a.Client.ListJobs,
			func(l *batchv1.JobList) (string, []batchv1.Job) { return l.Continue, l.Items },
			func(j *batchv1.Job) (string, *corev1.PodSpec) { return j.Name, &j.Spec.Template.Spec })
	})
	g.Go(func() error {
		return templates(gctx, r, "cronjobs.batch", "CronJob", r.a.Client.ListCronJobs,
			func(l *batchv1.CronJobList) (string, []batchv1.CronJob) { return l.Continue, l.Items },
			func(c *batchv1.CronJob) (string, *corev1.PodSpec) {
				return c.Name, &c.Spec.JobTemplate.Spec.Template.Spec
			})
	})
	g.Go(func() error { return r.revisionTemplates(gctx) })
	g.Go(func() error { return r.podMetadata(gctx) })
	if err := g.Wait(); err != nil {
		return err
	}
	return r.podSpecs(ctx, &r.pods)
}

// replicaSets lists every ReplicaSet of the namespace, keeping of each its identity, labels
// and controller (compactReplicaSet) and its template's references.
func (r *usageRead) replicaSets(ctx context.Context) ([]*appsv1.ReplicaSet, error) {
	reset := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.u.ReplicaSets, r.u.refs, r.u.creds = nil, nil, nil
	}
	err := r.a.pages(ctx, metav1.ListOptions{}, reset, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		l, err := r.a.Client.ListReplicaSets(ctx, r.ns, opts)
		if err != nil {
			return "", err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range l.Items {
			spec := &l.Items[i].Spec.Template.Spec
			r.u.ReplicaSets = append(r.u.ReplicaSets, compactReplicaSet(&l.Items[i]))
			r.u.refs = append(r.u.refs, TemplateReferences(spec))
			r.u.creds = append(r.u.creds, CredentialOnly(spec))
		}
		r.read.Add(int64(len(l.Items)))
		return l.Continue, nil
	})
	if err != nil {
		return nil, r.a.usageError(err, "replicasets.apps", r.ns)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.u.sortReplicaSets()
	return r.u.ReplicaSets, nil
}

// compactReplicaSet is what a usage keeps of a ReplicaSet: what OwnerOf, Own and the
// controller's state need (its template's references are kept beside it).
func compactReplicaSet(rs *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: rs.Namespace, UID: rs.UID,
		Labels: rs.Labels, OwnerReferences: rs.OwnerReferences, CreationTimestamp: rs.CreationTimestamp,
		DeletionTimestamp: rs.DeletionTimestamp, Finalizers: rs.Finalizers}}
}

// templates lists one kind whose pod template cannot own (StatefulSets, DaemonSets, Jobs,
// CronJobs), page by page, keeping each template's references.
func templates[L any, T any](ctx context.Context, r *usageRead, resource, kind string,
	list func(context.Context, string, metav1.ListOptions) (L, error), items func(L) (string, []T),
	spec func(*T) (string, *corev1.PodSpec)) error {
	reset := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.u.dropTemplates(func(t template) bool { return t.user.Kind == kind && t.parent.Kind == "" })
	}
	err := r.a.pages(ctx, metav1.ListOptions{}, reset, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		l, err := list(ctx, r.ns, opts)
		if err != nil {
			return "", err
		}
		next, its := items(l)
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range its {
			name, s := spec(&its[i])
			r.u.templates = append(r.u.templates, template{user: OtherUser{kind, name}, refs: TemplateReferences(s)})
		}
		r.read.Add(int64(len(its)))
		return next, nil
	})
	if err != nil {
		return r.a.usageError(err, resource, r.ns)
	}
	return nil
}

// revisionTemplates lists the ControllerRevisions, keeping the template references of those of
// apps/v1 StatefulSets and DaemonSets: the workload controllers keep a revision while any Pod
// carries it, so its template stands for that Pod's spec (an old revision's Pod mid-rollout
// included). A list the RBAC refuses leaves r.revisions false, with a warning: their Pods'
// specs are then read instead.
func (r *usageRead) revisionTemplates(ctx context.Context) error {
	reset := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.u.dropTemplates(func(t template) bool { return t.parent.Kind != "" })
	}
	err := r.a.pages(ctx, metav1.ListOptions{}, reset, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		l, err := r.a.Client.ListControllerRevisions(ctx, r.ns, opts)
		if err != nil {
			return "", err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range l.Items {
			cr := &l.Items[i]
			t, ok := RevisionTemplate(cr)
			if !ok {
				continue
			}
			ref := metav1.GetControllerOfNoCopy(cr) // RevisionTemplate decodes only a set's
			r.u.templates = append(r.u.templates, template{user: OtherUser{ref.Kind, ref.Name + " (revision " + cr.Name + ")"},
				parent: OtherUser{ref.Kind, ref.Name}, refs: TemplateReferences(&t.Spec)})
		}
		r.read.Add(int64(len(l.Items)))
		return l.Continue, nil
	})
	switch {
	case err == nil:
		r.mu.Lock()
		r.revisions = true
		r.mu.Unlock()
		return nil
	case isForbidden(err):
		r.mu.Lock()
		r.u.Warnings = append(r.u.Warnings, revisionsForbiddenWarning(r.ns, r.a.rbacHint()))
		r.mu.Unlock()
		return nil
	}
	return r.a.usageError(err, "controllerrevisions.apps", r.ns)
}

// podMetadata lists the Pods' metadata and sorts each by its controller reference: a
// ReplicaSet's or a Job's Pod runs their template (read); a StatefulSet's or DaemonSet's runs
// one of its revisions (read when allowed); any other Pod's spec must be read.
func (r *usageRead) podMetadata(ctx context.Context) error {
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	reset := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.pods = PodCensus{}
	}
	err := r.a.pages(ctx, metav1.ListOptions{}, reset, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
		l, err := r.a.Meta.Resource(gvr).Namespace(r.ns).List(ctx, opts)
		if err != nil {
			return "", err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range l.Items {
			r.pods.Add(&l.Items[i])
		}
		r.read.Add(int64(len(l.Items)))
		return l.Continue, nil
	})
	if err != nil {
		return r.a.usageError(err, "pods", r.ns)
	}
	return nil
}

// What stands for a Pod's spec.
const (
	podOwn        = iota // nothing known: its own spec is read
	podOfTemplate        // a ReplicaSet's or Job's: their template, which is read
	podOfSet             // a StatefulSet's or DaemonSet's: one of its revisions
)

// podController says what stands for a Pod's spec, from its controller reference alone:
// labels prove nothing (anyone can copy a ReplicaSet's labels onto a Pod).
func podController(ref *metav1.OwnerReference) int {
	if ref == nil {
		return podOwn
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return podOwn
	}
	switch {
	case gv.Group == "apps" && ref.Kind == "ReplicaSet", gv.Group == "batch" && ref.Kind == "Job":
		return podOfTemplate
	case gv.Group == "apps" && (ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet"):
		return podOfSet
	}
	return podOwn
}

// tooLarge is a read that ran out of the run's time. It is not a *FailError: the same deadline
// passes on a namespace of ordinary size when the apiserver is slow for a moment, and failing
// would abort the canary; the caller retries (the Rollouts controller every 30 s, the Job's
// next poll), and every retry says why in the Rollout's status and the log.
func (r *usageRead) tooLarge(err error) error {
	return fmt.Errorf("reading the users of the objects in namespace %s did not finish within the run's deadline (%d objects read): "+
		"the namespace is too large to read in one run. Have the controller maintain these objects (label them %s=true and run the "+
		"controller mode over this namespace, its Lease named in -controller-lease): the step then reads no other users; or split "+
		"the namespace. Retrying: %w", r.ns, r.read.Load(), OptInLabel, err)
}

// sortReplicaSets orders the usage's ReplicaSets oldest first, with their references.
func (u *NamespaceUsage) sortReplicaSets() {
	idx := make(map[*appsv1.ReplicaSet]int, len(u.ReplicaSets))
	for i, rs := range u.ReplicaSets {
		idx[rs] = i
	}
	SortReplicaSets(u.ReplicaSets)
	refs, creds := make([]References, len(u.refs)), make([]References, len(u.creds))
	for i, rs := range u.ReplicaSets {
		refs[i], creds[i] = u.refs[idx[rs]], u.creds[idx[rs]]
	}
	u.refs, u.creds = refs, creds
}

// dropTemplates removes the templates drop picks (a list restarted from its first page).
func (u *NamespaceUsage) dropTemplates(drop func(template) bool) {
	kept := u.templates[:0]
	for _, t := range u.templates {
		if !drop(t) {
			kept = append(kept, t)
		}
	}
	u.templates = kept
}

// controllersOf lists, metadata only and paged, each checked controller kind that controls a ReplicaSet
// other than the known workloads. A kind whose resource is not served (the Rollout CRD not
// installed) has no workloads: listed, and empty.
func (a *Attacher) controllersOf(ctx context.Context, ns string, rss []*appsv1.ReplicaSet, known []ControllerRef) ([]ControllerRef, []string, error) {
	out := append([]ControllerRef(nil), known...)
	isKnown := map[types.UID]bool{}
	for _, k := range known {
		isKnown[k.UID] = true
	}
	need := map[string]controllerKind{}
	for i := range rss {
		ref := metav1.GetControllerOfNoCopy(rss[i])
		if ref == nil || isKnown[ref.UID] {
			continue
		}
		if k, ok := checkedKind(ref); ok {
			need[k.kind] = k
		}
	}
	var listed []string
	for _, k := range checkedControllers {
		if _, ok := need[k.kind]; !ok {
			continue
		}
		var refs []ControllerRef
		err := a.pages(ctx, metav1.ListOptions{}, func() { refs = refs[:0] }, func(ctx context.Context, opts metav1.ListOptions) (string, error) {
			l, err := a.Meta.Resource(k.gvr).Namespace(ns).List(ctx, opts)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				refs = append(refs, RefOf(k.kind, &l.Items[i]))
			}
			return l.Continue, nil
		})
		switch {
		case isNotFound(err):
			// The kind is not served (its CRD uninstalled or being reinstalled): its
			// ReplicaSets' controllers cannot be confirmed, and such a ReplicaSet still runs
			// its pods, so they stay unknown (they block), as in the controller mode.
			continue
		case err != nil:
			return nil, nil, a.usageError(err, k.gvr.GroupResource().String(), ns)
		}
		listed = append(listed, k.kind)
		out = append(out, refs...)
	}
	return out, listed, nil
}
