// Package controller is `configmap-attacher controller`: a watcher that makes every opted-in
// ConfigMap and Secret a dependent of each live ReplicaSet whose pod template uses it, for
// ReplicaSets controlled by an Argo Rollouts Rollout (any strategy, workloadRef included) or a
// Deployment. It covers the paths the step never sees (first deploy, promote --full, fast
// rollbacks, blueGreen, kubectl rollout undo) through the same core as the step: the
// project's reference walker, plugin.MissingOwners and plugin.Attacher.Adopt (one
// add-only strategic merge patch, merged by UID, through the metadata client).
//
// Work is keyed by object (namespace/kind/name): one patch carries every live ReplicaSet that
// uses the object and lacks its reference. ReplicaSets are cached with an informer transform
// that keeps only what the walker needs; ConfigMaps and Secrets are watched as metadata only,
// with managedFields and annotations dropped (kubectl's last-applied-configuration annotation
// of a Secret holds its data).
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// RBACHint is the example RBAC of the controller, named in forbidden errors.
const RBACHint = "examples/controller.yaml"

// byRef is the ReplicaSet cache's index: watched ReplicaSets by every object their template
// references (Key.String()). (The lost gauge walks the ReplicaSets instead of keeping a second
// index: an index costs a map per object, the largest part of the cache at 10k ReplicaSets.)
const byRef = "refs"

// Defaults.
const (
	DefaultWorkers       = 4
	DefaultResync        = 10 * time.Minute
	DefaultGaugeInterval = 10 * time.Second
	// reconcileTimeout bounds one reconcile (one patch, retried by the core on transient
	// errors); each request has its own deadline inside it (plugin.DefaultRequestTimeout).
	reconcileTimeout = 30 * time.Second
	// pendingTTL is how long an owner reference we wrote counts as present before the cache
	// shows it (see Controller.pending).
	pendingTTL = 30 * time.Second
)

// Key is the unit of work: one ConfigMap or Secret.
type Key struct {
	Namespace string
	Kind      plugin.Kind
	Name      string
}

// String is namespace/kind/name, also the value of the ReplicaSet indexes.
func (k Key) String() string { return k.Namespace + "/" + string(k.Kind) + "/" + k.Name }

func (k Key) object() plugin.Object { return plugin.Object{Kind: k.Kind, Name: k.Name} }

func parseKey(s string) (Key, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Key{}, false
	}
	return Key{parts[0], plugin.Kind(parts[1]), parts[2]}, true
}

