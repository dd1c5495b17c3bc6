package cmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
)

// controllerUsage is the synopsis printed with -help and on bad flags.
const controllerUsage = `Usage: configmap-attacher controller [-kubeconfig PATH] [-namespaces a,b] [-selector configmap-attacher/revisioned=true]
    [-workloads rollouts,deployments] [-leader-elect=true] [-leader-election-namespace NS] [-leader-election-id configmap-attacher]
    [-leader-election-lease-duration 15s] [-leader-election-renew-deadline 10s] [-leader-election-retry-period 2s]
    [-metrics-addr :8080] [-health-addr :8081] [-qps 50] [-burst 100] [-workers 4] [-resync 10m] [-dry-run]
    [-log-level info] [-log-format text|json]

Watches ReplicaSets controlled by Argo Rollouts Rollouts and Deployments and makes every opted-in
ConfigMap and Secret their pod templates use a dependent of each live ReplicaSet that uses it
(one add-only patch per object), so the garbage collector keeps it exactly as long as a
ReplicaSet in history needs it. Removing the label later removes no owner reference.

Flags:
`

// Workload names of the controller's -workloads.
const (
	workloadRollouts    = "rollouts"
	workloadDeployments = "deployments"
)

// serviceAccountNamespaceFile is where a pod finds its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// controllerOptions are the controller's flags.
type controllerOptions struct {
	client                                    plugin.ClientOptions
	namespaces, selector, workloads           string
	leaderElect                               bool
	leNamespace, leID                         string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	metricsAddr, healthAddr                   string
	qps                                       float64
	workers                                   int
	resync                                    time.Duration
	dryRun                                    bool
	logLevel, logFormat                       string

	workloadsSet bool
	// derived
	nsList      []string
	sel         labels.Selector
	rollouts    bool
	deployments bool
}

// Controller is `configmap-attacher controller`: the watcher of plugin/controller, with its
// leader election, metrics and health endpoints.
type Controller struct {
	Stdout, Stderr io.Writer
	// Getenv reads POD_NAMESPACE (default os.Getenv).
	Getenv func(string) string

	// Tests inject these.
	readFile func(string) ([]byte, error)
	// clients builds the API clients from the REST config (tests pass fakes).
	clients func(cfg *rest.Config) (kubernetes.Interface, metadata.Interface, kubernetes.Interface, error)
	// rolloutsInstalled reports whether the Rollout CRD is served.
	rolloutsInstalled func(cfg *rest.Config) (controller.Served, error)
	// ctx ends the controller (Main: SIGINT or SIGTERM).
	ctx context.Context
}

// FlagSet returns a fresh flag set with every flag of the controller, writing to Stderr.
func (c *Controller) FlagSet() *flag.FlagSet { return c.flags(&controllerOptions{}) }

// Main runs `configmap-attacher controller` with the arguments after "controller" and returns
// the exit code: 0 after a clean shutdown (SIGTERM), 1 on a failure, 2 on bad usage.
func (c *Controller) Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Informers stream their initial state (watch-list, served by kube-apiserver ≥ 1.32 and
	// falling back to a LIST elsewhere) instead of receiving one LIST response that holds every
	// ReplicaSet and Secret at once: that response, not the trimmed cache, was the peak memory.
	clientfeatures.ReplaceFeatureGates(watchListGates{clientfeatures.FeatureGates()})
	if os.Getenv("GOGC") == "" {
		// A cache that is mostly idle: trade a little GC work for a heap of 1.5× the live data
		// instead of 2× (GOGC overrides; GOMEMLIMIT, set from the container's limit in
		// examples/controller.yaml, bounds it further).
		debug.SetGCPercent(50)
	}
	run := *c
	run.ctx = ctx
	return run.main(args)
}

// watchListGates turns on client-go's WatchListClient and leaves every other gate as it is.
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}

