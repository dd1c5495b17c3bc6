package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
)

// JobRBACHint is the example RBAC of the command-line (Job) mode.
const JobRBACHint = "examples/job.yaml"

// Exit codes of the command line.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// CLI is the command-line (Job) mode: the original tool's interface on the same core.
type CLI struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// NewClients builds the clients (tests inject fakes).
	NewClients func(ClientOptions) (Clients, error)
	// PollInterval is the pause between checks while waiting (default 2s).
	PollInterval time.Duration
}

type cliOptions struct {
	rollout, namespace, configMaps, secrets string
	allowUnreferenced, version, dryRun      bool
	discover                                bool
	selector                                string
	requireOptIn                            bool
	optInSelector, expectAnnotation         string
	timeout                                 time.Duration
	client                                  ClientOptions
	logLevel, logFormat                     string
	policy                                  Policy
	expect                                  annotation
}

// annotation is the -expect-template-annotation KEY=VALUE.
type annotation struct{ key, value string }

func (c *CLI) flags(o *cliOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&o.rollout, "rollout", "", "name of the Rollout (required)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Rollout and of its ConfigMaps and Secrets (required)")
	fs.StringVar(&o.configMaps, "configmaps", "", "comma-separated ConfigMap names, e.g. web-config-7f9c2,web-env-b41d0")
	fs.StringVar(&o.secrets, "secrets", "", "comma-separated Secret names")
	fs.BoolVar(&o.allowUnreferenced, "allow-unreferenced", false, "attach listed objects even if the ReplicaSet's pod template does not reference them")
	fs.BoolVar(&o.discover, "discover", false, "also attach every opted-in object (see -selector) that any ReplicaSet of the Rollout still in history references")
	fs.StringVar(&o.selector, "selector", "", "label selector of the objects -discover may adopt (default "+DefaultDiscoverLabel+"=true)")
	fs.BoolVar(&o.requireOptIn, "require-opt-in", false, "refuse to write an owner reference on any object that does not match -opt-in-selector (listed objects that do not fail the run; discovery adopts only matching ones)")
	fs.StringVar(&o.optInSelector, "opt-in-selector", DefaultDiscoverLabel+"=true", "label selector of opted-in objects, for -require-opt-in")
	fs.StringVar(&o.expectAnnotation, "expect-template-annotation", "", "KEY=VALUE: count the Rollout as settled only when its pod template (for workloadRef, the Deployment's) carries this annotation, e.g. a per-release value the chart stamps in both the template and the Job")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report the owner references that would be added; write nothing")
	fs.DurationVar(&o.timeout, "timeout", DefaultTimeout, "how long to wait for the Rollouts controller and the new ReplicaSet")
	fs.StringVar(&o.client.Kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(c.Stderr, "Usage: configmap-attacher -rollout NAME -namespace NS [-configmaps a,b] [-secrets c,d] [flags]\n\n"+
			"Waits until the Argo Rollouts controller has created the ReplicaSet of the Rollout's current\n"+
			"pod template, then adds it as an owner of each listed ConfigMap and Secret.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// Main runs the command line and returns the exit code.
func (c *CLI) Main(args []string) int {
	var o cliOptions
	fs := c.flags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage // the flag package has printed the problem and the usage
	}
	if o.version {
		fmt.Fprintln(c.Stdout, "configmap-attacher", Version)
		return ExitOK
	}
	log := logrus.New()
	log.SetOutput(c.Stderr)
	if err := ConfigureLogger(log, o.logLevel, o.logFormat); err != nil {
		fmt.Fprintf(c.Stderr, "configmap-attacher: %v\n", err)
		return ExitUsage
	}
	cfg, problems := o.config(fs.Args())
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(c.Stderr, "configmap-attacher: %s\n", p)
		}
		fmt.Fprintf(c.Stderr, "Run configmap-attacher -help for usage.\n")
		return ExitUsage
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	// VERSION and JOB_NAME are only logged, for the audit trail; neither is required.
	entry := log.WithFields(logrus.Fields{"rollout": o.rollout, "namespace": o.namespace})
	entry.WithFields(logrus.Fields{"version": Version, "VERSION": getenv("VERSION"), "jobName": getenv("JOB_NAME"),
		"configMaps": cfg.ConfigMaps, "secrets": cfg.Secrets}).Info("starting configmap-attacher")

	newClients := c.NewClients
	if newClients == nil {
		newClients = NewClients
	}
	cl, err := newClients(o.client)
	if err != nil {
		entry.Error(err)
		return ExitFail
	}
	interval := c.PollInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	w := &waiter{attacher: &Attacher{Client: cl.Kube, Meta: cl.Meta, Log: entry, RBACHint: JobRBACHint},
		rollouts: cl.Rollouts, cfg: cfg, policy: o.policy, expect: o.expect, ns: o.namespace, name: o.rollout, log: entry,
		events: &APIEvents{Client: func() (Clients, error) { return cl, nil }, Log: entry}}
	msg, err := w.run(context.Background(), interval)
	if err != nil {
		entry.Error(err)
		fmt.Fprintf(c.Stderr, "configmap-attacher: %v\n", err)
		return ExitFail
	}
	entry.Info(msg)
	fmt.Fprintln(c.Stdout, msg)
	return ExitOK
}

