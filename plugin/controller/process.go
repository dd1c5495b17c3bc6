package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	clientfeatures "k8s.io/client-go/features"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// The controller as one process: its clients, the check for the Rollout CRD, the metrics and
// health listeners, and Run. plugin/cmd turns the flags into a ProcessConfig and calls
// RunProcess; nothing else of the process lives there.

// ProcessConfig is one process's configuration, from the command's flags.
type ProcessConfig struct {
	Client     plugin.ClientOptions
	Namespaces []string
	Selector   labels.Selector
	// Rollouts and Deployments are the workload kinds whose ReplicaSets own config;
	// WorkloadsExplicit says the user named them (a missing Rollout CRD is then an error,
	// otherwise Deployments alone are watched).
	Rollouts, Deployments bool
	// Adopting: the other kinds whose use adopts an object (Config.Adopting).
	Adopting          map[string]bool
	WorkloadsExplicit bool
	// LeaderElection, when set, elects a leader (its Identity is filled in here).
	LeaderElection          *LeaderElection
	MetricsAddr, HealthAddr string
	Workers                 int
	Resync                  time.Duration
	AnchorGrace             time.Duration
	DryRun                  bool
	Log                     *logrus.Logger
	// Clients builds the API clients from the REST config (nil: DefaultClients; tests pass
	// fakes); Served asks whether the Argo Rollouts kinds are served (nil: DefaultServed).
	Clients func(cfg *rest.Config) (kube kubernetes.Interface, meta metadata.Interface, lease kubernetes.Interface, err error)
	Served  func(cfg *rest.Config) (Served, error)
}

// MemoryLimitEnv carries the container's memory limit in bytes (the downward API's
// resourceFieldRef limits.memory, as the chart and examples/controller.yaml set it).
const MemoryLimitEnv = "CONFIGMAP_ATTACHER_MEMORY_LIMIT"

// SoftLimitShare is the share of the container's memory limit that becomes Go's soft memory
// limit: the rest is headroom for what the Go runtime does not count (the binary's mapped
// pages, about 38 MiB here, thread stacks, fragmentation) before the kernel's OOM killer acts.
const SoftLimitShare = 0.8

// SoftMemoryLimit is Go's soft memory limit for a container limit given in MemoryLimitEnv:
// SoftLimitShare of it, and false when GOMEMLIMIT is set (the user's own choice wins) or the
// variable is unset or not a positive number of bytes.
func SoftMemoryLimit(getenv func(string) string) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(getenv(MemoryLimitEnv), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return int64(float64(n) * SoftLimitShare), true
}

// TuneProcess sets what a long-running controller process wants of the Go runtime and
// client-go, before any client is built.
func TuneProcess() {
	if limit, ok := SoftMemoryLimit(os.Getenv); ok {
		debug.SetMemoryLimit(limit)
	}
	// Informers stream their initial state (watch-list, served by kube-apiserver ≥ 1.32 and
	// falling back to a LIST elsewhere) instead of receiving one LIST response that holds every
	// ReplicaSet and Secret at once: that response, not the trimmed cache, was the peak memory.
	clientfeatures.ReplaceFeatureGates(watchListGates{clientfeatures.FeatureGates()})
	if os.Getenv("GOGC") == "" {
		// A cache that is mostly idle: trade a little GC work for a heap of 1.5× the live data
		// instead of 2× (GOGC overrides; the soft memory limit above bounds it further).
		debug.SetGCPercent(50)
	}
}

// watchListGates turns on client-go's WatchListClient and leaves every other gate as it is.
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}

// readyz serves /readyz: 200 once the controller serves (at least one watched namespace's
// caches synced), else 503; the body names the namespaces whose caches have not synced and
// their resources (ready or not: a namespace left out is reported without failing the probe,
// which would take the pod out of the metrics Service as well).
func readyz(ctl interface{ Readiness() (bool, string) }) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		ready, detail := ctl.Readiness()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, detail)
	}
}

// DefaultClients builds the controller's clients.
func DefaultClients(cfg *rest.Config) (kubernetes.Interface, metadata.Interface, kubernetes.Interface, error) {
	// Protobuf for the typed client (ReplicaSets, Events, the Lease): smaller and cheaper to
	// decode than JSON. The metadata client negotiates its own (PartialObjectMetadata).
	kcfg := rest.CopyConfig(cfg)
	kcfg.ContentType = "application/vnd.kubernetes.protobuf"
	kcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating Kubernetes metadata client: %w", err)
	}
	// The Lease client has its own rate limiter (renewals never wait behind a cold start's
	// patches) and a deadline per request (it runs no watches).
	lcfg := rest.CopyConfig(kcfg)
	lcfg.QPS, lcfg.Burst, lcfg.Timeout = 5, 10, 10*time.Second
	lease, err := kubernetes.NewForConfig(lcfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the leader-election client: %w", err)
	}
	return kube, meta, lease, nil
}

// DefaultServed asks discovery whether the Argo Rollouts kinds are served. An apiserver that
// cannot be reached (a restart, an outage) is waited for, up to discoveryPatience: exiting at
// once would turn every outage into a crash loop whose backoff keeps the controller down
// longer than the outage.
func DefaultServed(cfg *rest.Config) (Served, error) {
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = 15 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return Served{}, fmt.Errorf("creating discovery client: %w", err)
	}
	var served Served
	err = retry.OnError(discoveryBackoff, transientDiscovery, func() error {
		var err error
		served, err = ArgoServed(dc)
		if err != nil && transientDiscovery(err) {
			logrus.WithError(err).Warn("discovery failed; retrying")
		}
		return err
	})
	return served, err
}

