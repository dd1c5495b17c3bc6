package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
)

// The controller's loop, in the order an event travels (as in kubernetes/sample-controller):
//
//  1. Events → queue. Every informer's event handler is here: objectHandler (ConfigMaps and
//     Secrets), replicaSetHandler, workloadHandler (Deployments, Rollouts, Experiments),
//     templateHandler (StatefulSets, DaemonSets, Jobs, CronJobs, Pods) and revisionHandler
//     (ControllerRevisions). Each queues Keys (enqueue, enqueueRefs, enqueueWorkload): an
//     opted-in object, or the anchor sync of a workload. Only the leader queues.
//  2. Queue → workers. Run starts the caches and leads (lease.go: once elected); lead queues
//     the full reconcile (enqueueAll, again every Resync), then runs the workers, each taking
//     keys with processNext.
//  3. Worker → core. safeReconcile recovers a panic around Reconcile, which hands the cached
//     object to the core's one write entry point, plugin.Attacher.Reconcile, with the caches
//     as its users (users.go view); outcome.go turns the result into metrics, logs and Events.
//
// The caches it reads are built in informers.go (the users' in users.go and owners.go), the
// records they keep are in cache.go.

// Key is the unit of work: one ConfigMap or Secret, or (Kind kindWorkload) the anchor sync of
// one workload.
type Key struct {
	Namespace string
	Kind      plugin.Kind
	Name      string
}

// String is namespace/kind/name, also the value of the ReplicaSet indexes.
func (k Key) String() string { return k.Namespace + "/" + string(k.Kind) + "/" + k.Name }

func (k Key) object() plugin.Object { return plugin.Object{Kind: k.Kind, Name: k.Name} }

// parseKey reads back a Key.String (the values of the byRef indexes).
func parseKey(s string) (Key, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Key{}, false
	}
	return Key{parts[0], plugin.Kind(parts[1]), parts[2]}, true
}

// Controller is the watcher. Create it with New, then call Run.
type Controller struct {
	cfg      Config
	log      logrus.FieldLogger
	m        *Metrics
	attacher *plugin.Attacher
	queue    workqueue.TypedRateLimitingInterface[Key]
	scopes   map[string]*scope // by namespace; "" when watching all
	starters []func(<-chan struct{})
	events   record.EventRecorder
	bcast    record.EventBroadcaster

	leading atomic.Bool
	synced  atomic.Bool
	healthz *leaderelection.HealthzAdaptor

	mu sync.Mutex
	// pending holds owner references this process wrote that the cache may not show yet: a
	// second event for the same object right after a patch must not send the patch again.
	pending map[Key]pendingOwners
	// seen holds the time of the add event that made an object's references due (reaction time).
	seen map[Key]time.Time
	// gone holds when a workload (namespace/Kind/name) with anchors was first seen absent: its
	// anchors are kept for AnchorGrace from then (a restart starts the grace again: longer,
	// never shorter).
	gone map[string]time.Time
	// gaugeNamespaces are the namespaces the gauges have a series for (set to 0 when clean).
	gaugeNamespaces map[string]bool
	// shared holds the namespaces and selector label sets the cached objects share.
	shared interner
}

// New builds the informers, indexes and queue; nothing talks to the apiserver before Run.
func New(cfg Config) (*Controller, error) {
	if cfg.Kube == nil || cfg.Meta == nil {
		return nil, errors.New("controller: Kube and Meta clients are required")
	}
	if !plugin.Positive(cfg.Selector) {
		return nil, errors.New("controller: an opt-in selector that selects less than everything is required")
	}
	if !cfg.Rollouts && !cfg.Deployments && cfg.Adopting != nil && len(cfg.Adopting) == 0 {
		return nil, errors.New("controller: no workload kind to watch")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.GaugeInterval <= 0 {
		cfg.GaugeInterval = DefaultGaugeInterval
	}
	if cfg.Log == nil {
		cfg.Log = logrus.StandardLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.LeaderKube == nil {
		cfg.LeaderKube = cfg.Kube
	}
	if cfg.AnchorGrace <= 0 {
		cfg.AnchorGrace = DefaultAnchorGrace
	}
	c := &Controller{cfg: cfg, log: cfg.Log, m: cfg.Metrics, scopes: map[string]*scope{},
		pending: map[Key]pendingOwners{}, seen: map[Key]time.Time{}, gone: map[string]time.Time{}, gaugeNamespaces: map[string]bool{}}
	c.attacher = &plugin.Attacher{Client: clientset.Typed(cfg.Kube), Meta: cfg.Meta, Log: cfg.Log, RBACHint: RBACHint}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Key](),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: "objects", MetricsProvider: cfg.Metrics})
	c.events = cfg.Events
	if c.events == nil {
		c.bcast = record.NewBroadcaster()
		c.events = c.bcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "configmap-attacher-controller"})
	}
	if le := cfg.LeaderElection; le != nil {
		// Created here, not in Run: /healthz may be served before Run starts.
		c.healthz = leaderelection.NewLeaderHealthzAdaptor(le.LeaseDuration + le.RenewDeadline)
	}
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		if err := c.addScope(ns); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// 1. Events → queue.