func (c *Controller) flags(o *controllerOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher controller", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	kubeconfigFlag(fs, &o.client.Kubeconfig)
	fs.StringVar(&o.namespaces, "namespaces", "", "comma-separated namespaces to watch (default: all)")
	fs.StringVar(&o.selector, "selector", plugin.OptInLabel+"=true", "label selector of the opted-in ConfigMaps and Secrets (an empty or match-everything selector is refused)")
	fs.StringVar(&o.workloads, "workloads", workloadRollouts+","+workloadDeployments, "workload kinds whose ReplicaSets own config: rollouts, deployments or both (defaulted: without the Rollout CRD, deployments only)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader on a Lease; only the leader writes")
	fs.StringVar(&o.leNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace; required with -leader-elect outside a cluster)")
	fs.StringVar(&o.leID, "leader-election-id", "configmap-attacher", "name of the Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long standbys wait before taking over a lease that is not renewed")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it gives up (and exits)")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "interval between lease acquire or renew attempts")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "address of the Prometheus /metrics endpoint")
	fs.StringVar(&o.healthAddr, "health-addr", ":8081", "address of /healthz and /readyz")
	fs.Float64Var(&o.qps, "qps", 50, "client-side rate limit of API requests per second")
	fs.IntVar(&o.client.Burst, "burst", 100, "client-side burst of API requests")
	fs.IntVar(&o.workers, "workers", controller.DefaultWorkers, "objects reconciled in parallel")
	fs.DurationVar(&o.resync, "resync", controller.DefaultResync, "interval of the full reconcile of every opted-in object (0: only at start)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "log and count the owner references that would be added; write nothing")
	logFlags(fs, &o.logLevel, &o.logFormat)
	fs.Usage = func() {
		fmt.Fprint(c.Stderr, controllerUsage)
		fs.PrintDefaults()
	}
	return fs
}

// validate checks every flag and returns every problem at once.
func (c *Controller) validate(o *controllerOptions, fs *flag.FlagSet) []string {
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected argument %q: all input is given by flags", fs.Arg(0)))
	}
	seen := map[string]bool{}
	for _, ns := range splitList(o.namespaces) {
		switch {
		case len(validation.IsDNS1123Label(ns)) > 0:
			problems = append(problems, fmt.Sprintf("-namespaces: %q is not a valid namespace name", ns))
		case seen[ns]:
			problems = append(problems, fmt.Sprintf("-namespaces: %q is listed twice", ns))
		default:
			seen[ns] = true
			o.nsList = append(o.nsList, ns)
		}
	}
	if strings.TrimSpace(o.namespaces) != "" && len(o.nsList) == 0 && len(problems) == 0 {
		problems = append(problems, "-namespaces names no namespace (omit it to watch all)")
	}
	sel, err := labels.Parse(o.selector)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("-selector %q: %v", o.selector, err))
	case !plugin.Positive(sel):
		problems = append(problems, fmt.Sprintf("-selector %q %s (only opted-in objects may be touched)", o.selector, plugin.NotPositive))
	default:
		o.sel = sel
	}
	wl := splitList(o.workloads)
	if len(wl) == 0 {
		problems = append(problems, "-workloads names no workload kind: use rollouts, deployments or rollouts,deployments")
	}
	for _, w := range wl {
		switch w {
		case workloadRollouts:
			if o.rollouts {
				problems = append(problems, "-workloads: rollouts is listed twice")
			}
			o.rollouts = true
		case workloadDeployments:
			if o.deployments {
				problems = append(problems, "-workloads: deployments is listed twice")
			}
			o.deployments = true
		default:
			problems = append(problems, fmt.Sprintf("-workloads: unknown kind %q: use rollouts, deployments or both", w))
		}
	}
	if o.leaderElect {
		if errs := validation.IsDNS1123Subdomain(o.leID); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("-leader-election-id %q is not a valid Lease name: %s", o.leID, strings.Join(errs, "; ")))
		}
		if o.leNamespace == "" {
			o.leNamespace = c.podNamespace()
		}
		if o.leNamespace == "" {
			problems = append(problems, "-leader-elect outside a cluster needs -leader-election-namespace (the namespace of the Lease)")
		} else if len(validation.IsDNS1123Label(o.leNamespace)) > 0 {
			problems = append(problems, fmt.Sprintf("-leader-election-namespace %q is not a valid namespace name", o.leNamespace))
		}
		// client-go's own rules (leaderelection.NewLeaderElector), given as flag problems.
		switch {
		case o.leaseDuration <= o.renewDeadline:
			problems = append(problems, fmt.Sprintf("-leader-election-lease-duration (%v) must be greater than -leader-election-renew-deadline (%v)", o.leaseDuration, o.renewDeadline))
		case float64(o.renewDeadline) <= 1.2*float64(o.retryPeriod):
			problems = append(problems, fmt.Sprintf("-leader-election-renew-deadline (%v) must be greater than 1.2 × -leader-election-retry-period (%v)", o.renewDeadline, o.retryPeriod))
		}
		if o.retryPeriod <= 0 {
			problems = append(problems, "-leader-election-retry-period must be positive")
		}
	}
	for _, a := range []struct{ flag, addr string }{{"-metrics-addr", o.metricsAddr}, {"-health-addr", o.healthAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			problems = append(problems, fmt.Sprintf("%s %q: want host:port or :port (%v)", a.flag, a.addr, err))
		}
	}
	if o.metricsAddr == o.healthAddr && !strings.HasSuffix(o.metricsAddr, ":0") {
		problems = append(problems, fmt.Sprintf("-metrics-addr and -health-addr are both %q", o.metricsAddr))
	}
	if o.qps <= 0 {
		problems = append(problems, fmt.Sprintf("-qps %v must be positive", o.qps))
	}
	if o.client.Burst < 1 {
		problems = append(problems, fmt.Sprintf("-burst %d must be at least 1", o.client.Burst))
	}
	if o.workers < 1 {
		problems = append(problems, fmt.Sprintf("-workers %d must be at least 1", o.workers))
	}
	if o.resync < 0 {
		problems = append(problems, fmt.Sprintf("-resync %v must not be negative", o.resync))
	}
	o.client.QPS = float32(o.qps)
	return problems
}