// discoveryBackoff waits for an unreachable apiserver for about two minutes (1+2+4+8 s, then
// 15 s apart).
var discoveryBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 15 * time.Second, Steps: 11}

// transientDiscovery: no answer (connection refused, a timeout) or a server error.
func transientDiscovery(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return status.Status().Code >= 500 || apierrors.IsTooManyRequests(err) || apierrors.IsTimeout(err)
}

// RunProcess runs the controller process until ctx ends: 0 after a clean shutdown.
func RunProcess(ctx context.Context, o ProcessConfig) error {
	log := o.Log
	if log == nil {
		log = logrus.StandardLogger()
	}
	m := NewMetrics()
	cfg, err := plugin.RESTConfig(o.Client)
	if err != nil {
		return err
	}
	cfg.UserAgent = "configmap-attacher-controller/" + plugin.Version
	m.CountRequests(cfg)
	newClients, installed := o.Clients, o.Served
	if newClients == nil {
		newClients = DefaultClients
	}
	if installed == nil {
		installed = DefaultServed
	}
	kube, meta, lease, err := newClients(cfg)
	if err != nil {
		return err
	}
	// Rollouts are read whole (JSON: a CRD has no protobuf) for their templates' anchors; a
	// caller that brings its own clients (the tests' fakes) watches them as metadata only.
	var dyn dynamic.Interface
	if o.Clients == nil {
		if dyn, err = dynamic.NewForConfig(cfg); err != nil {
			return fmt.Errorf("creating Kubernetes dynamic client: %w", err)
		}
	}
	// Served or not matters with -workloads deployments too: a Rollout's ReplicaSets are users
	// of shared config whose controllers' existence must be watched.
	served, err := installed(cfg)
	if err != nil {
		return err
	}
	if o.Rollouts {
		ok := served.Rollouts
		switch {
		case !ok && o.WorkloadsExplicit:
			return errors.New("-workloads names rollouts but the Rollout CRD (rollouts.argoproj.io) is not installed: install Argo Rollouts, or pass -workloads deployments")
		case !ok && !o.Deployments:
			return errors.New("the Rollout CRD (rollouts.argoproj.io) is not installed")
		case !ok:
			log.Warn("the Rollout CRD (rollouts.argoproj.io) is not installed: watching Deployments only, not Rollouts (restart after installing Argo Rollouts)")
			o.Rollouts = false
		}
	}
	entry := log.WithField("component", "controller")
	ccfg := Config{Kube: kube, Meta: meta, Dynamic: dyn, LeaderKube: lease, Namespaces: o.Namespaces, Selector: o.Selector,
		Rollouts: o.Rollouts, Deployments: o.Deployments, Adopting: o.Adopting, RolloutsServed: served.Rollouts, ExperimentsServed: served.Experiments, Workers: o.Workers, Resync: o.Resync, AnchorGrace: o.AnchorGrace, DryRun: o.DryRun,
		Log: entry, Metrics: m, FreeMemoryAfterSync: true}
	if o.LeaderElection != nil {
		le := *o.LeaderElection
		host, _ := os.Hostname()
		le.Identity = host + "_" + uuid.NewString()
		ccfg.LeaderElection = &le
	}
	ctl, err := New(ccfg)
	if err != nil {
		return err
	}
	metricsLn, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return fmt.Errorf("-metrics-addr: %w", err)
	}
	healthLn, err := net.Listen("tcp", o.HealthAddr)
	if err != nil {
		_ = metricsLn.Close() // the health listener failed: that error is the one to report
		return fmt.Errorf("-health-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	hmux := http.NewServeMux()
	hmux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ctl.Healthz(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	hmux.HandleFunc("/readyz", readyz(ctl))
	servers := []*http.Server{
		{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		{Handler: hmux, ReadHeaderTimeout: 10 * time.Second},
	}
	for i, ln := range []net.Listener{metricsLn, healthLn} {
		go func() { _ = servers[i].Serve(ln) }()
	}
	defer func() {
		for _, s := range servers {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.Shutdown(sctx)
			cancel()
		}
	}()
	workloads := []string{}
	if o.Rollouts {
		workloads = append(workloads, "Rollouts")
	}
	if o.Deployments {
		workloads = append(workloads, "Deployments")
	}
	for _, k := range []string{"StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"} {
		if o.Adopting == nil || o.Adopting[k] {
			workloads = append(workloads, k+"s")
		}
	}
	namespaces := "all"
	if len(o.Namespaces) > 0 {
		namespaces = strings.Join(o.Namespaces, ",")
	}
	entry.WithFields(logrus.Fields{"version": plugin.Version, "workloads": strings.Join(workloads, ","), "namespaces": namespaces,
		"selector": o.Selector.String(), "dryRun": o.DryRun, "leaderElect": o.LeaderElection != nil,
		"metrics": metricsLn.Addr().String(), "health": healthLn.Addr().String()}).Info("starting configmap-attacher controller")
	if err := ctl.Run(ctx); err != nil {
		return err
	}
	entry.Info("shut down")
	return nil
}
