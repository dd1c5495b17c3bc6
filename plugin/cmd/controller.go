package cmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
	"github.com/configmap-attacher/configmap-attacher/plugin/doctor"
)

// controllerUsage is the synopsis printed with -help and on bad flags.
const controllerUsage = `Usage: configmap-attacher controller [--kubeconfig PATH] [-n a,b] [-selector configmap-attacher/revisioned=true]
    [-workloads rollouts,deployments] [-leader-elect=true] [-leader-election-namespace NS] [-leader-election-id configmap-attacher]
    [-leader-election-lease-duration 15s] [-leader-election-renew-deadline 10s] [-leader-election-retry-period 2s]
    [-metrics-addr :8080] [-health-addr :8081] [-qps 50] [-burst 100] [-workers 4] [-resync 10m] [-anchor-grace 5m] [-dry-run]
    [-log-level info] [-log-format text|json]

Watches ReplicaSets controlled by Argo Rollouts Rollouts and Deployments and makes every opted-in
ConfigMap and Secret their pod templates use a dependent of each live ReplicaSet that uses it
(one add-only patch per object), so the garbage collector keeps it exactly as long as a
ReplicaSet in history needs it. Removing the label later removes no owner reference.

Flags:
`

// serviceAccountNamespaceFile is where a pod finds its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// controllerOptions are one run of the controller: the command, its flags, and what validate
// derives from them.
type controllerOptions struct {
	*Controller
	client                                    plugin.ClientOptions
	namespaces                                string
	selector                                  *cli.SelectorFlag
	workloads                                 *workloadsFlag
	leaderElect                               bool
	leNamespace, leID                         string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	metricsAddr, healthAddr                   string
	qps                                       float64
	workers                                   int
	resync, anchorGrace                       time.Duration
	dryRun                                    bool
	logLevel, logFormat                       string

	// derived
	nsList []string
	log    *logrus.Logger
}

// adopting are the kinds named by -workloads other than Rollouts and Deployments.
func (o *controllerOptions) adopting() map[string]bool {
	out := map[string]bool{}
	for _, k := range o.workloads.kinds {
		if k != plugin.KindRollout && k != plugin.KindDeployment {
			out[k] = true
		}
	}
	return out
}

// Controller is `configmap-attacher controller`: the watcher of plugin/controller, with its
// leader election, metrics and health endpoints.
type Controller struct {
	Stdout, Stderr io.Writer
	// Getenv reads POD_NAMESPACE (default os.Getenv).
	Getenv func(string) string
	// Clients builds the clients (tests inject fakes).
	Clients Clients

	// readFile reads the service account's namespace file (nil: os.ReadFile; tests have none).
	readFile func(string) ([]byte, error)
}

// FlagSet returns a fresh flag set with every flag of the controller, writing to Stderr.
func (c *Controller) FlagSet() *flag.FlagSet { return (&controllerOptions{Controller: c}).flags() }

// Main runs `configmap-attacher controller` with the arguments after "controller" and returns
// the exit code: 0 after a clean shutdown (SIGINT or SIGTERM ends its context), 1 on a
// failure, 2 on bad usage. It tunes the process for a long-running controller first (the Go
// runtime's memory limit and GC, client-go's watch-list): Main is the process's controller,
// which a test's execute is not.
func (c *Controller) Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	controller.TuneProcess()
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(ctx, &controllerOptions{Controller: &cc}, args)
}

func (o *controllerOptions) spec() spec {
	// An old flag name is a log line (the controller's stderr is a log), after validate has
	// configured the logger.
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher controller", usage: controllerUsage, fs: o.flags(), extras: nsList,
		deprecated: func(n string) { o.log.Warn(n) }}
}

