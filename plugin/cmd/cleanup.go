package cmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cleanup"
)

// Cleanup is `configmap-attacher cleanup`: the controller mode's uninstall step (package
// plugin/cleanup does the work). An anchor's one owner is its Namespace: once the controller
// is gone nothing else deletes it, and the config it owns would never be collected.
type Cleanup struct {
	Stdout, Stderr io.Writer
	// Clients builds the clients (tests inject fakes).
	Clients Clients
	// poll is the interval of the wait for the controller to stop (tests shorten it).
	poll time.Duration
}

const cleanupUsage = "Usage: configmap-attacher cleanup [-n a,b] [--stop-controller NS/NAME] [--dry-run] [--force] [-o text|json|yaml] [flags]\n\n" +
	"Deletes the controller mode's anchors (ControllerRevisions labelled configmap-attacher.io/anchor=true that\n" +
	"read as anchors; nothing else), each with its UID as a precondition, so that the config they own is\n" +
	"collected with its other owners once the controller is uninstalled. An anchor that is the last keeper of\n" +
	"an object its live workload uses (a CronJob's current config between runs) is kept, and then nothing is\n" +
	"deleted: the report names the objects, their users and what to do; -force deletes anyway.\n" +
	"-stop-controller scales the controller's Deployment to 0 first, so that it does not create anchors again.\n" +
	"Exit codes: 0 every anchor deleted (or none), 1 an anchor kept or an error, 2 bad usage.\n\nFlags:\n"

// cleanupOptions are one run of cleanup: the command, its flags, and the namespaces validate
// reads from -n.
type cleanupOptions struct {
	*Cleanup
	client             plugin.ClientOptions
	namespaces, output string
	stop               string
	stopTimeout        time.Duration
	timeout            time.Duration
	force, dryRun      bool

	nss []string
}

// FlagSet returns a fresh flag set with every flag at its default (for -help and the docs'
// flag table).
func (c *Cleanup) FlagSet() *flag.FlagSet { return (&cleanupOptions{Cleanup: c}).flags() }

// Main runs the cleanup and returns the exit code: ExitOK (every anchor deleted, or none),
// ExitFail (an anchor kept, or an error) or ExitUsage.
func (c *Cleanup) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &cleanupOptions{Cleanup: &cc}, args)
}

func (o *cleanupOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher cleanup", usage: cleanupUsage, fs: o.flags(), extras: nsList}
}

func (o *cleanupOptions) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher cleanup", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	fs.StringVar(&o.namespaces, "namespace", "", "comma-separated namespaces whose anchors to delete (default: all; as the controller's --namespace)")
	fs.StringVar(&o.stop, "stop-controller", "", "NAMESPACE/NAME of the controller's Deployment: scaled to 0 (and its pods waited for) before the first delete")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 2*time.Minute, "how long to wait for the controller's pods to be gone")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would be deleted and kept; change nothing")
	fs.BoolVar(&o.force, "force", false, "also delete anchors that are the last keepers of objects live workloads use (the garbage collector then deletes those objects)")
	fs.StringVar(&o.output, "output", "text", outputUsage)
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline of each API call")
	clientFlags(fs, &o.client)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), cleanupUsage)
		fs.PrintDefaults()
	}
	return fs
}

// validate reads the namespaces -n names and returns every problem of the parsed flags.
func (o *cleanupOptions) validate() []string {
	var problems []string
	o.nss, problems = parseNamespaces(o.namespaces, "omit it for all")
	if o.stop != "" {
		ns, name, ok := strings.Cut(o.stop, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			problems = append(problems, fmt.Sprintf("-stop-controller %q: want NAMESPACE/NAME of the controller's Deployment", o.stop))
		}
	}
	if o.stopTimeout <= 0 {
		problems = append(problems, fmt.Sprintf("-stop-timeout %v: must be positive", o.stopTimeout))
	}
	if o.timeout <= 0 {
		problems = append(problems, fmt.Sprintf("-timeout %v: must be positive", o.timeout))
	}
	problems = append(problems, outputProblems(o.output)...)
	problems = append(problems, clientProblems(o.client)...)
	if o.force && o.dryRun {
		problems = append(problems, "-force with -dry-run: -dry-run deletes nothing (drop one)")
	}
	return problems
}

// run deletes the anchors (or reports what it would), writes the report and returns the exit
// code.
func (o *cleanupOptions) run(ctx context.Context) int {
	cl, err := o.Clients.typed(o.client)
	if err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher cleanup: %v\n", err)
		return ExitFail
	}
	cln := &cleanup.Cleaner{Kube: cl.Kube, Meta: cl.Meta, Namespaces: o.nss, Force: o.force, DryRun: o.dryRun,
		Timeout: o.timeout, StopTimeout: o.stopTimeout, Poll: o.poll}
	cln.StopNamespace, cln.StopName, _ = strings.Cut(o.stop, "/")
	// The whole run has a deadline too: the wait for the controller, and a few calls per anchor.
	ctx, cancel := context.WithTimeout(ctx, o.stopTimeout+1000*o.timeout)
	defer cancel()
	rep, runErr := cln.Run(ctx)
	if err := writeReport(o.Stdout, o.output, rep); err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher cleanup: %v\n", err)
		return ExitFail
	}
	if runErr != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher cleanup: %v\n", runErr)
		return ExitFail
	}
	if rep.Failed() {
		return ExitFail
	}
	return ExitOK
}
