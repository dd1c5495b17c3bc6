package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// One reconcile: the ReplicaSets that use an object, the core's Adopt, and how failures are
// reported.

// replicaSetsOf returns the watched ReplicaSets whose template references k (live or not),
// oldest first, with their references (as plugin.MissingOwners takes them).
func (c *Controller) replicaSetsOf(k Key) ([]*appsv1.ReplicaSet, []plugin.References) {
	sc := c.scopeOf(k.Namespace)
	if sc == nil {
		return nil, nil
	}
	items, err := sc.rs.GetIndexer().ByIndex(byRef, k.String())
	if err != nil {
		return nil, nil
	}
	crs := make([]*cachedReplicaSet, 0, len(items))
	for _, it := range items {
		if rs, ok := it.(*cachedReplicaSet); ok {
			crs = append(crs, rs)
		}
	}
	// plugin.SortReplicaSets' order: creationTimestamp, then name.
	slices.SortFunc(crs, func(x, y *cachedReplicaSet) int { return plugin.OlderFirst(x, y) })
	rss := make([]*appsv1.ReplicaSet, len(crs))
	refs := make([]plugin.References, len(crs))
	for i, r := range crs {
		rss[i], refs[i] = r.replicaSet(), r.references()
	}
	return rss, refs
}

// Reconcile brings one object's owner references in line: every live watched ReplicaSet
// that references it and is not an owner yet is added, in one patch. Nothing missing, no
// request. The result says what happened ("noop", "patched", "dry_run").
func (c *Controller) Reconcile(ctx context.Context, k Key) (string, error) {
	m := c.object(k)
	if !c.optedIn(m) {
		c.reacted(k, false)
		return "noop", nil
	}
	rss, refs := c.replicaSetsOf(k)
	// The core's adoption stage, as audit -fix runs it: MissingOwners over the ReplicaSets that
	// reference the object, one add-only patch with the object's UID as a precondition; an
	// object no ReplicaSet owns yet has its new owners confirmed with a live read first (the
	// caches may lag, and a deleted ReplicaSet as its only owner would get it collected).
	cand := plugin.Candidate{Object: k.object(), UID: m.UID, Owners: c.ownersWithPending(k, m),
		ReplicaSets: rss, Refs: refs, VerifyOwners: !m.RSOwned}
	missing := plugin.MissingOwners(cand.Object, cand.Owners, rss, refs)
	if len(missing) == 0 {
		c.reacted(k, false)
		return "noop", nil
	}
	log := c.log.WithFields(logrus.Fields{"namespace": k.Namespace, "object": k.object().String(), "replicasets": names(missing)})
	if c.cfg.DryRun {
		log.Info("dry run: would add the ReplicaSets as owners")
		c.m.OwnerReferencesWouldAdd.WithLabelValues(string(k.Kind)).Add(float64(len(missing)))
		c.reacted(k, true)
		return "dry_run", nil
	}
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	// The controller decides candidacy itself (opted in, from its cache): no policy here.
	res, err := c.attacher.Adopt(rctx, k.Namespace, []plugin.Candidate{cand}, plugin.Policy{}, false)
	if err == nil && len(res.Errors) > 0 {
		err = res.Errors[0].Err
	}
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
	case len(res.Added) == 0:
		// Every ReplicaSet to add is gone (the cache lagged): its delete event brings us back.
		log.Info("the ReplicaSets to add no longer exist; nothing written")
		c.reacted(k, false)
		return "noop", nil
	}
	added := res.Added[0].ReplicaSets
	c.markPending(k, m.UID, added)
	c.m.OwnerReferencesAdded.WithLabelValues(string(k.Kind)).Add(float64(len(added)))
	c.reacted(k, true)
	log.WithField("replicasets", names(added)).Info("added the ReplicaSets as owners")
	return "patched", nil
}

func names(rss []*appsv1.ReplicaSet) []string {
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

// reason is the label of reconcile_errors_total.
func reason(err error) string {
	var ne net.Error
	switch {
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return "invalid"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return "server"
	case errors.As(err, &ne):
		return "transport"
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code >= 500 {
		return "server"
	}
	if errors.As(err, &st) {
		return "other"
	}
	return "transport"
}

// warn records a Warning Event on each workload whose ReplicaSet could not become an owner.
func (c *Controller) warn(k Key, rss []*appsv1.ReplicaSet, err error) {
	done := map[types.UID]bool{}
	for _, rs := range rss {
		ref := c.workloadOf(rs.OwnerReferences)
		if ref == nil || done[ref.UID] {
			continue
		}
		done[ref.UID] = true
		c.events.Eventf(&corev1.ObjectReference{Kind: ref.Kind, APIVersion: ref.APIVersion, Name: ref.Name, Namespace: rs.Namespace, UID: ref.UID},
			corev1.EventTypeWarning, "OwnerReferenceFailed", "cannot make ReplicaSet %s an owner of %s: %s (see %s)", rs.Name, k.object(), apiMessage(err), RBACHint)
	}
}

func apiMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}
