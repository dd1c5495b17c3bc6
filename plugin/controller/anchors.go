package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Anchors: the owner that stands for a workload's current template (plugin/anchor.go). One
// sync per workload (a queue key of kind "workload"): create the anchor of its current
// template, and delete its other anchors when plugin.AnchorVerdict says so. Anchors are the
// only objects the controller creates or deletes, and it deletes only ControllerRevisions
// labelled as anchors that it reads from its cache, with their UID as a precondition.

// DefaultAnchorGrace is how long the anchor of a deleted workload is kept: the window in which
// a delete and re-apply (kubectl delete + apply, an immutable selector change, Argo CD
// Replace=true) finds its config still there.
const DefaultAnchorGrace = 5 * time.Minute

// workloadTemplate is what the caches know of workload kind/name in ns: whether it exists (and
// is not being deleted) and its current template's references.
func (c *Controller) workloadTemplate(sc *scope, ns, kind, name string) (refs []plugin.Object, exists bool) {
	if kind == plugin.KindDeployment || kind == plugin.KindRollout {
		inf := sc.templatedWorkload(kind)
		if inf == nil {
			return nil, false
		}
		item, ok, err := inf.GetIndexer().GetByKey(ns + "/" + name)
		if err != nil || !ok {
			return nil, false
		}
		d, _ := item.(*cachedObject)
		if d == nil || d.Deleting {
			return nil, false
		}
		return d.Refs, true
	}
	t := sc.template(kind, ns, name)
	if t == nil || t.DeletionTimestamp != nil {
		return nil, false
	}
	return t.Refs, true
}

// namespaceUID is the UID of namespace ns, the controller of its anchors. Read live for each
// anchor (one GET per template change of a workload): a UID kept from before a namespace was
// deleted and created again would make every new anchor collectable at once.
func (c *Controller) namespaceUID(ctx context.Context, ns string) (types.UID, error) {
	rctx, cancel := context.WithTimeout(ctx, plugin.DefaultRequestTimeout)
	defer cancel()
	n, err := c.cfg.Kube.CoreV1().Namespaces().Get(rctx, ns, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading namespace %s, the controller of its anchors (is get on namespaces allowed?): %w", ns, err)
	}
	return n.UID, nil
}

// syncAnchors creates the anchor of the workload's current template and deletes the anchors
// the rule lets go.
func (c *Controller) syncAnchors(ctx context.Context, k Key) (string, error) {
	kind, name, _ := strings.Cut(k.Name, "/")
	if kind == plugin.CrowdKind {
		return c.syncCrowd(ctx, k, name)
	}
	ns := k.Namespace
	sc := c.scopeOf(ns)
	if sc == nil || sc.revisions == nil {
		return "noop", nil
	}
	log := c.log.WithFields(logrus.Fields{"namespace": ns, "workload": k.Name})
	refs, exists := c.workloadTemplate(sc, ns, kind, name)
	wk := ns + "/" + k.Name
	c.mu.Lock()
	if exists {
		delete(c.gone, wk)
	} else if _, ok := c.gone[wk]; !ok {
		c.gone[wk] = time.Now()
	}
	goneSince := c.gone[wk]
	c.mu.Unlock()

	result := "noop"
	cur := plugin.NewAnchor(kind, name, refs)
	if exists && len(refs) > 0 && c.usesOptedIn(ns, refs) && sc.anchor(ns, cur) == nil && !c.cfg.DryRun {
		created, err := c.createAnchor(ctx, ns, cur)
		if err != nil {
			return "error", err
		}
		if created {
			log.WithField("anchor", cur.ObjectName()).Info("created the anchor of the current template")
			result = "patched"
		}
	}
	items, _ := sc.revisions.GetIndexer().ByIndex(byAnchorOf, wk)
	kept := 0
	for _, it := range items {
		r, ok := it.(*cachedRevision)
		if !ok || r.Anchor == nil || r.DeletionTimestamp != nil {
			continue
		}
		st := plugin.AnchorState{Current: exists && r.Anchor.Equal(cur), WorkloadExists: exists}
		if !exists {
			st.GoneFor = time.Since(goneSince)
		}
		if !st.Current {
			st.Foreign = c.foreignRefs(ns, r)
			st.Unsettled = c.unsettled(sc, ns, r)
		}
		del, after := plugin.AnchorVerdict(st, c.cfg.AnchorGrace)
		if !del || c.cfg.DryRun {
			kept++
		}
		if !del {
			if after > 0 {
				c.enqueueWorkload(ns, kind, name, after)
			}
			continue
		}
		if c.cfg.DryRun {
			log.WithField("anchor", r.Name).Info("dry run: would delete the anchor")
			continue
		}
		if err := c.deleteAnchor(ctx, ns, r); err != nil {
			return "error", err
		}
		why := "the template moved on"
		if !exists {
			why = "the workload is gone"
		}
		log.WithFields(logrus.Fields{"anchor": r.Name, "why": why}).Info("deleted the anchor")
		result = "patched"
	}
	if !exists && kept == 0 {
		// Gone, and no anchor of it left: nothing to time any more.
		c.mu.Lock()
		delete(c.gone, wk)
		c.mu.Unlock()
	}
	return result, nil
}

// createAnchor creates anchor a in namespace ns, its Namespace as controller (false: it
// exists already).
func (c *Controller) createAnchor(ctx context.Context, ns string, a plugin.Anchor) (bool, error) {
	nsUID, err := c.namespaceUID(ctx, ns)
	if err != nil {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, plugin.DefaultRequestTimeout)
	defer cancel()
	_, err = c.cfg.Kube.AppsV1().ControllerRevisions(ns).Create(rctx, a.ControllerRevision(ns, nsUID), metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating the anchor %s of %s in namespace %s: %w", a.ObjectName(), a.Workload(), ns, err)
	}
	c.m.Anchors.WithLabelValues("created").Inc()
	return true, nil
}

