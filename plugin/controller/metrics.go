package controller

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
)

// The controller's Prometheus metrics (its own registry), the client-go work queue's metrics
// provider, and the counter of the API requests the process sends.

// MetricPrefix starts the name of every metric of the controller (the Helm chart's dashboard
// and alerts are written against these names; docs/controller.md lists them).
const MetricPrefix = "configmap_attacher_controller_"

// Metrics are the controller's Prometheus metrics, registered in their own registry so that
// several controllers in one process (tests) do not collide.
type Metrics struct {
	Registry *prometheus.Registry

	// OwnerReferencesAdded counts owner references written, by object kind (ConfigMap, Secret).
	OwnerReferencesAdded *prometheus.CounterVec
	// OwnerReferencesWouldAdd counts the references -dry-run would have written.
	OwnerReferencesWouldAdd *prometheus.CounterVec
	// Blocked counts reconciles that left an object alone because a user that cannot own it
	// (a StatefulSet, DaemonSet, Job, CronJob, bare Pod, or a ReplicaSet of an unchecked
	// controller) also uses it.
	Blocked *prometheus.CounterVec
	// Anchors counts the anchors (plugin/anchor.go) created and deleted, by action.
	Anchors *prometheus.CounterVec
	// Reconciles counts reconciles of one object by result: noop, patched, dry_run, error.
	Reconciles *prometheus.CounterVec
	// ReconcileErrors counts failed reconciles by reason (forbidden, invalid, conflict,
	// timeout, throttled, server, transport, other, panic).
	ReconcileErrors *prometheus.CounterVec
	// Reaction is the time from the informer's add event (ReplicaSet or object) to the owner
	// references being in place (the patch answered).
	Reaction prometheus.Histogram
	// Leader is 1 while this process holds the lease (or runs without leader election).
	Leader prometheus.Gauge
	// Unowned counts, per namespace, opted-in objects that a live ReplicaSet of a watched
	// workload references but no ReplicaSet owns.
	Unowned *prometheus.GaugeVec
	// Lost counts, per namespace, references (ReplicaSet, object) from a ReplicaSet in
	// history to a required object that does not exist: a rollback to it would fail.
	Lost *prometheus.GaugeVec
	// Requests counts API requests sent by this process, by verb and resource.
	Requests *prometheus.CounterVec
	// Ready is 1 once the controller serves (every scope's caches synced, or at least one
	// and the others given up on for now).
	Ready prometheus.Gauge
	// ScopeSynced is, per watched namespace ("" when watching all), 1 once its caches synced
	// (it is served), 0 before: a namespace whose list is forbidden stays 0.
	ScopeSynced *prometheus.GaugeVec

	queue workqueueMetrics
}

type workqueueMetrics struct {
	depth                   *prometheus.GaugeVec
	adds                    *prometheus.CounterVec
	latency                 *prometheus.HistogramVec
	workDuration            *prometheus.HistogramVec
	unfinished              *prometheus.GaugeVec
	longestRunningProcessor *prometheus.GaugeVec
	retries                 *prometheus.CounterVec
}