// objectHandler is the event handler of the ConfigMap or Secret cache: an opted-in object
// that appears, gains the label or whose owner list changed is queued; an update also drops
// the pending references the cache now shows; a delete forgets the object.
func (c *Controller) objectHandler(kind plugin.Kind) cache.ResourceEventHandler {
	keyOf := func(obj any) (Key, *cachedObject, bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		m, ok := obj.(*cachedObject)
		if !ok {
			return Key{}, nil, false
		}
		return Key{m.Namespace, kind, m.Name}, m, true
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if k, m, ok := keyOf(obj); ok && c.optedIn(m) {
				c.enqueue(k, !initial)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			k, n, ok := keyOf(newObj)
			_, o, ok2 := keyOf(oldObj)
			if !ok || !ok2 {
				return
			}
			c.settle(k, n.Owners)
			// Gaining the label is adoption; an owner list that changed may have lost one of
			// ours (only the garbage collector removes references, and only dangling ones).
			if c.optedIn(n) && (!c.optedIn(o) || !slices.Equal(o.Owners, n.Owners)) {
				c.enqueue(k, !c.optedIn(o))
			}
		},
		DeleteFunc: func(obj any) {
			if k, _, ok := keyOf(obj); ok {
				c.mu.Lock()
				delete(c.pending, k)
				delete(c.seen, k)
				c.mu.Unlock()
			}
		},
	}
}

// replicaSetHandler is the event handler of the ReplicaSet cache (onReplicaSet,
// onReplicaSetUpdate).
func (c *Controller) replicaSetHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { c.onReplicaSet(obj, !initial) },
		UpdateFunc: c.onReplicaSetUpdate,
	}
}

// onReplicaSet queues the opted-in objects a live ReplicaSet's template references, whatever
// controls it: a new user of an object a watched workload's ReplicaSet owns must become an
// owner too (Reconcile acts only on objects a watched workload uses).
func (c *Controller) onReplicaSet(obj any, react bool) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok || rs.DeletionTimestamp != nil {
		return
	}
	for _, o := range rs.Refs {
		k := Key{rs.Namespace, o.Kind, o.Name}
		if c.optedIn(c.object(k)) {
			c.enqueue(k, react)
		}
	}
}

// onReplicaSetUpdate reacts to what can make a ReplicaSet a new owner: adoption (its
// controller changed) and a template change (a new generation). Status updates, the bulk of
// ReplicaSet events, are ignored.
func (c *Controller) onReplicaSetUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*cachedReplicaSet)
	n, ok2 := newObj.(*cachedReplicaSet)
	if !ok1 || !ok2 {
		return
	}
	if controllerUID(o.OwnerReferences) != controllerUID(n.OwnerReferences) || o.Generation != n.Generation {
		c.onReplicaSet(n, true)
	}
}

func controllerUID(owners []metav1.OwnerReference) types.UID {
	if len(owners) > 0 {
		return owners[0].UID
	}
	return ""
}

// workloadHandler is the event handler of the Deployment, Rollout and Experiment caches: a
// workload that appears or is recreated brings its ReplicaSets' objects (onWorkload); one whose
// current template's references change, or that goes, brings its anchor sync and the objects
// of both templates (onTemplateChange).
func (c *Controller) workloadHandler(sc *scope, kind string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) { c.onWorkload(sc, kind, obj, initial) },
		UpdateFunc: func(old, obj any) {
			// Only a new UID (deleted and recreated between two watch events) or an orphaning
			// delete changes its ReplicaSets' standing; status updates do not.
			o, ok1 := old.(*cachedObject)
			n, ok2 := obj.(*cachedObject)
			if ok1 && ok2 && (o.UID != n.UID || o.Orphaning != n.Orphaning) {
				c.onWorkload(sc, kind, obj, false)
			}
			if ok1 && ok2 && (o.UID != n.UID || o.Deleting != n.Deleting || !slices.Equal(o.Refs, n.Refs)) {
				c.onTemplateChange(kind, o.Namespace, o.Name, o.Refs, n.Refs)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(*cachedObject); ok {
				c.onTemplateChange(kind, o.Namespace, o.Name, o.Refs, nil)
			}
		},
	}
}

