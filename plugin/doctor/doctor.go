// Package doctor is `configmap-attacher doctor`: a read-only preflight of each mode. It reads
// (GET and LIST only; ConfigMaps and Secrets as metadata, argo-rollouts-config excepted: its
// data is plugin configuration, not user config) and asks the authorizer with
// SubjectAccessReviews; it never writes anything. Every problem found is reported with its
// fix, not only the first, so one run tells an administrator everything left to do.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Modes doctor can check.
const (
	ModeStep       = "step"
	ModeController = "controller"
	ModeJob        = "job"
)

// Severity of a finding.
type Severity string

const (
	// OK: the check passed (printed so that a clean run shows what was checked).
	OK Severity = "ok"
	// Warning: worth fixing, but the mode works (exit 0).
	Warning Severity = "warning"
	// Error: the mode fails or loses config as set up (exit 1).
	Error Severity = "error"
)

// Finding is one result: what was checked, on what, what is wrong and how to fix it.
type Finding struct {
	Severity Severity `json:"severity"`
	// Check names the check, e.g. "step/registration", "rbac", "objects/opt-in".
	Check string `json:"check"`
	// Subject is what was checked, e.g. "ConfigMap argo-rollouts/argo-rollouts-config".
	Subject string `json:"subject"`
	Message string `json:"message"`
	// Fix says what to do (empty for OK).
	Fix string `json:"fix,omitempty"`
}

// Report is every finding of a run.
type Report struct {
	Findings []Finding `json:"findings"`
	Errors   int       `json:"errors"`
	Warnings int       `json:"warnings"`
}

// Failed reports whether any finding is an error.
func (r *Report) Failed() bool { return r.Errors > 0 }

func (r *Report) add(f Finding) {
	switch f.Severity {
	case Error:
		r.Errors++
	case Warning:
		r.Warnings++
	}
	r.Findings = append(r.Findings, f)
}

func (r *Report) ok(check, subject, format string, a ...any) {
	r.add(Finding{Severity: OK, Check: check, Subject: subject, Message: fmt.Sprintf(format, a...)})
}

func (r *Report) problem(sev Severity, check, subject, fix, format string, a ...any) {
	r.add(Finding{Severity: sev, Check: check, Subject: subject, Message: fmt.Sprintf(format, a...), Fix: fix})
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing the report as JSON: %w", err)
	}
	return nil
}

// WriteText writes one line per finding, the fix indented below each problem, and a summary.
func (r *Report) WriteText(w io.Writer) {
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%-7s %-22s %s: %s\n", strings.ToUpper(string(f.Severity)), f.Check, f.Subject, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "        fix: %s\n", f.Fix)
		}
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s), %d check(s) passed\n", r.Errors, r.Warnings, len(r.Findings)-r.Errors-r.Warnings)
}

// Options say what to check and where. The defaults (Defaults) are those of examples/ and the
// chart.
type Options struct {
	Modes []string
	// Namespaces are the application namespaces (RBAC is checked in each, and their pod
	// templates' objects); empty: cluster-wide RBAC and every namespace's objects.
	Namespaces []string

	// The step plugin: where the Argo Rollouts controller runs.
	RolloutsNamespace, RolloutsConfigMap, RolloutsDeployment, RolloutsServiceAccount string
	PluginName                                                                       string

	// The controller mode: with Discover, each install is found by its labels (discover.go) and
	// these are its settings where Explicit does not say the command line set them.
	Discover bool
	// Instance limits discovery to one app.kubernetes.io/instance (a Helm release); empty: all.
	Instance string
	// DiscoverNamespace limits discovery to one namespace; empty: every namespace.
	DiscoverNamespace string
	Explicit          Explicit
	// ParseControllerArgs reads a discovered Deployment's controller arguments (the command's
	// flag set: plugin/cmd).
	ParseControllerArgs func(args []string) (ControllerArgs, error)
	// InCluster reports whether doctor runs in a pod (nil: KUBERNETES_SERVICE_HOST is set): a
	// discovered metrics Service is fetched by its DNS name only there.
	InCluster func() bool
	// metricsService is the discovered Service MetricsURL was built from ("" when the flag
	// gave MetricsURL).
	metricsService string

	ControllerNamespace, ControllerServiceAccount string
	// LeaderElect: the controller runs with -leader-elect (its default); false skips the Lease.
	LeaderElect               bool
	LeaseNamespace, LeaseName string
	MetricsURL                string

	// The Job mode's ServiceAccount, in each of Namespaces.
	JobServiceAccount string

	// OwnerReferencesEnforcement: the cluster runs the OwnerReferencesPermissionEnforcement
	// admission plugin (OpenShift), so every writing mode also needs delete.
	OwnerReferencesEnforcement bool
	// OptIn is the opt-in selector (nil: configmap-attacher/revisioned=true).
	OptIn labels.Selector
	// Timeout bounds each API call and the metrics request.
	Timeout time.Duration
	// Now is the clock (tests set it).
	Now func() time.Time
	// HTTP is the client of the metrics request (nil: a plain one).
	HTTP *http.Client
}