func (o *controllerOptions) flags() *flag.FlagSet {
	o.selector, o.workloads = cli.NewSelector(plugin.OptInLabel+"=true"), newWorkloads(allWorkloads)
	fs := flag.NewFlagSet("configmap-attacher controller", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	clientFlags(fs, &o.client)
	fs.StringVar(&o.namespaces, "namespace", "", "comma-separated namespaces to watch (default: all)")
	fs.Var(o.selector, "selector", "label selector of the opted-in ConfigMaps and Secrets (an empty or match-everything selector is refused)")
	fs.Var(o.workloads, "workloads", "the kinds whose use of an opted-in object adopts it: any of "+allWorkloads+" (default all; without the Rollout CRD, rollouts is dropped unless named); every user of an adopted object owns it, whatever its kind")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader on a Lease; only the leader writes")
	fs.StringVar(&o.leNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace; required with -leader-elect outside a cluster)")
	fs.StringVar(&o.leID, "leader-election-id", doctor.DefaultLeaseName, "name of the Lease (the chart passes its full name: configmap-attacher for a release of that name)")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long standbys wait before taking over a lease that is not renewed")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it gives up (and exits)")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "interval between lease acquire or renew attempts")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "address of the Prometheus /metrics endpoint")
	fs.StringVar(&o.healthAddr, "health-addr", ":8081", "address of /healthz and /readyz")
	fs.Float64Var(&o.qps, "qps", 50, "client-side rate limit of API requests per second")
	fs.IntVar(&o.client.Burst, "burst", 100, "client-side burst of API requests")
	fs.IntVar(&o.workers, "workers", controller.DefaultWorkers, "objects reconciled in parallel")
	fs.DurationVar(&o.resync, "resync", controller.DefaultResync, "interval of the full reconcile of every opted-in object (0: only at start)")
	fs.DurationVar(&o.anchorGrace, "anchor-grace", controller.DefaultAnchorGrace, "how long the anchor of a deleted workload keeps its config: the window for a delete and re-apply")
	fs.BoolVar(&o.dryRun, "dry-run", false, "log and count the owner references that would be added; write nothing")
	cli.LogFlags(fs, &o.logLevel, &o.logFormat)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), controllerUsage)
		fs.PrintDefaults()
	}
	return fs
}

// validate configures the logger, reads the namespaces and the Lease's namespace, and returns
// every problem at once.
func (o *controllerOptions) validate() []string {
	o.log = logrus.New()
	o.log.SetOutput(o.Stderr)
	problems := cli.LoggerProblems(o.log, o.logLevel, o.logFormat)
	var nsProblems []string
	o.nsList, nsProblems = parseNamespaces(o.namespaces, "omit it to watch all")
	problems = append(problems, nsProblems...)
	if o.leaderElect {
		if errs := validation.IsDNS1123Subdomain(o.leID); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("-leader-election-id %q is not a valid Lease name: %s", o.leID, strings.Join(errs, "; ")))
		}
		if o.leNamespace == "" {
			o.leNamespace = o.podNamespace()
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
		problems = append(problems, fmt.Sprintf("-qps %v: must be positive", o.qps))
	}
	problems = append(problems, atLeast("-burst", o.client.Burst, 1)...)
	problems = append(problems, atLeast("-workers", o.workers, 1)...)
	if o.anchorGrace <= 0 {
		problems = append(problems, fmt.Sprintf("-anchor-grace %v: must be positive (the anchors of deleted workloads are kept this long)", o.anchorGrace))
	}
	if o.resync < 0 {
		problems = append(problems, fmt.Sprintf("-resync %v: must not be negative", o.resync))
	}
	o.client.QPS = float32(o.qps)
	return append(problems, clientProblems(o.client)...)
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

// run runs the controller process until ctx ends.
func (o *controllerOptions) run(ctx context.Context) int {
	log := o.log
	cli.RouteKlog(log) // leader election and the informers log through klog
	pc := controller.ProcessConfig{Client: o.client, Namespaces: o.nsList, Selector: o.selector.Selector(),
		Rollouts: o.workloads.Has(plugin.KindRollout), Deployments: o.workloads.Has(plugin.KindDeployment), Adopting: o.adopting(), WorkloadsExplicit: o.workloads.set,
		MetricsAddr: o.metricsAddr, HealthAddr: o.healthAddr, Workers: o.workers, Resync: o.resync, AnchorGrace: o.anchorGrace, DryRun: o.dryRun, Log: log}
	o.Clients.controller(&pc)
	if o.leaderElect {
		pc.LeaderElection = &controller.LeaderElection{Namespace: o.leNamespace, ID: o.leID,
			LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod}
	}
	if err := controller.RunProcess(ctx, pc); err != nil {
		log.WithError(err).Error("controller stopped")
		if o.logFormat != "json" {
			// The one line a person reads last; a JSON pipeline has it as the error entry.
			fmt.Fprintf(o.Stderr, "configmap-attacher controller: %v\n", err)
		}
		return ExitFail
	}
	return ExitOK
}
