// Package controller is `configmap-attacher controller`: a watcher that makes every opted-in
// ConfigMap and Secret a dependent of each live ReplicaSet whose pod template uses it, for
// ReplicaSets controlled by an Argo Rollouts Rollout (any strategy, workloadRef included) or a
// Deployment. It covers the paths the step never sees (first deploy, promote --full, fast
// rollbacks, blueGreen, kubectl rollout undo) through the same core as the step: the
// project's reference walker and plugin.Attacher.Reconcile, the one write entry point (one
// add-only strategic merge patch, merged by UID, through the metadata client).
//
// Work is keyed by object (namespace/kind/name): one patch carries every live ReplicaSet that
// uses the object and lacks its reference. ReplicaSets are cached with an informer transform
// that keeps only what the walker needs; ConfigMaps and Secrets are watched as metadata only,
// with managedFields and annotations dropped (kubectl's last-applied-configuration annotation
// of a Secret holds its data).
package controller

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
)

// RBACHint is the example RBAC of the controller, named in forbidden errors.
const RBACHint = "examples/controller.yaml"

// byRef is the ReplicaSet cache's index: watched ReplicaSets by every object their template
// references (Key.String()). (The lost gauge walks the ReplicaSets instead of keeping a second
// index: an index costs a map per object, the largest part of the cache at 10k ReplicaSets.)
const byRef = "refs"

// byController is the ReplicaSet cache's index by controller (namespace/kind/name): a workload
// that appears requeues its ReplicaSets' objects (users.go onWorkload).
const byController = "controller"

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
	// Dynamic, when set, reads Rollouts whole (compacted at once to their template's
	// references), so a Rollout's current template has an anchor as a Deployment's does. Nil:
	// Rollouts are watched as metadata only, and their delete and re-apply is not covered.
	Dynamic dynamic.Interface
	// LeaderKube, when set, is the client for the Lease (a separate client, so lease renewals
	// never queue behind patches in the client-side rate limiter). Default Kube.
	LeaderKube kubernetes.Interface
	// Namespaces to watch; empty means all.
	Namespaces []string
	// Selector of opted-in objects; it must select something less than everything.
	Selector labels.Selector
	// Rollouts and Deployments choose the workload kinds whose ReplicaSets the controller acts
	// for. Every user of an object counts all the same: a ReplicaSet of any kind becomes an
	// owner too.
	Rollouts, Deployments bool
	// Adopting are the other user kinds whose use adopts an object: "StatefulSet",
	// "DaemonSet", "Job", "CronJob", "Pod" (a Pod no controller owns); nil: every one of them.
	// Adopted, every user of the object owns it, whatever its kind.
	Adopting map[string]bool
	// RolloutsServed and ExperimentsServed: argoproj.io serves Rollouts (Experiments), so
	// their existence is watched. Without it a ReplicaSet controlled by one is of unknown
	// liveness and blocks.
	RolloutsServed, ExperimentsServed bool
	Workers                           int
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
	// AnchorGrace is how long the anchor of a deleted workload is kept (default
	// DefaultAnchorGrace): the delete and re-apply window.
	AnchorGrace time.Duration
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

// scope is the caches of one namespace (or of all).
type scope struct {
	rs   cache.SharedIndexInformer
	objs map[plugin.Kind]cache.SharedIndexInformer
	// workloads are the Deployments, Rollouts and Experiments by kind (users.go), templates
	// the pod templates that cannot own.
	workloads map[string]cache.SharedIndexInformer
	templates []cache.SharedIndexInformer
	// revisions are the ControllerRevisions: StatefulSets' and DaemonSets' revisions (owners)
	// and the anchors (owners.go).
	revisions cache.SharedIndexInformer
}

// templatedWorkloads are the workload caches that keep their current template's references
// (indexed by them): Deployments always, Rollouts when they are read whole (Config.Dynamic).
func (sc *scope) templatedWorkloads() []kindInformer {
	var out []kindInformer
	for _, kind := range []string{plugin.KindDeployment, plugin.KindRollout} {
		if inf := sc.workloads[kind]; inf != nil {
			if _, ok := inf.GetIndexer().GetIndexers()[byRef]; ok {
				out = append(out, kindInformer{kind, inf})
			}
		}
	}
	return out
}

// templatedWorkload is the templated workload cache of kind (nil: none).
func (sc *scope) templatedWorkload(kind string) cache.SharedIndexInformer {
	for _, w := range sc.templatedWorkloads() {
		if w.kind == kind {
			return w.inf
		}
	}
	return nil
}

// adopts reports whether a user of this kind adopts the objects it uses (Config.Adopting).
func (c *Controller) adopts(kind string) bool {
	return c.cfg.Adopting == nil || c.cfg.Adopting[kind]
}

type kindInformer struct {
	kind string
	inf  cache.SharedIndexInformer
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
