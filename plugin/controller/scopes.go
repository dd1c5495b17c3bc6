package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Degraded operation: a scope (one watched namespace, or all) whose caches do not sync —
// typically its list is forbidden because a Role or RoleBinding is missing — is reported and
// left out, and the other scopes are served; a scope that syncs later is served from then on.
// Ready and Readiness (/readyz) say whether the controller serves and which scopes it does not.

// RBACHintNamespaced is the example RBAC of a controller that watches listed namespaces.
const RBACHintNamespaced = "examples/controller-namespaced.yaml"

// scopePoll is how often a scope that has not synced is looked at again.
const scopePoll = 100 * time.Millisecond

// namedInformer is one informer of a scope, named by its resource (replicasets, configmaps,
// secrets).
type namedInformer struct {
	resource string
	inf      cache.SharedIndexInformer
}

// scopeInformers lists the informers of sc, ReplicaSets first, then by resource.
// every informer of the scope: keep in sync with scope
func scopeInformers(sc *scope) []namedInformer {
	out := []namedInformer{{resource: "replicasets", inf: sc.rs}}
	for kind, inf := range sc.objs {
		out = append(out, namedInformer{resource: kind.Resource().Resource, inf: inf})
	}
	for _, w := range workloadKinds {
		if inf := sc.workloads[w.kind]; inf != nil {
			out = append(out, namedInformer{resource: w.gvr.Resource, inf: inf})
		}
	}
	for i, inf := range sc.templates {
		out = append(out, namedInformer{resource: templateResources[i], inf: inf})
	}
	if sc.revisions != nil {
		out = append(out, namedInformer{resource: "controllerrevisions", inf: sc.revisions})
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].resource < out[1+j].resource })
	return out
}

// scopeSynced reports whether every informer of sc has synced. Only then is the scope served:
// its view of which ReplicaSets use an object is complete. (An informer stays synced once it is.)
func scopeSynced(sc *scope) bool {
	for _, ni := range scopeInformers(sc) {
		if !ni.inf.HasSynced() {
			return false
		}
	}
	return true
}

// scopeServed reports whether the scope that holds namespace ns is served.
func (c *Controller) scopeServed(ns string) bool {
	sc := c.scopeOf(ns)
	return sc != nil && scopeSynced(sc)
}

// UnsyncedScope is a scope whose caches have not synced: its objects are not reconciled.
type UnsyncedScope struct {
	// Namespace is the watched namespace ("" when watching all).
	Namespace string
	// Resources are those whose cache has not synced (replicasets, configmaps, secrets).
	Resources []string
}

func (u UnsyncedScope) String() string {
	return describeScope(u.Namespace) + ": " + strings.Join(u.Resources, ", ")
}

// Unsynced lists the scopes whose caches have not synced, by namespace.
func (c *Controller) Unsynced() []UnsyncedScope {
	var out []UnsyncedScope
	for ns, sc := range c.scopes {
		var res []string
		for _, ni := range scopeInformers(sc) {
			if !ni.inf.HasSynced() {
				res = append(res, ni.resource)
			}
		}
		if len(res) > 0 {
			out = append(out, UnsyncedScope{Namespace: ns, Resources: res})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// Readiness is /readyz: ready once the controller serves (at least one scope synced, see
// Run), with a body that names the scopes not synced and their resources.
func (c *Controller) Readiness() (bool, string) {
	un := c.Unsynced()
	lines := make([]string, 0, len(un)+1)
	ready := c.Ready()
	switch {
	case !ready:
		lines = append(lines, "caches not synced")
	case len(un) == 0:
		return true, "ok"
	default:
		lines = append(lines, fmt.Sprintf("ok: serving %d of %d namespaces; the objects of the others are not reconciled until their caches sync", len(c.scopes)-len(un), len(c.scopes)))
	}
	for _, u := range un {
		lines = append(lines, "not synced: "+u.String()+"; is list and watch allowed? "+rbacHint(u.Namespace))
	}
	return ready, strings.Join(lines, "\n")
}

func describeScope(ns string) string {
	if ns == metav1.NamespaceAll {
		return "all namespaces"
	}
	return "namespace " + ns
}

// rbacHint is the example RBAC that grants a scope's list and watch.
func rbacHint(ns string) string {
	if ns == metav1.NamespaceAll {
		return RBACHint
	}
	return RBACHintNamespaced + " (a Role and RoleBinding in the namespace) or " + RBACHint + " (cluster-wide)"
}

// listErrors records, per informer, the last list or watch error before it synced.
type listErrors struct {
	mu   sync.Mutex
	last map[cache.SharedIndexInformer]error
}

// forbidden reports whether the last error of one of sc's unsynced informers is Forbidden:
// the scope cannot sync until its RBAC changes, so the others need not wait for it.
func (e *listErrors) forbidden(sc *scope) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ni := range scopeInformers(sc) {
		if err := e.last[ni.inf]; err != nil && !ni.inf.HasSynced() && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) {
			return true
		}
	}
	return false
}

// watchListErrors installs a watch error handler on every informer (before they start): an
// error before the informer synced is logged as a Warning naming the namespace, the resource
// and the RBAC fix (once per distinct message) and recorded for the sync decision; after the
// sync, client-go's default handler logs it as usual.
func (c *Controller) watchListErrors() (*listErrors, error) {
	e := &listErrors{last: map[cache.SharedIndexInformer]error{}}
	for ns, sc := range c.scopes {
		for _, ni := range scopeInformers(sc) {
			log := c.log.WithFields(logrus.Fields{"namespace": ns, "resource": ni.resource})
			if err := ni.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
				if ni.inf.HasSynced() {
					cache.DefaultWatchErrorHandler(ctx, r, err)
					return
				}
				e.mu.Lock()
				prev := e.last[ni.inf]
				e.last[ni.inf] = err
				e.mu.Unlock()
				if prev != nil && prev.Error() == err.Error() {
					log.WithError(err).Debug("listing failed again")
					return
				}
				msg := fmt.Sprintf("cannot list %s in %s: its objects are not reconciled until it syncs", ni.resource, describeScope(ns))
				if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
					msg += fmt.Sprintf("; grant list and watch on %s to the controller's service account: %s", ni.resource, rbacHint(ns))
				}
				log.WithError(err).Warn(msg)
			}); err != nil {
				return nil, fmt.Errorf("%s informer of %s: %w", ni.resource, describeScope(ns), err)
			}
		}
	}
	return e, nil
}

