package cmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/job"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Job is the command-line (Job) mode: the original tool's interface on the same core
// (job.WaitAndAttach).
type Job struct {
	Stdout, Stderr io.Writer
	// Getenv reads VERSION and JOB_NAME, which are only logged (nil: both empty).
	Getenv func(string) string
	// Clients builds the clients (tests inject fakes).
	Clients Clients
	// PollInterval is the pause between checks while waiting (default 2s).
	PollInterval time.Duration
	// help prints --help (nil: the Job's usage and flags; the root's lists the commands too).
	help func(io.Writer)
	// suggest names the commands an argument may have meant (nil: none; the root sets it).
	suggest func(arg string) []string
}

// jobOptions are one run of the Job: the command, its flags, and the core's request and the
// logger validate derives from them.
type jobOptions struct {
	*Job
	rollout, namespace, configMaps, secrets string
	allowUnreferenced, version, dryRun      bool
	discover                                bool
	selector, optInSelector                 *cli.SelectorFlag
	leases                                  *cli.LeasesFlag
	requireOptIn                            bool
	expectAnnotation                        string
	timeout                                 time.Duration
	client                                  plugin.ClientOptions
	logLevel, logFormat                     string

	req job.Request
	log *logrus.Logger
}

// jobMaxTimeout bounds -timeout. Run as an Argo CD Sync hook, the Job holds the sync operation
// for as long as it waits, and what it waits for (the Rollouts controller observing the spec and
// creating a ReplicaSet) takes seconds: an hour without it means something is broken (the
// controller is down, a quota refuses the ReplicaSet), and failing says so. It also catches a
// typo such as -timeout 5h for 5m.
const jobMaxTimeout = time.Hour

const jobUsage = "Usage: configmap-attacher -rollout NAME -namespace NS [-configmaps a,b] [-secrets c,d] [flags]\n\n" +
	"Waits until the Argo Rollouts controller has created the ReplicaSet of the Rollout's current\n" +
	"pod template, then adds it as an owner of each listed ConfigMap and Secret.\n\nFlags:\n"

// FlagSet returns a fresh flag set with every flag of the Job, writing to Stderr.
func (c *Job) FlagSet() *flag.FlagSet { return (&jobOptions{Job: c}).flags() }

// Main runs the command line and returns the exit code: 0 attached (or -version, -help),
// 1 failed or timed out, 2 bad usage.
func (c *Job) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &jobOptions{Job: &cc}, args)
}

func (o *jobOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher", usage: jobUsage, fs: o.flags(), extras: nsShort, help: o.help, args: o.positional}
}

func (o *jobOptions) flags() *flag.FlagSet {
	o.selector, o.optInSelector = cli.NewSelector(""), cli.NewSelector(plugin.OptInLabel+"=true")
	o.leases = cli.NewLeases()
	fs := flag.NewFlagSet("configmap-attacher", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	fs.StringVar(&o.rollout, "rollout", "", "name of the Rollout (required)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Rollout and of its ConfigMaps and Secrets (required)")
	fs.StringVar(&o.configMaps, "configmaps", "", "comma-separated ConfigMap names, e.g. web-config-7f9c2,web-env-b41d0")
	fs.StringVar(&o.secrets, "secrets", "", "comma-separated Secret names")
	fs.BoolVar(&o.allowUnreferenced, "allow-unreferenced", false, "attach listed objects even if the ReplicaSet's pod template does not reference them")
	fs.BoolVar(&o.discover, "discover", false, "also attach every opted-in object (see -selector) that any ReplicaSet of the Rollout still in history references")
	fs.Var(o.selector, "selector", "label selector of the objects -discover may adopt (default "+plugin.OptInLabel+"=true)")
	fs.BoolVar(&o.requireOptIn, "require-opt-in", false, "refuse to write an owner reference on any object that does not match -opt-in-selector (listed objects that do not fail the run; discovery adopts only matching ones)")
	fs.Var(o.optInSelector, "opt-in-selector", "label selector of opted-in objects, for -require-opt-in")
	fs.Var(o.leases, "controller-lease", cli.LeasesUsage)
	fs.StringVar(&o.expectAnnotation, "expect-template-annotation", "", "KEY=VALUE: count the Rollout as settled only when its pod template (for workloadRef, the Deployment's) carries this annotation, e.g. a per-release value the chart stamps in both the template and the Job")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report the owner references that would be added; write nothing")
	fs.DurationVar(&o.timeout, "timeout", plugin.DefaultTimeout, "how long to wait for the Rollouts controller and the new ReplicaSet: 1s to 1h (a Sync hook holds the Argo CD sync while it waits; the controller needs seconds)")
	clientFlags(fs, &o.client)
	cli.LogFlags(fs, &o.logLevel, &o.logFormat)
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), jobUsage)
		fs.PrintDefaults()
	}
	return fs
}

