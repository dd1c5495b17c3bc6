package cmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/doctor"
)

// Doctor is `configmap-attacher doctor`: the read-only preflight of each mode (package
// plugin/doctor does the checks).
type Doctor struct {
	Stdout, Stderr io.Writer
	// Clients builds the clients (tests inject fakes).
	Clients Clients
}

const doctorUsage = "Usage: configmap-attacher doctor [--mode step,controller,job] [-n a,b] [-o text|json|yaml] [flags]\n\n" +
	"With -mode controller it finds every controller installed, by its Deployment's labels\n" +
	"(app.kubernetes.io/name=configmap-attacher, -instance and -controller-namespace narrow it), and\n" +
	"reads each one's ServiceAccount, Lease, watched namespaces, selector and metrics Service from it;\n" +
	"a flag given overrides what is read.\n" +
	"Checks, read-only, that each mode is set up to work: for the step plugin the argo-rollouts-config\n" +
	"entry, its location (the initContainer install or https with sha256), the Argo Rollouts version\n" +
	"and Pod Security; for every mode its ServiceAccount's RBAC (SubjectAccessReviews); the opt-in label\n" +
	"and GitOps prune protection of the revisioned ConfigMaps and Secrets live ReplicaSets use; for the\n" +
	"controller its Lease and metrics. Prints every problem with its fix. It only gets and lists (and\n" +
	"creates SubjectAccessReviews), and reads ConfigMaps and Secrets as metadata only.\n" +
	"Exit codes: 0 no error (warnings allowed), 1 an error found, 2 bad usage.\n\nFlags:\n"

// doctorOptions are one run of doctor: the command, its flags (bound to fs), and the checks'
// options validate completes from them.
type doctorOptions struct {
	*Doctor
	fs                        *flag.FlagSet
	modes, namespaces, output string
	optIn                     *cli.SelectorFlag
	opts                      doctor.Options
	client                    plugin.ClientOptions
}

// FlagSet returns a fresh flag set with every flag of the command at its default (for -help
// and the docs' flag table).
func (c *Doctor) FlagSet() *flag.FlagSet { return (&doctorOptions{Doctor: c}).flags() }

// Main runs the checks and returns the exit code: ExitOK (no error), ExitFail or ExitUsage.
func (c *Doctor) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &doctorOptions{Doctor: &cc}, args)
}

func (o *doctorOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher doctor", usage: doctorUsage, fs: o.flags(), extras: nsList}
}