// LeaderElection configures the Lease the replicas compete for.
type LeaderElection struct {
	Namespace, ID, Identity                   string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Config configures a Controller.
type Config struct {
	// Kube reads ReplicaSets and writes Events; Meta watches and patches ConfigMaps and
	// Secrets as metadata only.
	Kube kubernetes.Interface
	Meta metadata.Interface
	// LeaderKube, when set, is the client for the Lease (a separate client, so lease renewals
	// never queue behind patches in the client-side rate limiter). Default Kube.
	LeaderKube kubernetes.Interface
	// Namespaces to watch; empty means all.
	Namespaces []string
	// Selector of opted-in objects; it must select something less than everything.
	Selector labels.Selector
	// Rollouts and Deployments choose the workload kinds whose ReplicaSets own config.
	Rollouts, Deployments bool
	Workers               int
	// Resync is the interval of the full reconcile (0: only at start).
	Resync time.Duration
	// GaugeInterval is how often the unowned and lost gauges are recomputed from the caches.
	GaugeInterval time.Duration
	DryRun        bool
	Log           logrus.FieldLogger
	Metrics       *Metrics
	// LeaderElection nil: this process leads from the start (a single replica).
	LeaderElection *LeaderElection
	// Events records Warning events on workloads (default: a broadcaster writing to Kube).
	Events record.EventRecorder
	// FreeMemoryAfterSync returns the initial sync's garbage to the OS (a process of its own).
	FreeMemoryAfterSync bool
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
	// gaugeNamespaces are the namespaces the gauges have a series for (set to 0 when clean).
	gaugeNamespaces map[string]bool
}

type pendingOwners struct {
	uids map[types.UID]bool
	at   time.Time
	// object is the UID of the object they were written on.
	object types.UID
}

// scope is the caches of one namespace (or of all).
type scope struct {
	rs   cache.SharedIndexInformer
	objs map[plugin.Kind]cache.SharedIndexInformer
}

// New builds the informers, indexes and queue; nothing talks to the apiserver before Run.
func New(cfg Config) (*Controller, error) {
	if cfg.Kube == nil || cfg.Meta == nil {
		return nil, errors.New("controller: Kube and Meta clients are required")
	}
	if !plugin.Positive(cfg.Selector) {
		return nil, errors.New("controller: an opt-in selector that selects less than everything is required")
	}
	if !cfg.Rollouts && !cfg.Deployments {
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
	c := &Controller{cfg: cfg, log: cfg.Log, m: cfg.Metrics, scopes: map[string]*scope{},
		pending: map[Key]pendingOwners{}, seen: map[Key]time.Time{}, gaugeNamespaces: map[string]bool{}}
	c.attacher = &plugin.Attacher{Client: cfg.Kube, Meta: cfg.Meta, Log: cfg.Log, RBACHint: RBACHint}
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

func (c *Controller) addScope(ns string) error {
	kf := informers.NewSharedInformerFactoryWithOptions(c.cfg.Kube, 0, informers.WithNamespace(ns))
	mf := metadatainformer.NewFilteredSharedInformerFactory(c.cfg.Meta, 0, ns, nil)
	sc := &scope{rs: kf.Apps().V1().ReplicaSets().Informer(), objs: map[plugin.Kind]cache.SharedIndexInformer{
		plugin.KindConfigMap: mf.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps")).Informer(),
		plugin.KindSecret:    mf.ForResource(corev1.SchemeGroupVersion.WithResource("secrets")).Informer(),
	}}
	if err := sc.rs.SetTransform(c.compactReplicaSet); err != nil {
		return fmt.Errorf("ReplicaSet informer transform: %w", err)
	}
	if err := sc.rs.AddIndexers(cache.Indexers{byRef: refIndex}); err != nil {
		return fmt.Errorf("ReplicaSet indexes: %w", err)
	}
	if _, err := sc.rs.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { c.onReplicaSet(obj, !initial) },
		UpdateFunc: c.onReplicaSetUpdate,
	}); err != nil {
		return fmt.Errorf("ReplicaSet event handler: %w", err)
	}
	for kind, inf := range sc.objs {
		if err := inf.SetTransform(c.compactMetadata); err != nil {
			return fmt.Errorf("%s informer transform: %w", kind, err)
		}
		if _, err := inf.AddEventHandler(c.objectHandler(kind)); err != nil {
			return fmt.Errorf("%s event handler: %w", kind, err)
		}
	}
	c.scopes[ns] = sc
	c.starters = append(c.starters, kf.Start, mf.Start)
	return nil
}

// compactReplicaSet is the ReplicaSet cache's transform: it keeps a cachedReplicaSet
// (identity, controller reference, timestamps, generation and the references its template
// makes, computed once here by the project's walker) instead of the ReplicaSet. A
// ReplicaSet's Go struct is ~2 KiB before any data, its pod template far more: at 10k
// ReplicaSets this is most of the memory the process would need.
func (c *Controller) compactReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil // already compact, or a DeletedFinalStateUnknown tombstone
	}
	out := &cachedReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: rs.Name, Namespace: rs.Namespace, UID: rs.UID, ResourceVersion: rs.ResourceVersion, Generation: rs.Generation,
		DeletionTimestamp: rs.DeletionTimestamp, CreationTimestamp: rs.CreationTimestamp,
	}}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	// ReplicaSets of other controllers are never indexed: their references are not kept (an
	// adoption is an update event, transformed again).
	if c.workloadOf(out.OwnerReferences) != nil {
		out.Refs = objectList(plugin.TemplateReferences(&rs.Spec.Template.Spec))
		out.Required = objectList(plugin.RequiredReferences(&rs.Spec.Template.Spec))
	}
	return out, nil
}

// compactMetadata is the ConfigMap and Secret caches' transform: a cachedObject with the
// name, namespace, resourceVersion (after a relist the informer tells an update from a resync
// by it), whether it is being deleted, and, for opted-in objects only, its owners' UIDs.
// Everything else goes: managedFields, labels, annotations (kubectl's
// last-applied-configuration annotation of a Secret carries its data). Unlabelled objects are
// cached for their existence alone (the lost gauge).
func (c *Controller) compactMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // already compact, or a DeletedFinalStateUnknown tombstone
	}
	out := &cachedObject{Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion,
		Deleting: m.DeletionTimestamp != nil, OptedIn: c.cfg.Selector.Matches(labels.Set(m.Labels))}
	if out.OptedIn {
		out.UID = m.UID
	}
	if out.OptedIn && len(m.OwnerReferences) > 0 {
		out.RSOwned = plugin.HasReplicaSetOwner(m.OwnerReferences)
		out.Owners = make([]types.UID, len(m.OwnerReferences))
		for i, o := range m.OwnerReferences {
			out.Owners[i] = o.UID
		}
	}
	return out, nil
}

// workloadOf returns the controller reference among owners when it is a watched workload kind.
func (c *Controller) workloadOf(owners []metav1.OwnerReference) *metav1.OwnerReference {
	var ref *metav1.OwnerReference
	for i := range owners {
		if owners[i].Controller != nil && *owners[i].Controller {
			ref = &owners[i]
		}
	}
	if ref == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil
	}
	switch {
	case ref.Kind == plugin.KindRollout && gv.Group == "argoproj.io" && c.cfg.Rollouts:
		return ref
	case ref.Kind == plugin.KindDeployment && gv.Group == "apps" && c.cfg.Deployments:
		return ref
	}
	return nil
}

func refIndex(obj any) ([]string, error) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok {
		return nil, nil
	}
	keys := make([]string, len(rs.Refs))
	for i, o := range rs.Refs {
		keys[i] = Key{rs.Namespace, o.Kind, o.Name}.String()
	}
	return keys, nil
}