// onWorkload queues the objects of a workload's ReplicaSets when the workload appears (or is
// recreated under the same name): its ReplicaSets may have been seen first, while their
// controller was still unknown or looked gone, and nothing else would bring their objects
// back before the resync. The initial list needs nothing: the full reconcile follows it.
func (c *Controller) onWorkload(sc *scope, kind string, obj any, initial bool) {
	m, ok := obj.(*cachedObject)
	if !ok || initial {
		return
	}
	c.onTemplateChange(kind, m.Namespace, m.Name, nil, m.Refs)
	if m.Deleting && !m.Orphaning {
		return
	}
	items, _ := sc.rs.GetIndexer().ByIndex(byController, m.Namespace+"/"+kind+"/"+m.Name)
	for _, it := range items {
		if rs, ok := it.(*cachedReplicaSet); ok && controllerUID(rs.OwnerReferences) == m.UID {
			c.onReplicaSet(rs, true)
		}
	}
}

// templateHandler is the event handler of the StatefulSet, DaemonSet, Job, CronJob and Pod
// caches: a user that comes (a Job, a bare Pod, a StatefulSet), changes its template or goes
// changes the object's owners: look at its objects again now rather than at the resync.
func (c *Controller) templateHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if t, ok := obj.(*cachedTemplate); ok && !initial {
				c.onTemplateChange(t.Kind, t.Namespace, t.Name, nil, t.Refs)
				c.enqueueRefs(t.Namespace, t.Refs, true)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*cachedTemplate)
			n, ok2 := newObj.(*cachedTemplate)
			if ok1 && ok2 && (o.UID != n.UID || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || !slices.Equal(o.Refs, n.Refs) ||
				controllerRefUID(o.Controller) != controllerRefUID(n.Controller)) {
				c.onTemplateChange(n.Kind, n.Namespace, n.Name, o.Refs, n.Refs)
				c.enqueueRefs(n.Namespace, append(slices.Clone(o.Refs), n.Refs...), false)
			}
		},
		DeleteFunc: c.onTemplateDelete,
	}
}

// onTemplateChange reacts to a workload whose current template's references changed (created,
// changed, deleted): its anchors are synced, and the objects of both sets looked at again.
func (c *Controller) onTemplateChange(kind, ns, name string, old, cur []plugin.Object) {
	if !slices.Contains(plugin.AnchorKinds, kind) {
		return
	}
	c.enqueueWorkload(ns, kind, name, 0)
	c.enqueueRefs(ns, old, false)
	c.enqueueRefs(ns, cur, true)
}

// onTemplateDelete queues the opted-in objects a deleted blocker referenced.
func (c *Controller) onTemplateDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(*cachedTemplate)
	if !ok {
		return
	}
	c.onTemplateChange(t.Kind, t.Namespace, t.Name, t.Refs, nil)
	for _, o := range t.Refs {
		k := Key{t.Namespace, o.Kind, o.Name}
		if c.optedIn(c.object(k)) {
			c.enqueue(k, false)
		}
	}
}

func controllerRefUID(ref *metav1.OwnerReference) types.UID {
	if ref == nil {
		return ""
	}
	return ref.UID
}

// revisionHandler is the event handler of the ControllerRevision cache: a revision or an anchor
// that comes, goes or changes its controller changes the owners of the objects it uses; an
// anchor's add and delete also bring its workload's anchor sync.
func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			r, ok := obj.(*cachedRevision)
			if !ok {
				return
			}
			// A new revision or anchor is a new owner of the objects it uses.
			c.enqueueRefs(r.Namespace, r.refs(), !initial)
			if r.Anchor != nil && !initial {
				c.enqueueWorkload(r.Namespace, r.Anchor.Kind, r.Anchor.Name, 0)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*cachedRevision)
			n, ok2 := newObj.(*cachedRevision)
			// Orphaned (--cascade=orphan) or adopted again: its standing as an owner changed.
			if ok1 && ok2 && controllerUID(o.OwnerReferences) != controllerUID(n.OwnerReferences) {
				c.enqueueRefs(n.Namespace, n.refs(), false)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if r, ok := obj.(*cachedRevision); ok {
				c.enqueueRefs(r.Namespace, r.refs(), false)
				if r.Anchor != nil {
					c.enqueueWorkload(r.Namespace, r.Anchor.Kind, r.Anchor.Name, 0)
				}
			}
		},
	}
}