// awaitServable waits until the controller may serve: every scope synced, or at least one
// synced and either syncTimeout has passed or every scope still unsynced is forbidden (its
// RBAC must change first). With no scope synced it keeps waiting, past syncTimeout too (not
// ready, no lease: nothing could be reconciled anyway). False when ctx ends first.
func (c *Controller) awaitServable(ctx context.Context, errs *listErrors, t0 time.Time) bool {
	warnedNone := false
	err := wait.PollUntilContextCancel(ctx, scopePoll, true, func(context.Context) (bool, error) {
		synced, blocked := 0, 0
		for _, sc := range c.scopes {
			switch {
			case scopeSynced(sc):
				synced++
			case errs.forbidden(sc):
				blocked++
			}
		}
		timedOut := time.Since(t0) >= syncTimeout
		switch {
		case synced == len(c.scopes):
			return true, nil
		case synced > 0 && (timedOut || synced+blocked == len(c.scopes)):
			return true, nil
		case synced == 0 && timedOut && !warnedNone:
			warnedNone = true
			c.log.WithField("unsynced", unsyncedList(c.Unsynced())).Warnf("no namespace synced after %s: still waiting (not ready); is list and watch allowed for this identity (%s)?", syncTimeout, RBACHint)
		}
		return false, nil
	})
	if err != nil {
		return false
	}
	for _, u := range c.Unsynced() {
		c.log.WithFields(logrus.Fields{"namespace": u.Namespace, "resources": strings.Join(u.Resources, ",")}).
			Warnf("%s did not sync: serving the other namespaces; its objects are reconciled once it syncs; grant list and watch on %s: %s", describeScope(u.Namespace), strings.Join(u.Resources, ", "), rbacHint(u.Namespace))
	}
	return true
}

func unsyncedList(un []UnsyncedScope) string {
	s := make([]string, len(un))
	for i, u := range un {
		s[i] = u.String()
	}
	return strings.Join(s, "; ")
}

// serving is the start's record of which scopes were synced when the controller started to
// serve, so that only a scope that syncs later is announced and queued by superviseScopes.
type serving struct {
	mu     sync.Mutex
	on     bool
	served map[*scope]bool
}

// startServing marks the controller as serving, with the scopes synced now.
func (c *Controller) startServing(s *serving) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range c.scopes {
		if scopeSynced(sc) {
			s.served[sc] = true
		}
	}
	s.on = true
	c.synced.Store(true)
	c.m.Ready.Set(1)
}

// late reports whether sc, synced now, synced after the controller started serving (once).
func (s *serving) late(sc *scope) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on || s.served[sc] {
		return false
	}
	s.served[sc] = true
	return true
}

// superviseScopes sets each scope's synced gauge, and serves a scope that syncs after the
// controller started serving: logged, and its objects queued when leading (a scope that syncs
// before lead's full reconcile is in it; one that syncs after sees leading set, so it is
// queued here).
func (c *Controller) superviseScopes(ctx context.Context, s *serving, t0 time.Time) {
	for ns, sc := range c.scopes {
		g := c.m.ScopeSynced.WithLabelValues(ns)
		g.Set(0)
		go func() {
			if wait.PollUntilContextCancel(ctx, scopePoll, true, func(context.Context) (bool, error) { return scopeSynced(sc), nil }) != nil {
				return
			}
			g.Set(1)
			log := c.log.WithFields(logrus.Fields{"namespace": ns, "duration": time.Since(t0).Round(time.Millisecond).String()})
			if !s.late(sc) {
				log.Debug("caches synced")
				return
			}
			if c.leading.Load() {
				log = log.WithField("objects", c.enqueueScope(sc))
			}
			log.Infof("%s synced late: now served", describeScope(ns))
		}()
	}
}

// syncTimeout is how long the start waits for every scope's caches before it serves the scopes
// that synced (a var for the tests).
var syncTimeout = 5 * time.Minute

// Ready reports whether the controller serves, standbys included (/readyz): every scope's
// caches synced, or at least one and the others given up on for now (see awaitServable).
func (c *Controller) Ready() bool { return c.synced.Load() }
