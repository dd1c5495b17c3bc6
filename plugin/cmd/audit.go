package cmd

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
)

// Audit is `configmap-attacher audit`: it reports, per Rollout and Deployment, the
// ReplicaSets in history, the ConfigMaps and Secrets they use and what is lost, unowned,
// stray or legacy, and with -fix adds the missing owner references of opted-in objects
// (package plugin/audit does the work).
type Audit struct {
	Stdout, Stderr io.Writer
	// Clients builds the clients (tests inject fakes).
	Clients Clients
}

// auditOptions are one run of audit: the command, its flags as given, and the request
// validate derives from them.
type auditOptions struct {
	*Audit
	namespace, rollout string
	all, fix           bool
	output             string
	selector           *cli.SelectorFlag
	requireOptIn       bool
	optInSelector      *cli.SelectorFlag
	leases             *cli.LeasesFlag
	logLevel           string
	workloads          *workloadsFlag
	client             plugin.ClientOptions

	req auditRequest
}

// auditRequest is the validated input of one run.
type auditRequest struct {
	namespace, rollout string
	fix                bool
	output             string
	selector           labels.Selector
	// policy is the administrator's (-require-opt-in, -opt-in-selector): -fix writes under it
	// what the step, the Job and the controller would.
	policy plugin.Policy
	// leases are where a live controller is looked for (-controller-lease).
	leases []plugin.LeaseRef
	kinds  []string
	// explicitKinds: -workloads was given (a missing Rollout CRD is then an error).
	explicitKinds bool
	log           *logrus.Logger
}

const auditUsage = "Usage: configmap-attacher audit (-n NS [--rollout NAME] | -A) [-o text|json|yaml] [--fix] [flags]\n\n" +
	"Reports, per Rollout and Deployment, the ReplicaSets in history and the ConfigMaps and Secrets they use:\n" +
	"lost (referenced, does not exist), unowned (opted in or named in a step, no ReplicaSet owns it),\n" +
	"stray (owned by a ReplicaSet that does not use it) and legacy (the original tool's controller\n" +
	"reference), and shared (also used by a StatefulSet, DaemonSet, Job, CronJob or bare Pod, which\n" +
	"cannot own it). -fix adds missing owner references to opted-in objects only, under the policy of\n" +
	"-require-opt-in and -opt-in-selector, as the step, the Job and the controller would; it never\n" +
	"removes one, and leaves shared objects alone.\n" +
	"Exit codes: 0 nothing lost, 1 something lost or an error, 2 bad usage.\n\nFlags:\n"

// FlagSet returns a fresh flag set with every flag of the command registered at its default
// value, writing to c.Stderr (for -help and a docs generator's flag table).
func (c *Audit) FlagSet() *flag.FlagSet { return (&auditOptions{Audit: c}).flags() }

// Main runs the audit and returns the exit code: ExitOK, ExitFail (something lost, or an
// error) or ExitUsage.
func (c *Audit) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &auditOptions{Audit: &cc}, args)
}

func (o *auditOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher audit", usage: auditUsage, fs: o.flags(), extras: auditExtras}
}

func (o *auditOptions) flags() *flag.FlagSet {
	o.selector, o.optInSelector = cli.NewSelector(""), cli.NewSelector(plugin.OptInLabel+"=true")
	o.leases = cli.NewLeases()
	o.workloads = newWorkloads("rollouts,deployments")
	fs := flag.NewFlagSet("configmap-attacher audit", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Rollouts to audit")
	fs.StringVar(&o.rollout, "rollout", "", "audit only this Rollout (needs -namespace)")
	fs.BoolVar(&o.all, "all-namespaces", false, "audit the Rollouts of every namespace")
	fs.StringVar(&o.output, "output", "text", outputUsage+" (text: a tree)")
	fs.BoolVar(&o.fix, "fix", false, "add the missing owner references of opted-in and step-named objects (never removes anything)")
	fs.Var(o.selector, "selector", "label selector of the objects the audit counts as opted in (default: -opt-in-selector)")
	fs.BoolVar(&o.requireOptIn, "require-opt-in", false, "-fix writes an owner reference only on objects that match -opt-in-selector, as the step and the Job with the same flag (objects named in a step included)")
	fs.Var(o.optInSelector, "opt-in-selector", "label selector of opted-in objects: the administrator's policy -fix writes under, as the step's and the Job's -opt-in-selector")
	fs.Var(o.leases, "controller-lease", cli.LeasesUsage+" (audit reports the shared objects none maintains; -fix leaves shared objects to it)")
	fs.Var(o.workloads, "workloads", "workload kinds to audit: rollouts, deployments, or both (a missing Rollout CRD is an error only when rollouts is named)")
	clientFlags(fs, &o.client)
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn, error (logs go to stderr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), auditUsage)
		fs.PrintDefaults()
	}
	return fs
}

// validate turns the parsed flags into the request; it returns every problem at once.
func (o *auditOptions) validate() []string {
	req := &o.req
	*req = auditRequest{namespace: o.namespace, rollout: o.rollout, fix: o.fix, output: o.output}
	var problems []string
	switch {
	case o.all && (o.namespace != "" || o.rollout != ""):
		problems = append(problems, "-A audits every namespace: do not combine it with -namespace or -rollout")
	case !o.all && o.namespace == "":
		problems = append(problems, "-namespace is required (or -A for every namespace)")
	}
	problems = append(problems, outputProblems(o.output)...)
	problems = append(problems, clientProblems(o.client)...)
	// The audit reports with the policy's opt-in selector unless -selector names another.
	req.selector = o.selector.Selector()
	if req.selector == nil {
		req.selector = o.optInSelector.Selector()
	}
	req.policy = plugin.Policy{RequireOptIn: o.requireOptIn, OptIn: o.optInSelector.Selector()}
	for _, k := range o.workloads.kinds {
		if k != plugin.KindRollout && k != plugin.KindDeployment {
			problems = append(problems, fmt.Sprintf("-workloads %s: audit reads the ReplicaSets of rollouts and deployments; name only those (the other kinds are the controller's)", o.workloads.Raw))
			break
		}
	}
	req.leases = o.leases.Leases()
	req.kinds, req.explicitKinds = o.workloads.kinds, o.workloads.set
	if o.rollout != "" && !o.workloads.Has(plugin.KindRollout) {
		problems = append(problems, "-rollout audits one Rollout: -workloads must include rollouts")
	}
	req.log = logrus.New()
	req.log.SetOutput(o.Stderr)
	return append(problems, cli.LoggerProblems(req.log, o.logLevel, "text")...)
}

// run audits (and fixes), writes the report and returns the exit code.
func (o *auditOptions) run(ctx context.Context) int {
	req := o.req
	cli.RouteKlog(req.log)
	cl, err := o.Clients.typed(o.client)
	if err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher audit: %v\n", err)
		return ExitFail
	}
	aud := audit.New(cl, req.log)
	aud.Selector, aud.Workloads, aud.WorkloadsExplicit = req.selector, req.kinds, req.explicitKinds
	aud.Policy, aud.ControllerLeases = req.policy, req.leases
	rep, err := aud.Run(ctx, req.namespace, req.rollout, req.fix)
	if err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher audit: %v\n", err)
		return ExitFail
	}
	// Every user counts: objects that a user that cannot own them also uses are findings of
	// their own (the state after -fix, when it ran).
	aud.AddShared(ctx, rep)
	if err := writeReport(o.Stdout, req.output, rep); err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher audit: %v\n", err)
		return ExitFail
	}
	if rep.Failed() {
		return ExitFail
	}
	return ExitOK
}
