package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// A reconcile's outcome: what the core's answer becomes (outcome: the result label, logs,
// counters), the Warning Events on workloads (blocked, refused), and the reasons a reconcile
// fails (the reason label of reconcile_errors_total).

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

// outcome turns the core's answer for object k (cached as m) into the reconcile's result
// ("noop", "patched", "dry_run", "blocked", "error"): the crowd anchor's sync when it is due,
// the pending references and the reaction time, the counters, the log line, and a Warning
// Event on each workload whose ReplicaSet was refused for good.
func (c *Controller) outcome(k Key, m *cachedObject, res plugin.Result, err error) (string, error) {
	log := c.log.WithFields(logrus.Fields{"namespace": k.Namespace, "object": k.object().String()})
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
