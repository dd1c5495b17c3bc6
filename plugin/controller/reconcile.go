package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// One reconcile: the object as a candidate of the core's Reconcile, and how failures are
// reported.

// watchedUser reports whether a live user of a kind -workloads names uses k: only then is the
// object adopted, the controller's candidate (-workloads picks whose config is adopted; every
// user of an adopted object owns it, whatever its kind, when the core decides the owners).
func (c *Controller) watchedUser(k Key) bool {
	sc := c.scopeOf(k.Namespace)
	if sc == nil {
		return false
	}
	items, _ := sc.rs.GetIndexer().ByIndex(byRef, k.String())
	for _, it := range items {
		if rs, ok := it.(*cachedReplicaSet); ok && rs.DeletionTimestamp == nil && c.workloadOf(rs.OwnerReferences) != nil {
			return true
		}
	}
	// Every other kind of user adopts too: a StatefulSet's or DaemonSet's revision, a Job, a
	// CronJob, a bare Pod, a Deployment's current template (every user owns).
	if sc.revisions != nil {
		items, _ := sc.revisions.GetIndexer().ByIndex(byRef, k.String())
		for _, it := range items {
			if r, ok := it.(*cachedRevision); ok {
				if ref := metav1.GetControllerOfNoCopy(r); ref != nil && c.adopts(ref.Kind) {
					return true
				}
			}
		}
	}
	for _, inf := range sc.templates {
		items, _ := inf.GetIndexer().ByIndex(byRef, k.String())
		for _, it := range items {
			if t, ok := it.(*cachedTemplate); ok && t.DeletionTimestamp == nil && (t.Kind != "Pod" || t.Controller == nil) && c.adopts(t.Kind) {
				return true
			}
		}
	}
	for _, w := range sc.templatedWorkloads() {
		if w.kind == plugin.KindDeployment && !c.cfg.Deployments || w.kind == plugin.KindRollout && !c.cfg.Rollouts {
			continue
		}
		if items, _ := w.inf.GetIndexer().ByIndex(byRef, k.String()); len(items) > 0 {
			return true
		}
	}
	return false
}

// Reconcile brings one object's owner references in line through the core's one write entry
// point (plugin.Attacher.Reconcile), as every mode does: the object is the candidate, the
// caches are the namespace's users, the opt-in selector is the policy. Every live ReplicaSet
// that uses it and whose controller is live gets added in one patch; a user that cannot own it
// blocks it (a Warning Event, blocked_total); nothing missing, no request. The result says what
// happened ("noop", "patched", "dry_run", "blocked").
func (c *Controller) Reconcile(ctx context.Context, k Key) (string, error) {
	if k.Kind == kindWorkload {
		return c.syncAnchors(ctx, k)
	}
	m := c.object(k)
	if !c.optedIn(m) || !c.watchedUser(k) {
		c.reacted(k, false)
		return "noop", nil
	}
	cand := plugin.Candidate{Object: k.object(), UID: m.UID, Labels: m.Labels, Owners: c.ownersWithPending(k, m), ReplicaSetOwned: m.RSOwned || len(m.Owners) > 0}
	req := plugin.Request{Namespace: k.Namespace, Users: view{c, k.Namespace}, Candidates: []plugin.Candidate{cand},
		Policy: plugin.Policy{RequireOptIn: true, OptIn: c.cfg.Selector}, DryRun: c.cfg.DryRun}
	log := c.log.WithFields(logrus.Fields{"namespace": k.Namespace, "object": k.object().String()})
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	res, err := c.attacher.Reconcile(rctx, req)
	if err == nil && len(res.Errors) > 0 {
		err = res.Errors[0].Err
	}
	if len(res.Blocked) > 0 && onlyAnchorsPending(res.Blocked[0].Users) {
		// A workload's anchor is a moment away: its add event brings the object back. The
		// crowd anchor is this object's own: its sync is queued here.
		log.WithField("users", strings.Join(res.Blocked[0].Users, ", ")).Debug("waiting for an anchor")
		c.crowdDue(k, true)
		c.reacted(k, false)
		return "noop", nil
	}
	// A crowd anchor may go once the Jobs and Pods are few again and own the object themselves
	// (written just now, or before): its sync decides.
	defer c.crowdDue(k, false)
	if len(res.Blocked) > 0 {
		c.blocked(k, res.Blocked[0])
		c.reacted(k, false)
		return "blocked", nil
	}
	if len(res.Added) == 0 && err == nil {
		if len(res.Plan.Writes) > 0 {
			// Every ReplicaSet to add is gone, or its workload is (the caches lagged): the add
			// event of the ReplicaSet or of the workload that replaces it brings us back.
			log.Info("the ReplicaSets to add no longer exist; nothing written")
		}
		c.reacted(k, false)
		return "noop", nil
	}
	var missing []plugin.Owner
	for _, w := range res.Plan.Writes {
		missing = append(missing, w.Owners...)
	}
	log = log.WithField("owners", names(missing))
	switch {
	case err != nil && apierrors.IsNotFound(err):
		// Deleted since the cache saw it: nothing to own.
		c.reacted(k, false)
		return "noop", nil
	case err != nil && plugin.IsReplaced(err):
		// Deleted and recreated under the same name since the cache saw it: the cache's update
		// brings the new object here again.
		log.Info("the object was replaced since the cache saw it; it is reconciled again when the cache catches up")
		c.reacted(k, false)
		return "noop", nil
	case err != nil:
		if permanent(err) {
			c.warn(k, missing, err)
		}
		return "error", fmt.Errorf("adding %s as owners of %s in namespace %s: %w", strings.Join(names(missing), ", "), k.object(), k.Namespace, err)
	case c.cfg.DryRun:
		log.Info("dry run: would add the ReplicaSets as owners")
		c.m.OwnerReferencesWouldAdd.WithLabelValues(string(k.Kind)).Add(float64(len(missing)))
		c.reacted(k, true)
		return "dry_run", nil
	}
	added := res.Added[0].Owners
	c.markPending(k, m.UID, added)
	c.m.OwnerReferencesAdded.WithLabelValues(string(k.Kind)).Add(float64(len(added)))
	c.reacted(k, true)
	log.WithField("owners", names(added)).Info("added the owners")
	return "patched", nil
}