// config turns flags into a validated Config; it returns every problem.
func (o *cliOptions) config(rest []string) (Config, []string) {
	var problems []string
	if len(rest) > 0 {
		problems = append(problems, fmt.Sprintf("unexpected argument %q: all input is given by flags, e.g. -configmaps %s", rest[0], rest[0]))
	}
	if o.rollout == "" {
		problems = append(problems, "-rollout is required: the name of the Rollout")
	}
	if o.namespace == "" {
		problems = append(problems, "-namespace is required: the namespace of the Rollout and its ConfigMaps")
	}
	cfg := Config{ConfigMaps: splitList(o.configMaps), Secrets: splitList(o.secrets), AllowUnreferenced: o.allowUnreferenced, Timeout: Duration{o.timeout}, DryRun: o.dryRun}
	if o.discover {
		cfg.Discover = &Discover{}
		if o.selector != "" {
			sel, err := metav1.ParseToLabelSelector(o.selector)
			if err != nil {
				problems = append(problems, fmt.Sprintf("-selector %q: %v", o.selector, err))
			} else {
				cfg.Discover.Selector = sel
				if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && !Positive(s) {
					problems = append(problems, fmt.Sprintf("-selector %q %s", o.selector, NotPositive))
				}
			}
		}
	} else if o.selector != "" {
		problems = append(problems, "-selector only applies with -discover")
	}
	if len(cfg.ConfigMaps)+len(cfg.Secrets) == 0 && !o.discover {
		problems = append(problems, "nothing to attach: give -configmaps and/or -secrets, e.g. -configmaps web-config-7f9c2, or -discover")
	}
	problems = append(problems, validateNames("-configmaps", cfg.ConfigMaps)...)
	problems = append(problems, validateNames("-secrets", cfg.Secrets)...)
	if o.timeout < time.Second {
		problems = append(problems, fmt.Sprintf("-timeout %s: must be at least 1s (the waits poll every 2s), e.g. -timeout 5m", o.timeout))
	}
	o.policy = Policy{RequireOptIn: o.requireOptIn}
	if sel, err := labels.Parse(o.optInSelector); err != nil {
		problems = append(problems, fmt.Sprintf("-opt-in-selector %q: %v", o.optInSelector, err))
	} else if !Positive(sel) {
		problems = append(problems, fmt.Sprintf("-opt-in-selector %q %s", o.optInSelector, NotPositive))
	} else {
		o.policy.OptIn = sel
	}
	if o.expectAnnotation != "" {
		k, v, ok := strings.Cut(o.expectAnnotation, "=")
		if !ok || k == "" {
			problems = append(problems, fmt.Sprintf("-expect-template-annotation %q: want KEY=VALUE, e.g. -expect-template-annotation example.com/release=42", o.expectAnnotation))
		} else if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("-expect-template-annotation %q: %q is not an annotation key: %s", o.expectAnnotation, k, strings.Join(errs, "; ")))
		} else {
			o.expect = annotation{k, v}
		}
	}
	return cfg, problems
}