// flags binds the flags to o (o.fs: validate reads which were given).
func (o *doctorOptions) flags() *flag.FlagSet {
	o.opts = doctor.Defaults()
	o.optIn = cli.NewSelector(plugin.OptInLabel + "=true")
	fs := flag.NewFlagSet("configmap-attacher doctor", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	o.fs = fs
	fs.StringVar(&o.modes, "mode", "step", "modes to check, comma-separated: step, controller, job")
	fs.StringVar(&o.namespaces, "namespace", "", "application namespaces, comma-separated: RBAC is checked in each and their objects (default: cluster-wide RBAC, every namespace's objects; required for -mode job)")
	fs.StringVar(&o.output, "output", "text", outputUsage)
	fs.StringVar(&o.opts.RolloutsNamespace, "rollouts-namespace", o.opts.RolloutsNamespace, "namespace of the Argo Rollouts controller and argo-rollouts-config")
	fs.StringVar(&o.opts.RolloutsConfigMap, "rollouts-configmap", o.opts.RolloutsConfigMap, "the Argo Rollouts controller's ConfigMap")
	fs.StringVar(&o.opts.RolloutsDeployment, "rollouts-deployment", o.opts.RolloutsDeployment, "the Argo Rollouts controller's Deployment")
	fs.StringVar(&o.opts.RolloutsServiceAccount, "rollouts-service-account", o.opts.RolloutsServiceAccount, "the Argo Rollouts controller's ServiceAccount (the step plugin runs as it)")
	fs.StringVar(&o.opts.PluginName, "plugin-name", o.opts.PluginName, "the stepPlugins entry's name")
	fs.StringVar(&o.opts.DiscoverNamespace, "controller-namespace", "", "namespace of the controller mode (default: find it in every namespace)")
	fs.StringVar(&o.opts.Instance, "instance", "", "the controller install to check: its app.kubernetes.io/instance label, the Helm release name (default: every install)")
	fs.StringVar(&o.opts.ControllerServiceAccount, "controller-service-account", o.opts.ControllerServiceAccount, "the controller mode's ServiceAccount (default: the found Deployment's)")
	fs.BoolVar(&o.opts.LeaderElect, "leader-elect", true, "the controller runs with -leader-elect (false: its Lease is not checked; default: the found Deployment's)")
	fs.StringVar(&o.opts.LeaseNamespace, "leader-election-namespace", "", "namespace of the controller's Lease (default: the found Deployment's, else -controller-namespace)")
	fs.StringVar(&o.opts.LeaseName, "leader-election-id", o.opts.LeaseName, "name of the controller's Lease (default: the found Deployment's -leader-election-id)")
	fs.StringVar(&o.opts.MetricsURL, "metrics-url", "", "the controller's /metrics URL, e.g. http://configmap-attacher-metrics.configmap-attacher.svc:8080/metrics (default: the found metrics Service's, fetched in the cluster only)")
	fs.StringVar(&o.opts.JobServiceAccount, "job-service-account", o.opts.JobServiceAccount, "the Job's ServiceAccount, in each of --namespace")
	fs.BoolVar(&o.opts.OwnerReferencesEnforcement, "ownerreferences-enforcement", false, "the cluster runs the OwnerReferencesPermissionEnforcement admission plugin (OpenShift): also check delete on configmaps and secrets")
	fs.Var(o.optIn, "opt-in-selector", "label selector of opted-in objects (the step's and the controller's)")
	fs.DurationVar(&o.opts.Timeout, "timeout", o.opts.Timeout, "deadline of each API call and of the metrics request")
	clientFlags(fs, &o.client)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doctorUsage)
		fs.PrintDefaults()
	}
	return fs
}

// validate completes o.opts and returns every problem.
func (o *doctorOptions) validate() []string {
	// What the command line set overrides what discovery reads from each install.
	set := map[string]bool{}
	o.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.opts.Explicit = doctor.Explicit{ServiceAccount: set["controller-service-account"], LeaderElect: set["leader-elect"],
		LeaseNamespace: set["leader-election-namespace"], LeaseName: set["leader-election-id"], MetricsURL: set["metrics-url"],
		Namespaces: set["namespace"], OptIn: set["opt-in-selector"]}
	var problems []string
	o.opts.Modes = nil
	for _, m := range splitList(o.modes) {
		switch m {
		case doctor.ModeStep, doctor.ModeController, doctor.ModeJob:
			if contains(o.opts.Modes, m) {
				problems = append(problems, fmt.Sprintf("-mode: %q is listed twice", m))
				continue
			}
			o.opts.Modes = append(o.opts.Modes, m)
		default:
			problems = append(problems, fmt.Sprintf("-mode %q: %q is not a mode: use step, controller, job or several (step,controller)", o.modes, m))
		}
	}
	if len(o.opts.Modes) == 0 && len(problems) == 0 {
		problems = append(problems, "-mode names no mode: use step, controller, job or several (step,controller)")
	}
	for _, ns := range splitList(o.namespaces) {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			problems = append(problems, fmt.Sprintf("-n/--namespace: %q is not a valid namespace name", ns))
			continue
		}
		o.opts.Namespaces = append(o.opts.Namespaces, ns)
	}
	if contains(o.opts.Modes, doctor.ModeJob) && len(o.opts.Namespaces) == 0 {
		problems = append(problems, "-mode job needs -n/--namespace: the Job's ServiceAccount lives in each application namespace")
	}
	if o.opts.DiscoverNamespace != "" {
		o.opts.ControllerNamespace = o.opts.DiscoverNamespace
	}
	for _, f := range []struct{ flag, v string }{{"-rollouts-namespace", o.opts.RolloutsNamespace}, {"-controller-namespace", o.opts.ControllerNamespace}, {"-leader-election-namespace", o.opts.LeaseNamespace}} {
		if f.v != "" && len(validation.IsDNS1123Label(f.v)) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q is not a valid namespace name", f.flag, f.v))
		}
	}
	for _, f := range []struct{ flag, v string }{{"-rollouts-configmap", o.opts.RolloutsConfigMap}, {"-rollouts-deployment", o.opts.RolloutsDeployment},
		{"-rollouts-service-account", o.opts.RolloutsServiceAccount}, {"-controller-service-account", o.opts.ControllerServiceAccount},
		{"-leader-election-id", o.opts.LeaseName}, {"-job-service-account", o.opts.JobServiceAccount}} {
		if errs := validation.IsDNS1123Subdomain(f.v); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q is not a valid name: %s", f.flag, f.v, strings.Join(errs, "; ")))
		}
	}
	if o.opts.Instance != "" && len(validation.IsValidLabelValue(o.opts.Instance)) > 0 {
		problems = append(problems, fmt.Sprintf("-instance %q is not a valid label value", o.opts.Instance))
	}
	if o.opts.MetricsURL != "" {
		if u, err := url.Parse(o.opts.MetricsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, fmt.Sprintf("-metrics-url %q: want http://host:port/metrics", o.opts.MetricsURL))
		}
	}
	problems = append(problems, outputProblems(o.output)...)
	problems = append(problems, clientProblems(o.client)...)
	if o.opts.Timeout <= 0 {
		problems = append(problems, fmt.Sprintf("-timeout %v: must be positive", o.opts.Timeout))
	}
	o.opts.OptIn = o.optIn.Selector()
	return problems
}