// deleteAnchor deletes the cached anchor r, its UID as a precondition (one deleted or replaced
// meanwhile is left as it is).
func (c *Controller) deleteAnchor(ctx context.Context, ns string, r *cachedRevision) error {
	uid := r.UID
	rctx, cancel := context.WithTimeout(ctx, plugin.DefaultRequestTimeout)
	defer cancel()
	err := c.cfg.Kube.AppsV1().ControllerRevisions(ns).Delete(rctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the anchor %s of %s in namespace %s: %w", r.Name, r.Anchor.Workload(), ns, err)
	}
	c.m.Anchors.WithLabelValues("deleted").Inc()
	return nil
}

// usesOptedIn reports whether any of refs is an opted-in object: only those get an anchor
// (an anchor for a template whose config nobody opted in would be a ControllerRevision for
// nothing).
func (c *Controller) usesOptedIn(ns string, refs []plugin.Object) bool {
	for _, o := range refs {
		if c.optedIn(c.object(Key{ns, o.Kind, o.Name})) {
			return true
		}
	}
	return false
}

// unsettled lists the anchor's objects that still need it: an object that exists and has a
// user that cannot own it, or a user whose owner it does not have yet (queued, so the next
// look finds it settled). Deleting the anchor of such an object could let the collector take
// it while something still uses it.
func (c *Controller) unsettled(sc *scope, ns string, anchor *cachedRevision) []plugin.Object {
	var out []plugin.Object
	for _, o := range anchor.Anchor.Refs {
		k := Key{ns, o.Kind, o.Name}
		m := c.object(k)
		if m == nil || m.Deleting || !m.OptedIn {
			// Gone, or not ours to maintain (the anchor is never written to an object that is
			// not opted in).
			continue
		}
		have := map[types.UID]bool{}
		for _, ref := range c.ownersWithPending(k, m) {
			have[ref.UID] = true
		}
		users := view{c, ns}.UsersOf(o)
		owners, blockers := plugin.OwnersOf(users)
		if len(blockers) > 0 && !onlyAnchorsPending(blockers) {
			out = append(out, o)
			continue
		}
		if plugin.CrowdNeeded(users) && (users.Crowd == nil || users.Crowd.UID == anchor.UID || !have[users.Crowd.UID]) {
			// Its many Jobs and Pods own only through a crowd anchor that is not an owner yet
			// (or is this one): none of them may be the one that keeps it.
			out = append(out, o)
			c.enqueue(k, false)
			continue
		}
		for _, w := range owners {
			if w.UID != anchor.UID && !have[w.UID] {
				out = append(out, o)
				c.enqueue(k, false)
				break
			}
		}
	}
	return out
}

// foreignRefs lists the anchor's objects that are another installation's to decide on: this
// one cannot see whether their users still need the anchor. An anchor none of whose existing
// objects this install adopts is wholly another's (or nobody's, once their label was removed),
// even before it owns any of them: the install that created it adds it as an owner a moment
// later. Of an anchor this install shares, the objects it does not adopt and the anchor owns.
func (c *Controller) foreignRefs(ns string, anchor *cachedRevision) []plugin.Object {
	var others, owned []plugin.Object
	ours := false
	for _, o := range anchor.Anchor.Refs {
		m := c.object(Key{ns, o.Kind, o.Name})
		switch {
		case m == nil || m.Deleting:
		case m.OptedIn:
			ours = true
		default:
			others = append(others, o)
			if slices.Contains(m.AnchorOwners, anchor.UID) {
				owned = append(owned, o)
			}
		}
	}
	if ours {
		return owned
	}
	return others
}

// anchorPending is how a workload whose anchor is being created is named among blockers.
const anchorPending = plugin.AnchorPending

// onlyAnchorsPending reports whether every blocker is a workload whose anchor is being created:
// not a user that cannot own, only one whose owner is a moment away (the anchor's add event
// brings the object back).
func onlyAnchorsPending(blockers []string) bool {
	for _, b := range blockers {
		if !strings.HasSuffix(b, anchorPending) {
			return false
		}
	}
	return len(blockers) > 0
}

// enqueueAnchors queues the anchor sync of every workload of a scope that has a template, and
// of every workload an anchor names (its workload may be gone: the grace starts now).
func (c *Controller) enqueueAnchors(sc *scope) int {
	n := 0
	seen := map[Key]bool{}
	add := func(ns, kind, name string) {
		k := Key{ns, kindWorkload, kind + "/" + name}
		if !seen[k] {
			seen[k] = true
			c.queue.Add(k)
			n++
		}
	}
	for _, w := range sc.templatedWorkloads() {
		for _, it := range w.inf.GetIndexer().List() {
			if d, ok := it.(*cachedObject); ok && len(d.Refs) > 0 {
				add(d.Namespace, w.kind, d.Name)
			}
		}
	}
	for i, inf := range sc.templates {
		if kind := templateKinds[i]; kind == "StatefulSet" || kind == "DaemonSet" || kind == "CronJob" {
			for _, it := range inf.GetIndexer().List() {
				if t, ok := it.(*cachedTemplate); ok && len(t.Refs) > 0 {
					add(t.Namespace, kind, t.Name)
				}
			}
		}
	}
	if sc.revisions != nil {
		for _, v := range sc.revisions.GetIndexer().ListIndexFuncValues(byAnchorOf) {
			parts := strings.SplitN(v, "/", 3)
			if len(parts) == 3 {
				add(parts[0], parts[1], parts[2])
			}
		}
	}
	return n
}