// DefaultLeaseName is the controller's -leader-election-id default: the chart's full name of
// a release named configmap-attacher (the chart passes its full name, so the Lease of a
// release is always named after it), which every example installs.
const DefaultLeaseName = "configmap-attacher"

// Defaults are the names examples/ and the chart use.
func Defaults() Options {
	return Options{
		Modes:                  []string{ModeStep},
		RolloutsNamespace:      "argo-rollouts",
		RolloutsConfigMap:      "argo-rollouts-config",
		RolloutsDeployment:     "argo-rollouts",
		RolloutsServiceAccount: "argo-rollouts",
		PluginName:             "configmap-attacher/configmap-attacher",
		ControllerNamespace:    "configmap-attacher",
		// The chart's full name of a release named configmap-attacher, as every example
		// installs it; used only when no Deployment is found by its labels.
		ControllerServiceAccount: "configmap-attacher",
		LeaderElect:              true,
		// The controller's -leader-election-id default, which is that same name.
		LeaseName:         DefaultLeaseName,
		JobServiceAccount: "configmap-attacher-job",
		Timeout:           10 * time.Second,
	}
}

// Doctor runs the checks with the clients of the identity that runs it (which needs only
// get/list and create on subjectaccessreviews).
type Doctor struct {
	Kube kubernetes.Interface
	// Meta reads ConfigMaps and Secrets as metadata only: their data never enters the process.
	Meta metadata.Interface
	// Rollouts lists Rollouts for their plugin steps (-mode step; nil: not checked).
	Rollouts rolloutsclient.Interface
	Opts     Options
}

func (d *Doctor) has(mode string) bool {
	for _, m := range d.Opts.Modes {
		if m == mode {
			return true
		}
	}
	return false
}

// call gives one API call its deadline.
func (d *Doctor) call(ctx context.Context) (context.Context, context.CancelFunc) {
	t := d.Opts.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

func (d *Doctor) now() time.Time {
	if d.Opts.Now != nil {
		return d.Opts.Now()
	}
	return time.Now()
}

func (d *Doctor) optIn() labels.Selector {
	if plugin.Positive(d.Opts.OptIn) {
		return d.Opts.OptIn
	}
	return plugin.OptInSelector()
}

// objectsScope is the doctor that checks the objects: the namespaces and the opt-in selector the
// discovered installs watch, where the flags do not set them (every namespace if one install
// watches all; the default selector if the installs differ).
func (d *Doctor) objectsScope(installs []Install) *Doctor {
	if len(installs) == 0 {
		return d
	}
	c := *d
	if !d.Opts.Explicit.Namespaces {
		seen := map[string]bool{}
		var union []string
		all := false
		for _, in := range installs {
			all = all || len(in.Args.Namespaces) == 0
			for _, ns := range in.Args.Namespaces {
				if !seen[ns] {
					seen[ns] = true
					union = append(union, ns)
				}
			}
		}
		sort.Strings(union)
		c.Opts.Namespaces = union
		if all {
			c.Opts.Namespaces = nil // one install watches every namespace
		}
	}
	if !d.Opts.Explicit.OptIn {
		first := installs[0].Args.Selector
		for _, in := range installs[1:] {
			if first == nil || in.Args.Selector == nil || in.Args.Selector.String() != first.String() {
				first = nil
				break
			}
		}
		if first != nil {
			c.Opts.OptIn = first
		}
	}
	return &c
}

// Run runs every check of the modes and returns the report; a check that cannot read what it
// needs reports that as an error finding and the others go on.
func (d *Doctor) Run(ctx context.Context) *Report {
	r := &Report{}
	// The controllers to check: each install found by its labels, or (without discovery, or
	// when none is found but the flags name one) the one the flags describe.
	var controllers []*Doctor
	objects := d
	if d.has(ModeController) {
		if d.Opts.Discover {
			installs := d.discover(ctx, r)
			for _, in := range installs {
				r.ok("controller/install", "Deployment "+in.Namespace+"/"+in.Deployment, "%s", in.describe())
				controllers = append(controllers, d.forInstall(in))
			}
			if len(installs) == 0 && d.Opts.Explicit.Any() {
				controllers = append(controllers, d)
			}
			objects = d.objectsScope(installs)
		} else {
			controllers = append(controllers, d)
		}
	}
	if d.has(ModeStep) {
		d.checkStep(ctx, r)
	}
	for _, mode := range d.Opts.Modes {
		if mode != ModeController {
			d.checkRBAC(ctx, r, mode)
		}
	}
	for _, c := range controllers {
		c.checkRBAC(ctx, r, ModeController)
	}
	objects.checkObjects(ctx, r)
	for _, c := range controllers {
		if c.Opts.LeaderElect {
			c.checkLease(ctx, r)
		}
		c.checkMetrics(ctx, r)
	}
	// Errors first, then warnings, then passes; within each, in the order checked.
	rank := map[Severity]int{Error: 0, Warning: 1, OK: 2}
	sort.SliceStable(r.Findings, func(i, j int) bool { return rank[r.Findings[i].Severity] < rank[r.Findings[j].Severity] })
	return r
}