// blocked reports an object a user that cannot own it also uses: a Warning Event on each
// watched workload that uses it, the blocked counter and a log line; nothing is written.
func (c *Controller) blocked(k Key, b plugin.Blocked) {
	c.m.Blocked.WithLabelValues(string(k.Kind)).Inc()
	c.log.WithFields(logrus.Fields{"namespace": k.Namespace, "object": k.object().String(), "users": strings.Join(b.Users, ", ")}).Warn("left alone: " + b.Message())
	sc := c.scopeOf(k.Namespace)
	if sc == nil {
		return
	}
	items, _ := sc.rs.GetIndexer().ByIndex(byRef, k.String())
	done := map[types.UID]bool{}
	for _, it := range items {
		rs, ok := it.(*cachedReplicaSet)
		if !ok {
			continue
		}
		ref := c.workloadOf(rs.OwnerReferences)
		if ref == nil || done[ref.UID] {
			continue
		}
		done[ref.UID] = true
		c.events.Eventf(&corev1.ObjectReference{Kind: ref.Kind, APIVersion: ref.APIVersion, Name: ref.Name, Namespace: k.Namespace, UID: ref.UID},
			corev1.EventTypeWarning, ReasonOwnerReferenceBlocked, "%s", b.Message())
	}
}

func names(rss []plugin.Owner) []string {
	out := make([]string, len(rss))
	for i, rs := range rss {
		out[i] = rs.Name
	}
	return out
}

// permanent reports errors a retry of the same patch cannot fix: forbidden (RBAC, or
// OwnerReferencesPermissionEnforcement without delete) and rejected (422, 400).
func permanent(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || plugin.IsPermanent(err)
}

// The kinds of failed reconcile: the reason label of reconcile_errors_total and the reason
// field of the "reconcile failed" log lines. Constants, so that docs/troubleshooting.md's test
// finds every one (each has an entry there).
const (
	FailureForbidden = "forbidden"
	FailureInvalid   = "invalid"
	FailureConflict  = "conflict"
	FailureThrottled = "throttled"
	FailureTimeout   = "timeout"
	FailureServer    = "server"
	FailureTransport = "transport"
	FailureOther     = "other"
	FailurePanic     = "panic"
)