func (c *Controller) podNamespace() string {
	getenv, readFile := c.Getenv, c.readFile
	if getenv == nil {
		getenv = os.Getenv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := readFile(serviceAccountNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

func (c *Controller) main(args []string) int {
	var o controllerOptions
	fs := c.flags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage // the flag package printed the problem and the usage
	}
	fs.Visit(func(f *flag.Flag) { o.workloadsSet = o.workloadsSet || f.Name == "workloads" })
	log := logrus.New()
	log.SetOutput(c.Stderr)
	var problems []string
	if err := ConfigureLogger(log, o.logLevel, o.logFormat); err != nil {
		problems = append(problems, err.Error())
	}
	problems = append(problems, c.validate(&o, fs)...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(c.Stderr, "configmap-attacher controller: %s\n", p)
		}
		fs.Usage()
		return ExitUsage
	}
	if err := c.run(&o, log); err != nil {
		log.WithError(err).Error("controller stopped")
		fmt.Fprintf(c.Stderr, "configmap-attacher controller: %v\n", err)
		return ExitFail
	}
	return ExitOK
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

func defaultControllerClients(cfg *rest.Config) (kubernetes.Interface, metadata.Interface, kubernetes.Interface, error) {
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

// defaultRolloutsInstalled asks discovery whether argoproj.io/v1alpha1 serves rollouts. An
// apiserver that cannot be reached (a restart, an outage) is waited for, up to
// discoveryPatience: exiting at once would turn every outage into a crash loop whose backoff
// keeps the controller down longer than the outage.
func defaultRolloutsInstalled(cfg *rest.Config) (controller.Served, error) {
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = 15 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return controller.Served{}, fmt.Errorf("creating discovery client: %w", err)
	}
	deadline := time.Now().Add(discoveryPatience)
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		ok, err := controller.ArgoServed(dc)
		if err == nil || !transientDiscovery(err) || time.Now().Add(wait).After(deadline) {
			return ok, err
		}
		logrus.WithError(err).Warnf("discovery failed; retrying in %s", wait)
		time.Sleep(wait)
	}
}

// discoveryPatience is how long the start waits for an unreachable apiserver.
const discoveryPatience = 2 * time.Minute

// transientDiscovery: no answer (connection refused, a timeout) or a server error.
func transientDiscovery(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return status.Status().Code >= 500 || apierrors.IsTooManyRequests(err) || apierrors.IsTimeout(err)
}

func (c *Controller) run(o *controllerOptions, log *logrus.Logger) error {
	m := controller.NewMetrics()
	cfg, err := plugin.RESTConfig(o.client)
	if err != nil {
		return err
	}
	cfg.UserAgent = "configmap-attacher-controller/" + plugin.Version
	m.CountRequests(cfg)
	newClients, installed := c.clients, c.rolloutsInstalled
	if newClients == nil {
		newClients = defaultControllerClients
	}
	if installed == nil {
		installed = defaultRolloutsInstalled
	}
	kube, meta, lease, err := newClients(cfg)
	if err != nil {
		return err
	}
	// Served or not matters with -workloads deployments too: a Rollout's ReplicaSets are users
	// of shared config whose controllers' existence must be watched.
	served, err := installed(cfg)
	if err != nil {
		return err
	}
	if o.rollouts {
		ok := served.Rollouts
		switch {
		case !ok && o.workloadsSet:
			return errors.New("-workloads names rollouts but the Rollout CRD (rollouts.argoproj.io) is not installed: install Argo Rollouts, or pass -workloads deployments")
		case !ok && !o.deployments:
			return errors.New("the Rollout CRD (rollouts.argoproj.io) is not installed")
		case !ok:
			log.Warn("the Rollout CRD (rollouts.argoproj.io) is not installed: watching Deployments only (restart after installing Argo Rollouts)")
			o.rollouts = false
		}
	}
	entry := log.WithField("component", "controller")
	ccfg := controller.Config{Kube: kube, Meta: meta, LeaderKube: lease, Namespaces: o.nsList, Selector: o.sel,
		Rollouts: o.rollouts, Deployments: o.deployments, RolloutsServed: served.Rollouts, ExperimentsServed: served.Experiments, Workers: o.workers, Resync: o.resync, DryRun: o.dryRun,
		Log: entry, Metrics: m, FreeMemoryAfterSync: true}
	if o.leaderElect {
		host, _ := os.Hostname()
		ccfg.LeaderElection = &controller.LeaderElection{Namespace: o.leNamespace, ID: o.leID, Identity: host + "_" + uuid.NewString(),
			LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod}
	}
	ctl, err := controller.New(ccfg)
	if err != nil {
		return err
	}
	metricsLn, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("-metrics-addr: %w", err)
	}
	healthLn, err := net.Listen("tcp", o.healthAddr)
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
	if o.rollouts {
		workloads = append(workloads, "Rollouts")
	}
	if o.deployments {
		workloads = append(workloads, "Deployments")
	}
	namespaces := "all"
	if len(o.nsList) > 0 {
		namespaces = strings.Join(o.nsList, ",")
	}
	entry.WithFields(logrus.Fields{"version": plugin.Version, "workloads": strings.Join(workloads, ","), "namespaces": namespaces,
		"selector": o.sel.String(), "dryRun": o.dryRun, "leaderElect": o.leaderElect,
		"metrics": metricsLn.Addr().String(), "health": healthLn.Addr().String()}).Info("starting configmap-attacher controller")
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctl.Run(ctx); err != nil {
		return err
	}
	entry.Info("shut down")
	return nil
}