// splitList splits "a, b,,c" into [a b c]: the original tool choked on spaces and empty items.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// waiter polls until the Rollout's new ReplicaSet is there and uses every listed object,
// then attaches. Run as an Argo CD Sync hook that may start before the new spec is applied,
// it therefore waits for the new ReplicaSet instead of attaching to the previous one.
type waiter struct {
	attacher *Attacher
	rollouts rolloutsclient.Interface
	cfg      Config
	policy   Policy
	expect   annotation
	ns, name string
	log      logrus.FieldLogger
	reason   string // why we are still waiting, for the timeout message
	events   EventRecorder
	rollout  *v1alpha1.Rollout // last seen, for events
}

func (w *waiter) run(ctx context.Context, interval time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout.Duration)
	defer cancel()
	var msg string
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		done, m, err := w.try(ctx)
		switch {
		case err == nil:
			msg = m
			return done, nil
		case IsPermanent(err):
			return false, err
		default:
			w.reason = err.Error()
			w.log.WithError(err).Warn("transient error; retrying")
			return false, nil
		}
	})
	if err != nil && !IsPermanent(err) {
		err = fmt.Errorf("timed out after %s waiting for %s", w.cfg.Timeout.Duration, w.reason)
	}
	if w.rollout != nil && !w.cfg.DryRun {
		// Synchronous: the process has written its events when it exits.
		if err != nil {
			w.events.Event(w.rollout, corev1.EventTypeWarning, ReasonAttachFailed, err.Error())
		} else {
			w.events.Event(w.rollout, corev1.EventTypeNormal, ReasonAttached, msg)
		}
	}
	return msg, err
}

func (w *waiter) waitFor(reason string) (bool, string, error) {
	if reason != w.reason {
		w.log.Info("waiting for " + reason)
	}
	w.reason = reason
	return false, "", nil
}