// The reasons of the controller's Warning Events on a workload.
const (
	// ReasonOwnerReferenceBlocked: a user the controller cannot make an owner (a Pod or Job of
	// an unknown controller kind) keeps an object from being adopted.
	ReasonOwnerReferenceBlocked = "OwnerReferenceBlocked"
	// ReasonOwnerReferenceFailed: the patch adding an owner reference was refused for good.
	ReasonOwnerReferenceFailed = "OwnerReferenceFailed"
)

// reason is the label of reconcile_errors_total.
func reason(err error) string {
	var ne net.Error
	switch {
	case apierrors.IsForbidden(err):
		return FailureForbidden
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return FailureInvalid
	case apierrors.IsConflict(err):
		return FailureConflict
	case apierrors.IsTooManyRequests(err):
		return FailureThrottled
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return FailureTimeout
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return FailureServer
	case errors.As(err, &ne):
		return FailureTransport
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code >= 500 {
		return FailureServer
	}
	if errors.As(err, &st) {
		return FailureOther
	}
	return FailureTransport
}

// warn records a Warning Event on each workload whose ReplicaSet could not become an owner.
func (c *Controller) warn(k Key, rss []plugin.Owner, err error) {
	done := map[types.UID]bool{}
	for _, rs := range rss {
		if rs.Controller == nil {
			continue
		}
		ref := c.workloadOf([]metav1.OwnerReference{*rs.Controller})
		if ref == nil || done[ref.UID] {
			continue
		}
		done[ref.UID] = true
		c.events.Eventf(&corev1.ObjectReference{Kind: ref.Kind, APIVersion: ref.APIVersion, Name: ref.Name, Namespace: k.Namespace, UID: ref.UID},
			corev1.EventTypeWarning, ReasonOwnerReferenceFailed, "cannot make ReplicaSet %s an owner of %s: %s (see %s)", rs.Name, k.object(), plugin.APIMessage(err), RBACHint)
	}
}

// The reconcile's own memory: the owner references it wrote that the cache does not show
// yet, and when an add event made an object due (for the reaction time).

type pendingOwners struct {
	uids map[types.UID]bool
	at   time.Time
	// object is the UID of the object they were written on.
	object types.UID
}

// settle drops the pending references the cache now shows.
func (c *Controller) settle(k Key, owners []types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[k]
	if !ok {
		return
	}
	for _, uid := range owners {
		delete(p.uids, uid)
	}
	if len(p.uids) == 0 {
		delete(c.pending, k)
	}
}

// ownersWithPending is the object's owner list plus the references we wrote that the cache
// does not show yet (expired after pendingTTL, so a reference someone removed is re-added;
// dropped when the name now belongs to another object).
func (c *Controller) ownersWithPending(k Key, m *cachedObject) []metav1.OwnerReference {
	out := make([]metav1.OwnerReference, 0, len(m.Owners))
	for _, uid := range m.Owners {
		out = append(out, metav1.OwnerReference{UID: uid})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[k]
	if !ok {
		return out
	}
	if time.Since(p.at) > pendingTTL || p.object != m.UID {
		delete(c.pending, k)
		return out
	}
	for uid := range p.uids {
		out = append(out, metav1.OwnerReference{UID: uid})
	}
	return out
}

func (c *Controller) markPending(k Key, object types.UID, rss []plugin.Owner) {
	c.mu.Lock()
	p, ok := c.pending[k]
	if !ok || p.object != object {
		p = pendingOwners{uids: map[types.UID]bool{}, object: object}
	}
	p.at = time.Now()
	for _, rs := range rss {
		p.uids[rs.UID] = true
	}
	c.pending[k] = p
	c.mu.Unlock()
	// Look again once the pending references expire: if the cache never showed them (someone
	// stripped the owner list meanwhile), the object must not wait for the next resync.
	c.queue.AddAfter(k, pendingTTL+time.Second)
}

// reacted observes the reaction time of k's add event, if one is due.
func (c *Controller) reacted(k Key, observe bool) {
	c.mu.Lock()
	t, ok := c.seen[k]
	delete(c.seen, k)
	c.mu.Unlock()
	if ok && observe {
		c.m.Reaction.Observe(time.Since(t).Seconds())
	}
}