// enqueue queues k (leader only: a standby's queue stays empty; taking over enqueues
// everything). react records the event time for the reaction-time histogram.
func (c *Controller) enqueue(k Key, react bool) {
	if !c.leading.Load() {
		return
	}
	if react {
		c.mu.Lock()
		if _, ok := c.seen[k]; !ok {
			c.seen[k] = time.Now()
		}
		c.mu.Unlock()
	}
	c.queue.Add(k)
}

// enqueueRefs queues the opted-in objects among refs.
func (c *Controller) enqueueRefs(ns string, refs []plugin.Object, react bool) {
	for _, o := range refs {
		k := Key{ns, o.Kind, o.Name}
		if c.optedIn(c.object(k)) {
			c.enqueue(k, react)
		}
	}
}

// kindWorkload is the Key kind of an anchor sync: Name is "Kind/name" of the workload.
const kindWorkload plugin.Kind = "workload"

// enqueueWorkload queues the anchor sync of a workload (after a delay when after > 0).
func (c *Controller) enqueueWorkload(ns, kind, name string, after time.Duration) {
	if !c.leading.Load() {
		return
	}
	k := Key{ns, kindWorkload, kind + "/" + name}
	if after > 0 {
		c.queue.AddAfter(k, after)
		return
	}
	c.queue.Add(k)
}

// enqueueAll queues every opted-in object a watched ReplicaSet references (the full reconcile:
// at start it adopts existing history, which is also the migration path). Scopes whose caches
// have not synced are skipped: superviseScopes queues them when they sync.
func (c *Controller) enqueueAll() int {
	n := 0
	for _, sc := range c.scopes {
		if scopeSynced(sc) {
			n += c.enqueueScope(sc)
		}
	}
	return n
}

// enqueueScope queues the opted-in objects the ReplicaSets of one scope reference.
func (c *Controller) enqueueScope(sc *scope) int {
	n := 0
	seen := map[Key]bool{}
	indexed := []cache.SharedIndexInformer{sc.rs}
	indexed = append(indexed, sc.templates...)
	if sc.revisions != nil {
		indexed = append(indexed, sc.revisions)
	}
	for _, w := range sc.templatedWorkloads() {
		indexed = append(indexed, w.inf)
	}
	for _, inf := range indexed {
		for _, v := range inf.GetIndexer().ListIndexFuncValues(byRef) {
			if k, ok := parseKey(v); ok && !seen[k] && c.optedIn(c.object(k)) {
				seen[k] = true
				c.queue.Add(k)
				n++
			}
		}
	}
	return n + c.enqueueAnchors(sc)
}

// 2. Queue → workers.

// Run starts the informers, waits for their caches, then leads (or stands by until it wins
// the lease) until ctx is done. Losing the lease returns an error: the process must exit,
// so that a replica that may have been partitioned never writes on stale caches.
//
// A scope (namespace) whose caches do not sync — its list forbidden, say — does not stop
// the others: once at least one scope synced and the rest are forbidden or syncTimeout has
// passed, the synced scopes are served and the rest are waited for in the background; one
// that syncs later is served from then on (its objects queued). An object of a scope that has
// not synced is never reconciled.
func (c *Controller) Run(ctx context.Context) error {
	errs, err := c.watchListErrors()
	if err != nil {
		return err
	}
	for _, start := range c.starters {
		start(ctx.Done())
	}
	t0 := time.Now()
	st := &serving{served: map[*scope]bool{}}
	c.superviseScopes(ctx, st, t0)
	if !c.awaitServable(ctx, errs, t0) {
		return nil // ctx ended
	}
	c.startServing(st)
	if c.cfg.FreeMemoryAfterSync {
		// The initial sync is the allocation peak (every object decoded, then compacted); hand
		// that memory back now rather than over minutes of background scavenging.
		debug.FreeOSMemory()
	}
	served := len(c.scopes) - len(c.Unsynced())
	c.log.WithFields(logrus.Fields{"duration": time.Since(t0).Round(time.Millisecond).String(), "namespaces": served, "unsynced": len(c.scopes) - served}).Info("caches synced")
	if c.cfg.LeaderElection == nil {
		c.lead(ctx)
		return nil
	}
	return c.leadWhenElected(ctx)
}