func (c *Controller) scopeOf(ns string) *scope {
	if sc, ok := c.scopes[metav1.NamespaceAll]; ok {
		return sc
	}
	return c.scopes[ns]
}

// object returns the cached metadata of an object (nil when it does not exist).
func (c *Controller) object(k Key) *cachedObject {
	sc := c.scopeOf(k.Namespace)
	if sc == nil || sc.objs[k.Kind] == nil {
		return nil
	}
	item, ok, err := sc.objs[k.Kind].GetIndexer().GetByKey(k.Namespace + "/" + k.Name)
	if err != nil || !ok {
		return nil
	}
	m, _ := item.(*cachedObject)
	return m
}

func (c *Controller) optedIn(m *cachedObject) bool {
	return m != nil && !m.Deleting && m.OptedIn
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

// onReplicaSet queues the opted-in objects a live watched ReplicaSet's template references.
func (c *Controller) onReplicaSet(obj any, react bool) {
	rs, ok := obj.(*cachedReplicaSet)
	if !ok || rs.DeletionTimestamp != nil {
		return
	}
	for _, o := range rs.Refs { // empty unless a watched workload controls it
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

func (c *Controller) markPending(k Key, object types.UID, rss []*appsv1.ReplicaSet) {
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

// Ready reports whether the caches are synced (standbys included): /readyz.
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
func (c *Controller) Run(ctx context.Context) error {
	for _, start := range c.starters {
		start(ctx.Done())
	}
	var synced []cache.InformerSynced
	for _, sc := range c.scopes {
		synced = append(synced, sc.rs.HasSynced)
		for _, inf := range sc.objs {
			synced = append(synced, inf.HasSynced)
		}
	}
	t0 := time.Now()
	// Bounded: a namespace whose list is forbidden would otherwise keep every replica waiting
	// (no leader, no writes anywhere) with only /readyz to show it.
	syncCtx, cancelSync := context.WithTimeout(ctx, syncTimeout)
	ok := cache.WaitForCacheSync(syncCtx.Done(), synced...)
	cancelSync()
	if !ok {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("caches not synced after %s: %s; is list and watch on them allowed for this identity (examples/controller.yaml)?", syncTimeout, strings.Join(c.unsynced(), ", "))
	}
	c.synced.Store(true)
	c.m.Ready.Set(1)
	if c.cfg.FreeMemoryAfterSync {
		// The initial sync is the allocation peak (every object decoded, then compacted); hand
		// that memory back now rather than over minutes of background scavenging.
		debug.FreeOSMemory()
	}
	c.log.WithField("duration", time.Since(t0).Round(time.Millisecond).String()).Info("caches synced")
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
			Client:     c.cfg.LeaderKube.CoordinationV1(),
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
		c.bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Kube.CoreV1().Events("")})
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

// syncTimeout bounds the initial sync of the caches.
const syncTimeout = 5 * time.Minute

// unsynced names the caches that have not synced.
func (c *Controller) unsynced() []string {
	var out []string
	for ns, sc := range c.scopes {
		where := "in namespace " + ns
		if ns == "" {
			where = "in all namespaces"
		}
		if !sc.rs.HasSynced() {
			out = append(out, "replicasets "+where)
		}
		for kind, inf := range sc.objs {
			if !inf.HasSynced() {
				out = append(out, strings.ToLower(string(kind))+"s "+where)
			}
		}
	}
	sort.Strings(out)
	return out
}

// enqueueAll queues every opted-in object a watched ReplicaSet references (the full reconcile:
// at start it adopts existing history, which is also the migration path).
func (c *Controller) enqueueAll() int {
	n := 0
	for _, sc := range c.scopes {
		for _, v := range sc.rs.GetIndexer().ListIndexFuncValues(byRef) {
			if k, ok := parseKey(v); ok && c.optedIn(c.object(k)) {
				c.queue.Add(k)
				n++
			}
		}
	}
	return n
}

func (c *Controller) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	result, err := c.Reconcile(ctx, k)
	c.m.Reconciles.WithLabelValues(result).Inc()
	if err == nil {
		c.queue.Forget(k)
		return true
	}
	r := reason(err)
	c.m.ReconcileErrors.WithLabelValues(r).Inc()
	log := c.log.WithError(err).WithField("reason", r)
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
	unowned, lost := c.Audit()
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

// Audit counts, per namespace, the unowned objects (opted in, referenced by a live watched
// ReplicaSet, owned by no ReplicaSet) and the lost references (a live watched ReplicaSet
// requires an object that does not exist), with plugin.Gaps: the figures of audit's summary.
func (c *Controller) Audit() (unowned, lost map[string]int) {
	unowned, lost = map[string]int{}, map[string]int{}
	for _, sc := range c.scopes {
		byNS := map[string][]plugin.GapReplicaSet{}
		for _, it := range sc.rs.GetIndexer().List() {
			rs, ok := it.(*cachedReplicaSet)
			if !ok || len(rs.Refs) == 0 {
				continue // no watched workload controls it
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
