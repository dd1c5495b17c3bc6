// Package stepplugin is the step plugin's command: the args the Argo Rollouts controller
// passes (stepPlugins[].args in argo-rollouts-config), then serving step.Step over go-plugin.
// It imports no other command, so the step plugin's own binary
// (plugin/cmd/configmap-attacher-step) links only the step.
package stepplugin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/step"
	"github.com/configmap-attacher/configmap-attacher/rpc"
)

// Command is the step plugin as the Argo Rollouts controller starts it
// (ARGO_ROLLOUTS_RPC_PLUGIN=step): it reads the plugin's args from argo-rollouts-config
// (stepPlugins[].args), then serves step.Step over go-plugin (rpc.Serve) until the
// controller stops it.
type Command struct {
	// Stderr must be the process's original standard error: go-plugin swaps os.Stderr for a
	// pipe nobody reads once it serves, so the logger is bound to the real file first.
	Stderr io.Writer
}

// stepPluginOptions are one run of the step plugin: the command and its args, e.g.
// ["--log-level", "debug", "--require-opt-in"]. They have the skeleton of every command
// (package cmd's): validate() []string, then run(ctx); the args parse with the Go flag
// package, as argo-rollouts-config writes them (--name value), every problem in one error.
type stepPluginOptions struct {
	*Command
	Client      plugin.ClientOptions
	LogLevel    string
	LogFormat   string
	Concurrency int
	// Policy is --require-opt-in and --opt-in-selector. Plugin args live in
	// argo-rollouts-config, which only cluster administrators change, so a Rollout's author
	// cannot turn the policy off.
	Policy plugin.Policy

	qps    float64
	optIn  *cli.SelectorFlag
	leases *cli.LeasesFlag
}

const stepPluginUsage = "Usage: the Argo Rollouts controller starts configmap-attacher as a step plugin with the args of\n" +
	"stepPlugins[].args in argo-rollouts-config, e.g. [\"--log-level\", \"debug\", \"--require-opt-in\"].\n\nFlags:\n"

// FlagSet returns a fresh flag set with every flag of the step plugin, writing to Stderr.
func (c *Command) FlagSet() *flag.FlagSet { return (&stepPluginOptions{Command: c}).flags() }

func (o *stepPluginOptions) flags() *flag.FlagSet {
	o.optIn = cli.NewSelector(plugin.OptInLabel + "=true")
	o.leases = cli.NewLeases()
	fs := flag.NewFlagSet("configmap-attacher (step plugin)", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	cli.KubeconfigFlag(fs, &o.Client.Kubeconfig)
	fs.Float64Var(&o.qps, "qps", plugin.DefaultQPS, "client-side queries per second to the apiserver")
	fs.IntVar(&o.Client.Burst, "burst", plugin.DefaultBurst, "client-side burst of requests to the apiserver")
	cli.LogFlags(fs, &o.LogLevel, &o.LogFormat)
	fs.IntVar(&o.Concurrency, "concurrency", 8, "patches in flight per step")
	fs.BoolVar(&o.Policy.RequireOptIn, "require-opt-in", false, "write owner references only on objects that match --opt-in-selector: listed objects that do not fail the step, discovery adopts only matching ones")
	fs.Var(o.optIn, "opt-in-selector", "label selector of opted-in objects")
	fs.Var(o.leases, "controller-lease", cli.LeasesUsage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), stepPluginUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parse reads and validates the plugin's args. It reports every problem at once: first those
// the flag package finds, in the order of the args (parsing goes on after each), then the
// values, in flag order.
func (c *Command) parse(args []string) (stepPluginOptions, error) {
	o := stepPluginOptions{Command: c}
	fs := o.flags()
	problems, help := cli.CollectParse(fs, args)
	for i, p := range problems {
		if strings.HasPrefix(p, "-") && !strings.HasPrefix(p, "--") {
			problems[i] = "-" + p // plugin args are written --name in argo-rollouts-config
		}
	}
	if help {
		// The controller starts the plugin; nobody reads a help text, so -help is a bad arg.
		problems = append(problems, flag.ErrHelp.Error())
	}
	fs.SetOutput(c.Stderr)
	if len(problems) > 0 {
		fs.Usage()
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	problems = append(problems, o.validate()...)
	if len(problems) > 0 {
		return o, fmt.Errorf("plugin args in argo-rollouts-config: %s", strings.Join(problems, "; "))
	}
	return o, nil
}

// validate checks the values in flag order and returns every problem.
func (o *stepPluginOptions) validate() []string {
	var problems []string
	for _, p := range []struct {
		name string
		v    float64
	}{{"--qps", o.qps}, {"--burst", float64(o.Client.Burst)}} {
		if p.v <= 0 {
			problems = append(problems, fmt.Sprintf("%s %v: must be positive", p.name, p.v))
		}
	}
	problems = append(problems, cli.LoggerProblems(logrus.New(), o.LogLevel, o.LogFormat)...)
	if o.Concurrency <= 0 {
		problems = append(problems, fmt.Sprintf("--concurrency %v: must be positive", o.Concurrency))
	}
	o.Policy.OptIn = o.optIn.Selector()
	o.Client.QPS = float32(o.qps)
	return problems
}

// configureLogger gives the plugin's logger its level and the format the Argo Rollouts
// controller's go-plugin log reader expects, and makes it klog's backend: client-go's own lines
// too go to the plugin's stderr, which the controller reads, in the same format.
func configureLogger(log *logrus.Logger, o stepPluginOptions) error {
	if err := cli.ConfigureLogger(log, o.LogLevel, o.LogFormat); err != nil {
		return fmt.Errorf("configuring the log: %w", err)
	}
	log.SetFormatter(rpc.LogFormatter(o.LogFormat))
	cli.RouteKlog(log)
	return nil
}

// Main reads the args and serves until the controller stops the plugin; it returns 2 for bad
// args (the reason on Stderr, which the controller logs) and 0 after serving.
func (c *Command) Main(args []string) int {
	o, err := c.parse(args)
	if err != nil {
		log := logrus.New()
		log.SetOutput(c.Stderr)
		log.Error(err)
		return cli.ExitUsage
	}
	return o.run(context.Background())
}

// run serves step.Step until the controller stops the plugin. go-plugin's Serve takes no
// context (the controller ends the process), so ctx is unused.
func (o *stepPluginOptions) run(context.Context) int {
	log := logrus.New()
	log.SetOutput(o.Stderr)
	if err := configureLogger(log, *o); err != nil { // validated: cannot fail
		log.Error(err)
		return cli.ExitUsage
	}
	entry := log.WithField("plugin", "configmap-attacher")
	// The step's clients are built lazily, on the first step, and a failure is retried on the
	// next: InitPlugin, which the controller never retries, must not fail on an apiserver that
	// is not reachable yet. (The other commands get theirs from cmd.Clients, which this
	// binary does not link: the typed clientset is most of what it would weigh.)
	client := plugin.LazyClient(o.Client)
	// Events are sent in the background: a step's latency does not include them.
	events := plugin.NewAsyncEvents(&plugin.APIEvents{Client: client, Log: entry}, 64, entry)
	s := &step.Step{Client: client, Log: entry, Concurrency: o.Concurrency, Events: events, Policy: o.Policy, ControllerLeases: o.leases.Leases()}
	entry.WithFields(logrus.Fields{"requireOptIn": o.Policy.RequireOptIn, "optInSelector": o.Policy.OptIn.String(), "controllerLeases": o.leases.String()}).Info("policy")
	rpc.Serve(s)
	return cli.ExitOK
}