// NewMetrics creates and registers every metric, with the Go and process collectors.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r}
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m.OwnerReferencesAdded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "owner_references_added_total",
		Help: "Owner references added to opted-in ConfigMaps and Secrets, by kind of object."}, []string{"kind"})
	m.OwnerReferencesWouldAdd = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "owner_references_would_add_total",
		Help: "Owner references -dry-run would have added, by kind of object."}, []string{"kind"})
	m.Blocked = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "adoptions_blocked_total",
		Help: "Reconciles that left an opted-in object alone because a user that cannot own it (StatefulSet, DaemonSet, Job, CronJob, bare Pod) also uses it, by kind of object."}, []string{"kind"})
	m.Anchors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "anchors_total",
		Help: "Anchors (ControllerRevisions configmap-attacher owns: one per workload's current template, and an object's crowd anchor standing for its many Jobs and Pods) created and deleted, by action (created, deleted)."}, []string{"action"})
	m.Reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "reconciles_total",
		Help: "Reconciles of one object, by result (noop, patched, dry_run, blocked, error)."}, []string{"result"})
	m.ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "reconcile_errors_total",
		Help: "Failed reconciles, by reason (forbidden, invalid, conflict, timeout, throttled, server, transport, other, panic)."}, []string{"reason"})
	m.Reaction = prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricPrefix + "reaction_seconds",
		Help:    "Time from the informer's add event of a ReplicaSet or object to its owner references being in place.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}})
	m.Leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricPrefix + "leader",
		Help: "1 while this process is the leader (the only one that writes), else 0."})
	m.Ready = prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricPrefix + "ready",
		Help: "1 once the controller serves: every watched namespace's caches synced, or at least one and the others given up on for now."})
	m.ScopeSynced = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "scope_synced",
		Help: "1 once the caches of the watched namespace (\"\" when watching all) synced and it is served; 0 while not (e.g. its list is forbidden)."}, []string{"namespace"})
	m.Unowned = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "unowned_objects",
		Help: "Opted-in objects a live ReplicaSet of a watched workload references but no ReplicaSet owns (leader only)."}, []string{"namespace"})
	m.Lost = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "lost_references",
		Help: "References from a ReplicaSet in history to a required ConfigMap or Secret that does not exist (leader only)."}, []string{"namespace"})
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "api_requests_total",
		Help: "Kubernetes API requests sent by this process, by verb and resource."}, []string{"verb", "resource"})
	q := &m.queue
	q.depth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "workqueue_depth", Help: "Current depth of the work queue."}, []string{"name"})
	q.adds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "workqueue_adds_total", Help: "Adds handled by the work queue."}, []string{"name"})
	q.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPrefix + "workqueue_queue_duration_seconds",
		Help: "How long an item stays in the work queue before being processed.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11)}, []string{"name"})
	q.workDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPrefix + "workqueue_work_duration_seconds",
		Help: "How long processing an item takes.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11)}, []string{"name"})
	q.unfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "workqueue_unfinished_work_seconds",
		Help: "Seconds of work in progress not yet observed by work_duration (large values: stuck workers)."}, []string{"name"})
	q.longestRunningProcessor = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPrefix + "workqueue_longest_running_processor_seconds",
		Help: "How long the longest running processor has been running."}, []string{"name"})
	q.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "workqueue_retries_total", Help: "Retries handled by the work queue."}, []string{"name"})
	for _, c := range []prometheus.Collector{m.OwnerReferencesAdded, m.OwnerReferencesWouldAdd, m.Blocked, m.Anchors, m.Reconciles, m.ReconcileErrors, m.Reaction,
		m.Leader, m.Ready, m.ScopeSynced, m.Unowned, m.Lost, m.Requests, q.depth, q.adds, q.latency, q.workDuration, q.unfinished, q.longestRunningProcessor, q.retries,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

// workqueue.MetricsProvider backed by this registry: client-go's queue reports into it
// through the per-queue config, so no global provider (set-once) is involved.
func (m *Metrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.queue.depth.WithLabelValues(name)
}
func (m *Metrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.queue.adds.WithLabelValues(name)
}
func (m *Metrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.queue.latency.WithLabelValues(name)
}
func (m *Metrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.queue.workDuration.WithLabelValues(name)
}
func (m *Metrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.queue.unfinished.WithLabelValues(name)
}
func (m *Metrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.queue.longestRunningProcessor.WithLabelValues(name)
}
func (m *Metrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.queue.retries.WithLabelValues(name)
}

// CountRequests makes every request sent through cfg count in Requests: the test of "a
// standby sends no PATCH" and the idle request budget read it from /metrics.
func (m *Metrics) CountRequests(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			verb, res := verbAndResource(req)
			m.Requests.WithLabelValues(verb, res).Inc()
			return rt.RoundTrip(req)
		})
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// verbAndResource derives the Kubernetes verb and resource of a request from its method and path
// (/api/v1/namespaces/ns/configmaps/name → patch, configmaps). Paths outside the resource
// API (discovery, /version) keep their method and the resource "other".
func verbAndResource(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	watch := req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1"
	if len(rest) > 0 && rest[0] == "watch" {
		watch, rest = true, rest[1:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return strings.ToLower(req.Method), "other"
	}
	resource, named := rest[0], len(rest) > 1
	switch req.Method {
	case http.MethodGet:
		switch {
		case watch:
			return "watch", resource
		case named:
			return "get", resource
		}
		return "list", resource
	case http.MethodPost:
		return "create", resource
	case http.MethodPut:
		return "update", resource
	case http.MethodPatch:
		return "patch", resource
	case http.MethodDelete:
		return "delete", resource
	}
	return strings.ToLower(req.Method), resource
}
