package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Running: cache sync, leader election, the workers, and the health and gauge views.

// syncTimeout is how long the start waits for every scope's caches before it serves the scopes
// that synced (a var for the tests).
var syncTimeout = 5 * time.Minute

// Ready reports whether the controller serves, standbys included (/readyz): every scope's
// caches synced, or at least one and the others given up on for now (see awaitServable).
func (c *Controller) Ready() bool { return c.synced.Load() }

// Leading reports whether this process is the one that writes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// Healthz checks that a leader still renews its lease (nil without leader election).
func (c *Controller) Healthz() error {
	if c.healthz == nil {
		return nil
	}
	return c.healthz.Check(nil)
}

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
	le := c.cfg.LeaderElection
	lost := make(chan struct{})
	// The elector has its own context: on shutdown the workers stop first (in-flight patches
	// finish), then the lease is released, so no write happens after the handover.
	electorCtx, cancelElector := context.WithCancel(context.Background())
	defer cancelElector()
	leadDone := make(chan struct{})
	lead := func(leCtx context.Context) {
		defer close(leadDone)
		wctx, cancel := context.WithCancel(leCtx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		c.lead(wctx)
	}
	go func() {
		<-ctx.Done()
		if c.leading.Load() {
			select {
			case <-leadDone:
			case <-time.After(10 * time.Second):
			}
		}
		cancelElector()
	}()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.ID},
			Client:     c.markedLeases(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true, // a clean shutdown hands over at once, not after a lease duration
		WatchDog:        c.healthz,
		Name:            le.ID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() { close(lost) },
			OnNewLeader: func(id string) {
				c.log.WithFields(logrus.Fields{"leader": id, "self": id == le.Identity}).Info("leader elected")
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	c.log.WithFields(logrus.Fields{"lease": le.Namespace + "/" + le.ID, "identity": le.Identity}).Info("caches synced; waiting for the lease (standby: no writes)")
	elector.Run(electorCtx)
	<-lost
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("lost the leader lease")
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
		// The first full reconcile is the other allocation peak: return it once it drains.
		go func() {
			_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, false, func(context.Context) (bool, error) {
				return c.queue.Len() == 0, nil
			})
			if ctx.Err() == nil {
				debug.FreeOSMemory()
			}
		}()
	}
	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
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
			t := time.NewTicker(c.cfg.Resync)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.log.WithField("objects", c.enqueueAll()).Debug("resync: full reconcile queued")
				}
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
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

// UpdateGauges recomputes the unowned and lost gauges from the caches (no request).
func (c *Controller) UpdateGauges() {
	unowned, lost := c.gaps()
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns := range unowned {
		c.gaugeNamespaces[ns] = true
	}
	for ns := range lost {
		c.gaugeNamespaces[ns] = true
	}
	for ns := range c.gaugeNamespaces {
		c.m.Unowned.WithLabelValues(ns).Set(float64(unowned[ns]))
		c.m.Lost.WithLabelValues(ns).Set(float64(lost[ns]))
	}
}

// gaps counts, per namespace, the unowned objects (opted in, referenced by a live watched
// ReplicaSet, owned by no ReplicaSet) and the lost references (a live watched ReplicaSet
// requires an object that does not exist), with plugin.Gaps: the figures of audit's summary.
// Scopes whose caches have not synced are not counted.
func (c *Controller) gaps() (unowned, lost map[string]int) {
	unowned, lost = map[string]int{}, map[string]int{}
	for _, sc := range c.scopes {
		if !scopeSynced(sc) {
			continue // incomplete caches: every object would look missing
		}
		byNS := map[string][]plugin.GapReplicaSet{}
		for _, it := range sc.rs.GetIndexer().List() {
			rs, ok := it.(*cachedReplicaSet)
			if !ok || len(rs.Refs) == 0 || c.workloadOf(rs.OwnerReferences) == nil || c.controllerState(sc, rs) != plugin.ControllerLive {
				// No watched workload controls it, or its workload is gone (audit counts the
				// ReplicaSets of workloads that exist): the garbage collector deletes it.
				continue
			}
			byNS[rs.Namespace] = append(byNS[rs.Namespace], plugin.GapReplicaSet{Live: rs.DeletionTimestamp == nil, Refs: rs.Refs, Required: rs.Required})
		}
		for ns, rss := range byNS {
			u, l := plugin.Gaps(rss, func(o plugin.Object) plugin.GapObject {
				m := c.object(Key{ns, o.Kind, o.Name})
				if m == nil {
					return plugin.GapObject{}
				}
				return plugin.GapObject{Exists: true, OptedIn: c.optedIn(m), ReplicaSetOwned: m.RSOwned}
			})
			if u > 0 {
				unowned[ns] = u
			}
			if l > 0 {
				lost[ns] = l
			}
		}
	}
	return unowned, lost
}

// QueueLen is the work queue's length (tests).
func (c *Controller) QueueLen() int { return c.queue.Len() }