func (w *waiter) try(ctx context.Context) (bool, string, error) {
	var ro *v1alpha1.Rollout
	err := w.attacher.call(ctx, func(ctx context.Context) error {
		var err error
		ro, err = w.rollouts.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return w.waitFor(fmt.Sprintf("Rollout %s/%s to exist", w.ns, w.name))
	case apierrors.IsForbidden(err):
		return false, "", &FailError{fmt.Sprintf("forbidden to get rollouts.argoproj.io %s/%s: %s; apply the Job RBAC in "+JobRBACHint, w.ns, w.name, apiMessage(err))}
	case err != nil:
		return false, "", fmt.Errorf("getting Rollout %s/%s: %w", w.ns, w.name, err)
	}
	w.rollout = ro
	for _, c := range ro.Status.Conditions {
		if c.Type == v1alpha1.InvalidSpec && c.Status == corev1.ConditionTrue {
			return false, "", &FailError{fmt.Sprintf("Rollout %s/%s has condition InvalidSpec=True (%s: %s): the controller will not create its ReplicaSet until the spec is fixed", w.ns, w.name, c.Reason, c.Message)}
		}
	}
	if ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
		return w.waitFor(fmt.Sprintf("the Rollouts controller to observe generation %d of Rollout %s/%s (observed: %q)", ro.Generation, w.ns, w.name, ro.Status.ObservedGeneration))
	}
	wl := Workload{Kind: KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector}
	resolved := ro
	if ro.Spec.WorkloadRef != nil {
		d, wait, err := w.workload(ctx, ro)
		if err != nil || wait != "" {
			if wait != "" {
				return w.waitFor(wait)
			}
			return false, "", err
		}
		// The controller's own view: the Deployment's template and selector stand in for the
		// Rollout's (as its workloadRef resolution does).
		resolved = ro.DeepCopy()
		resolved.Spec.Template = d.Spec.Template
		if wl.Selector == nil {
			wl.Selector = d.Spec.Selector
		}
	}
	if w.expect.key != "" {
		if v, ok := resolved.Spec.Template.Annotations[w.expect.key]; !ok || v != w.expect.value {
			return w.waitFor(fmt.Sprintf("the pod template of Rollout %s/%s to carry annotation %s=%s (-expect-template-annotation; now: %q): the new spec is not applied yet", w.ns, w.name, w.expect.key, w.expect.value, v))
		}
	}
	rss, err := w.attacher.ListReplicaSets(ctx, wl)
	if err != nil {
		return false, "", err
	}
	target := NewReplicaSet(resolved, rss)
	if target == nil {
		return w.waitFor(fmt.Sprintf("the Rollouts controller to create the ReplicaSet of the current pod template of Rollout %s/%s (status.currentPodHash %q names an older one)", w.ns, w.name, ro.Status.CurrentPodHash))
	}
	// The ReplicaSet of the current spec exists: the rule table decides at once.
	req := Request{Workload: wl, ReplicaSets: rss, Target: target, Objects: w.cfg.Objects(),
		AllowUnreferenced: w.cfg.AllowUnreferenced, Policy: w.policy, DryRun: w.cfg.DryRun}
	if w.cfg.Discover != nil {
		if req.Discover, err = w.cfg.Discover.LabelSelector(); err != nil {
			return false, "", &FailError{"-selector: " + err.Error()}
		}
	}
	res, err := w.attacher.Reconcile(ctx, req)
	for _, warn := range res.Warnings {
		w.log.Warn(warn)
	}
	if err != nil {
		return false, "", err
	}
	where := " of Rollout " + w.ns + "/" + w.name
	if w.cfg.DryRun {
		return true, res.Message + " (Rollout " + w.ns + "/" + w.name + ")", nil
	}
	// "attached 2 ConfigMaps to ReplicaSet web-7f9c2d of Rollout shop/web; …", as the original tool said.
	return true, strings.Replace(res.Message, "to ReplicaSet "+target.Name, "to ReplicaSet "+target.Name+where, 1), nil
}

// workload checks a workloadRef Rollout: the controller must have observed the Deployment's
// latest generation, and the Deployment supplies the selector when the Rollout has none.
func (w *waiter) workload(ctx context.Context, ro *v1alpha1.Rollout) (*appsv1.Deployment, string, error) {
	wr := ro.Spec.WorkloadRef
	if wr.Kind != "Deployment" {
		return nil, "", &FailError{fmt.Sprintf("Rollout %s/%s: spec.workloadRef.kind %q is not supported (only Deployment)", ro.Namespace, ro.Name, wr.Kind)}
	}
	var d *appsv1.Deployment
	err := w.attacher.call(ctx, func(ctx context.Context) error {
		var err error
		d, err = w.attacher.Client.AppsV1().Deployments(ro.Namespace).Get(ctx, wr.Name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("Deployment %s/%s named by spec.workloadRef to exist", ro.Namespace, wr.Name), nil
	case apierrors.IsForbidden(err):
		return nil, "", &FailError{fmt.Sprintf("forbidden to get deployments.apps %s/%s: %s; apply the Job RBAC in "+JobRBACHint, ro.Namespace, wr.Name, apiMessage(err))}
	case err != nil:
		return nil, "", fmt.Errorf("getting Deployment %s/%s: %w", ro.Namespace, wr.Name, err)
	}
	if ro.Status.WorkloadObservedGeneration != strconv.FormatInt(d.Generation, 10) {
		return nil, fmt.Sprintf("the Rollouts controller to observe generation %d of Deployment %s/%s (observed: %q)", d.Generation, ro.Namespace, wr.Name, ro.Status.WorkloadObservedGeneration), nil
	}
	return d, "", nil
}

// ConfigureLogger sets the level and format of a logger.
func ConfigureLogger(log *logrus.Logger, level, format string) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	log.SetLevel(lvl)
	switch format {
	case "text", "":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("log format %q: use text or json", format)
	}
	return nil
}