// run finds the installs, checks them, writes the report and returns the exit code.
func (o *doctorOptions) run(ctx context.Context) int {
	o.opts.Discover = true
	o.opts.ParseControllerArgs = ParseControllerArgs
	// doctor's output is its report (stdout); what client-go says on its own (the apiserver's
	// warnings, which klog logs at its info level) goes to stderr as log lines.
	log := logrus.New()
	log.SetOutput(o.Stderr)
	_ = cli.ConfigureLogger(log, "info", "text")
	cli.RouteKlog(log)
	cl, err := o.Clients.typed(o.client)
	if err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher doctor: %v\n", err)
		return ExitFail
	}
	// The whole run has a deadline too: every call has its own, and there are at most a few
	// hundred of them.
	ctx, cancel := context.WithTimeout(ctx, 100*o.opts.Timeout+time.Minute)
	defer cancel()
	rep := (&doctor.Doctor{Kube: cl.Kube, Meta: cl.Meta, Rollouts: cl.Rollouts, Opts: o.opts}).Run(ctx)
	if err := writeReport(o.Stdout, o.output, rep); err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher doctor: %v\n", err)
		return ExitFail
	}
	if rep.Failed() {
		return ExitFail
	}
	return ExitOK
}

// ParseControllerArgs reads a controller Deployment's arguments (after "controller") with the
// controller's own flag set, so that doctor knows the defaults and the syntax the controller
// has: the Lease it takes when -leader-election-id is not given is the one doctor checks.
func ParseControllerArgs(args []string) (doctor.ControllerArgs, error) {
	o := controllerOptions{Controller: &Controller{Stderr: io.Discard}}
	fs := o.flags()
	if p := parseFlags(fs, nsList, args); len(p.problems) > 0 {
		return doctor.ControllerArgs{}, fmt.Errorf("parsing %q: %s", strings.Join(args, " "), strings.Join(p.problems, "; "))
	}
	return doctor.ControllerArgs{Namespaces: splitList(o.namespaces), Selector: o.selector.Selector(), LeaderElect: o.leaderElect,
		LeaseNamespace: o.leNamespace, LeaseName: o.leID, MetricsAddr: o.metricsAddr}, nil
}