// lead runs the workers while ctx lasts: a full reconcile now and every Resync, gauges
// every GaugeInterval.
func (c *Controller) lead(ctx context.Context) {
	c.log.Info("leading: reconciling every opted-in object")
	if c.bcast != nil {
		// Events are written by the leader only.
		c.bcast.StartRecordingToSink(safeSink{sink: &typedcorev1.EventSinkImpl{Interface: c.cfg.Kube.CoreV1().Events("")}, log: c.log})
		defer c.bcast.Shutdown()
	}
	c.leading.Store(true)
	c.m.Leader.Set(1)
	defer func() {
		c.leading.Store(false)
		c.m.Leader.Set(0)
	}()
	n := c.enqueueAll()
	c.log.WithField("objects", n).Info("full reconcile queued")
	if c.cfg.FreeMemoryAfterSync {
		go c.freeMemoryWhenDrained(ctx)
	}
	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runWorker(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.Until(c.UpdateGauges, c.cfg.GaugeInterval, ctx.Done())
	}()
	if c.cfg.Resync > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.resyncEvery(ctx, c.cfg.Resync)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// resyncEvery queues the full reconcile every interval until ctx is done.
func (c *Controller) resyncEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.log.WithField("objects", c.enqueueAll()).Debug("resync: full reconcile queued")
		}
	}
}

// freeMemoryWhenDrained returns the first full reconcile's memory to the OS once the queue
// drains: after the initial sync, it is the other allocation peak.
func (c *Controller) freeMemoryWhenDrained(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, false, func(context.Context) (bool, error) {
		return c.queue.Len() == 0, nil
	})
	if ctx.Err() == nil {
		debug.FreeOSMemory()
	}
}

// runWorker reconciles keys until the queue shuts down.
func (c *Controller) runWorker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

// processNext takes one key from the queue and reconciles it: done, it is forgotten; failed,
// it is counted by reason and retried with the queue's backoff, unless retrying cannot help
// (permanent: the next event or resync tries again). A key of a scope not served yet is
// dropped: the scope's objects are all queued when it syncs.
func (c *Controller) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	if !c.scopeServed(k.Namespace) {
		// Queued by an event of a scope still syncing: its view of the ReplicaSets that use the
		// object is incomplete. The scope's objects are all queued when it syncs.
		c.log.WithField("key", k.String()).Debug("scope not synced: not reconciled")
		c.queue.Forget(k)
		return true
	}
	result, err := c.safeReconcile(ctx, k)
	c.m.Reconciles.WithLabelValues(result).Inc()
	if err == nil {
		c.queue.Forget(k)
		return true
	}
	r := reason(err)
	if errors.As(err, new(panicError)) {
		r = FailurePanic
	}
	c.m.ReconcileErrors.WithLabelValues(r).Inc()
	log := c.log.WithError(err).WithFields(logrus.Fields{"reason": r, "key": k.String()})
	if permanent(err) {
		// Retrying cannot help; the next event or resync tries again.
		log.Error("reconcile failed permanently")
		c.queue.Forget(k)
		c.reacted(k, false)
		return true
	}
	if ctx.Err() == nil {
		log.Warn("reconcile failed; retrying")
		c.queue.AddRateLimited(k)
	}
	return true
}

// QueueLen is the work queue's length (tests).
func (c *Controller) QueueLen() int { return c.queue.Len() }

// 3. Worker → core.

// panicError is a recovered panic of one reconcile.
type panicError struct{ value any }

func (e panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// safeReconcile is Reconcile with a panic turned into a panicError, logged with the key and
// the stack: the worker counts it (reason "panic") and retries the key with backoff.
func (c *Controller) safeReconcile(ctx context.Context, k Key) (result string, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.WithFields(logrus.Fields{"key": k.String(), "panic": fmt.Sprint(r), "stack": string(debug.Stack())}).Error("reconcile panicked")
			result, err = "error", panicError{r}
		}
	}()
	return c.Reconcile(ctx, k)
}

// reconcileTimeout bounds one reconcile (one patch, retried by the core on transient
// errors); each request has its own deadline inside it (plugin.DefaultRequestTimeout).
const reconcileTimeout = 30 * time.Second

// Reconcile brings one object's owner references in line through the core's one write entry
// point (plugin.Attacher.Reconcile), as every mode does: the object is the candidate, the
// caches are the namespace's users, the opt-in selector is the policy. Every live ReplicaSet
// that uses it and whose controller is live gets added in one patch; a user that cannot own it
// blocks it (a Warning Event, blocked_total); nothing missing, no request. The result says what
// happened ("noop", "patched", "dry_run", "blocked").
func (c *Controller) Reconcile(ctx context.Context, k Key) (string, error) {
	if k.Kind == kindWorkload {
		// Not an object: the anchors of a workload, or an object's crowd (anchors.go, crowd.go).
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
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	res, err := c.attacher.Reconcile(rctx, req)
	return c.outcome(k, m, res, err)
}