// run waits for the Rollout's ReplicaSet and attaches (or prints the version) and returns the
// exit code.
func (o *jobOptions) run(ctx context.Context) int {
	if o.version {
		fmt.Fprintln(o.Stdout, "configmap-attacher", plugin.Version)
		return ExitOK
	}
	log, req := o.log, o.req
	cli.RouteKlog(log)
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	// VERSION and JOB_NAME are only logged, for the audit trail; neither is required.
	entry := log.WithFields(logrus.Fields{"rollout": o.rollout, "namespace": o.namespace})
	entry.WithFields(logrus.Fields{"version": plugin.Version, "VERSION": getenv("VERSION"), "jobName": getenv("JOB_NAME"),
		"configMaps": req.Config.ConfigMaps, "secrets": req.Config.Secrets}).Info("starting configmap-attacher")

	cl, err := o.Clients.typed(o.client)
	if err != nil {
		entry.Error(err)
		return ExitFail
	}
	req.Clients, req.Log, req.PollInterval = cl, entry, o.PollInterval
	msg, err := job.WaitAndAttach(ctx, req)
	if err != nil {
		entry.Error(err)
		if o.logFormat != "json" {
			// The one line a person reads last; a JSON pipeline has it as the error entry.
			fmt.Fprintf(o.Stderr, "configmap-attacher: %v\n", err)
		}
		return ExitFail
	}
	entry.Info(msg)
	fmt.Fprintln(o.Stdout, msg)
	return ExitOK
}

// positional refuses arguments: the Job takes flags only. An argument may be a misspelt command.
func (o *jobOptions) positional(rest []string) []string {
	if len(rest) == 0 {
		return nil
	}
	p := fmt.Sprintf("unexpected argument %q: all input is given by flags", rest[0])
	if o.suggest != nil {
		if s := o.suggest(rest[0]); len(s) > 0 {
			p = fmt.Sprintf("unknown command %q: did you mean %s? (configmap-attacher --help lists the commands)", rest[0], strings.Join(s, " or "))
		}
	}
	return []string{p}
}

// validate turns the flags into the core's request and configures the logger; it returns every
// problem at once (none with -version, which only prints it).
func (o *jobOptions) validate() []string {
	if o.version {
		return nil
	}
	var problems []string
	if o.rollout == "" {
		problems = append(problems, "-rollout is required: the name of the Rollout")
	} else if errs := validation.IsDNS1123Subdomain(o.rollout); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("-rollout %q is not a valid Rollout name (a DNS-1123 subdomain): %s%s", o.rollout, strings.Join(errs, "; "), unexpandedHint(o.rollout)))
	}
	if o.namespace == "" {
		problems = append(problems, "-namespace is required: the namespace of the Rollout and its ConfigMaps")
	} else if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("-namespace %q is not a valid namespace name (a DNS-1123 label): %s%s", o.namespace, strings.Join(errs, "; "), unexpandedHint(o.namespace)))
	}
	cfg := plugin.Config{ConfigMaps: splitList(o.configMaps), Secrets: splitList(o.secrets), AllowUnreferenced: o.allowUnreferenced, Timeout: plugin.Duration{Duration: o.timeout}, DryRun: o.dryRun}
	if o.discover {
		cfg.Discover = &plugin.Discover{}
		if o.selector.Selector() != nil {
			sel, err := metav1.ParseToLabelSelector(o.selector.String())
			if err != nil {
				problems = append(problems, fmt.Sprintf("-selector %q: %v", o.selector, err))
			}
			cfg.Discover.Selector = sel
		}
	} else if o.selector.Selector() != nil {
		problems = append(problems, "-selector only applies with -discover")
	}
	if len(cfg.ConfigMaps)+len(cfg.Secrets) == 0 && !o.discover {
		problems = append(problems, "nothing to attach: give -configmaps and/or -secrets, e.g. -configmaps web-config-7f9c2, or -discover")
	}
	problems = append(problems, plugin.ValidateNames("-configmaps", cfg.ConfigMaps)...)
	problems = append(problems, plugin.ValidateNames("-secrets", cfg.Secrets)...)
	if o.timeout < time.Second {
		problems = append(problems, fmt.Sprintf("-timeout %s: must be at least 1s (the waits poll every 2s), e.g. -timeout 5m", o.timeout))
	} else if o.timeout > jobMaxTimeout {
		problems = append(problems, fmt.Sprintf("-timeout %s: must be at most 1h (a Sync hook holds the Argo CD sync while it waits, and the Rollouts controller creates the ReplicaSet in seconds), e.g. -timeout 5m", o.timeout))
	}
	o.req = job.Request{Namespace: o.namespace, Rollout: o.rollout, Config: cfg, Policy: plugin.Policy{RequireOptIn: o.requireOptIn, OptIn: o.optInSelector.Selector()},
		ControllerLeases: o.leases.Leases()}
	if o.expectAnnotation != "" {
		k, v, ok := strings.Cut(o.expectAnnotation, "=")
		if !ok || k == "" {
			problems = append(problems, fmt.Sprintf("-expect-template-annotation %q: want KEY=VALUE, e.g. -expect-template-annotation example.com/release=42", o.expectAnnotation))
		} else if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("-expect-template-annotation %q: %q is not an annotation key: %s", o.expectAnnotation, k, strings.Join(errs, "; ")))
		} else {
			o.req.ExpectTemplateAnnotation = job.TemplateAnnotation{Key: k, Value: v}
		}
	}
	problems = append(problems, clientProblems(o.client)...)
	o.log = logrus.New()
	o.log.SetOutput(o.Stderr)
	return append(problems, cli.LoggerProblems(o.log, o.logLevel, o.logFormat)...)
}

// unexpandedHint explains a value that still holds a $(VAR) reference: the kubelet leaves
// $(VAR) as is when the container defines no env var VAR (e.g. a misspelt POD_NAMESPACE).
func unexpandedHint(v string) string {
	if strings.Contains(v, "$(") {
		return "; it holds an unexpanded $(VAR) reference: define that env var in the container (examples/job.yaml sets POD_NAMESPACE from the downward API)"
	}
	return ""
}
