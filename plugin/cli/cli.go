// Package cli is the flag skeleton every command shares, the step plugin's included: the
// exit codes, parsing that reports every bad flag at once (CollectParse), the label-selector
// flag, -kubeconfig and the log flags. It imports only the flag package, logrus and the core,
// so the step plugin's binary can use it without linking the other commands.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/bombsimon/logrusr/v4"
	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Exit codes shared by every command.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

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

// RouteKlog makes log the backend of klog, through which client-go logs on its own (leader
// election, reflectors' list and watch errors, the apiserver's warnings, throttling): its lines
// then have log's format and destination, so a JSON log pipeline gets no plain-text line and
// the step plugin writes nothing but its own stderr. klog keeps its verbosity (0), so client-go's
// V(n) chatter stays off; its errors arrive as errors, its infos at info level. Each line is
// marked logger=client-go. klog is process-wide: the last command to call this owns it.
func RouteKlog(log *logrus.Logger) {
	l := logrusr.New(log, logrusr.WithName("client-go"))
	klogTarget.Store(&l)
}

// klog's logger is set once, when the package is initialised (before any goroutine could log
// through klog: klog.SetLogger is not safe beside a klog call), to a sink that forwards to the
// logger RouteKlog named last, which an atomic swaps (several commands run in one test process).
// Until RouteKlog is called, lines go to logrus's standard logger.
var klogTarget atomic.Pointer[logr.Logger]

func init() { klog.SetLogger(logr.New(routedSink{})) }

// routedSink is the logr.LogSink klog writes to: each call goes to the current target, with
// the names and values given to this sink applied to it.
type routedSink struct {
	names []string
	kv    []any
}

func (s routedSink) target() logr.LogSink {
	l := klogTarget.Load()
	if l == nil {
		d := logrusr.New(logrus.StandardLogger(), logrusr.WithName("client-go"))
		l = &d
	}
	out := *l
	for _, n := range s.names {
		out = out.WithName(n)
	}
	if len(s.kv) > 0 {
		out = out.WithValues(s.kv...)
	}
	return out.GetSink()
}

func (routedSink) Init(logr.RuntimeInfo) {}

func (s routedSink) Enabled(level int) bool { return s.target().Enabled(level) }

func (s routedSink) Info(level int, msg string, kv ...any) { s.target().Info(level, msg, kv...) }

func (s routedSink) Error(err error, msg string, kv ...any) { s.target().Error(err, msg, kv...) }

func (s routedSink) WithValues(kv ...any) logr.LogSink {
	return routedSink{names: s.names, kv: append(slices.Clone(s.kv), kv...)}
}

func (s routedSink) WithName(name string) logr.LogSink {
	return routedSink{names: append(slices.Clone(s.names), name), kv: s.kv}
}

// KubeconfigFlag registers -kubeconfig, the same for every command that talks to the apiserver.
func KubeconfigFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "kubeconfig", "", "kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
}

// LogFlags registers -log-level and -log-format with the defaults of the long-running modes
// (audit, a report on stdout, has its own quieter -log-level and no -log-format).
func LogFlags(fs *flag.FlagSet, level, format *string) {
	fs.StringVar(level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(format, "log-format", "text", "log format: text or json")
}

// LoggerProblems configures log from -log-level and -log-format and returns their problems.
func LoggerProblems(log *logrus.Logger, level, format string) []string {
	var problems []string
	if err := ConfigureLogger(log, level, "text"); err != nil {
		problems = append(problems, err.Error())
	}
	if err := ConfigureLogger(log, "info", format); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) == 0 {
		_ = ConfigureLogger(log, level, format)
	}
	return problems
}

// CollectParse parses args, going on after each problem the flag package finds (in the order
// of the args), so that every bad flag is reported at once. A value the flag package rejects
// leaves the flag as it was, so that it is reported once, here, and not again by validate.
func CollectParse(fs *flag.FlagSet, args []string) (problems []string, help bool) {
	fs.SetOutput(io.Discard) // each problem once, by the caller
	fs.VisitAll(func(f *flag.Flag) { f.Value = keepOnError{f.Value} })
	rest := args
	for {
		err := fs.Parse(rest)
		if err == nil {
			return problems, help
		}
		if errors.Is(err, flag.ErrHelp) {
			help = true
		} else {
			problems = append(problems, flagProblem(err))
		}
		if next := fs.Args(); len(next) < len(rest) {
			rest = next
		} else {
			rest = rest[1:] // a bad flag syntax is not consumed by the flag package
		}
	}
}

// invalidValue is how the flag package words a value its Set refused.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for flag (-[^:]+): (.*)$`)

// flagProblem words a parse error as every other problem is worded: "-flag "value": why".
func flagProblem(err error) string {
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("%s %s: %s", m[2], m[1], m[3])
	}
	return err.Error()
}

// keepOnError is a flag.Value that keeps its value when Set fails.
type keepOnError struct{ flag.Value }

func (v keepOnError) Set(s string) error {
	before := v.String()
	err := v.Value.Set(s)
	if err != nil {
		_ = v.Value.Set(before)
	}
	return err
}

// IsBoolFlag keeps boolean flags usable without a value (-require-opt-in).
func (v keepOnError) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// SelectorFlag is every command's label-selector flag: it parses the value and refuses a
// selector that requires nothing an object must carry (plugin.Positive), with one wording.
type SelectorFlag struct {
	Given
	sel labels.Selector
}

// Given is a flag value as the user wrote it (its String, which -help shows as the default).
type Given struct{ Raw string }

func (g Given) String() string { return g.Raw }

// NewSelector is a selector flag with a default ("" for none).
func NewSelector(def string) *SelectorFlag {
	f := &SelectorFlag{}
	if def != "" {
		if err := f.Set(def); err != nil {
			panic(err) // a default is a constant
		}
	}
	return f
}

func (f *SelectorFlag) Set(v string) error {
	sel, err := labels.Parse(v)
	if err != nil {
		return err
	}
	if !plugin.Positive(sel) {
		return errors.New(plugin.NotPositive)
	}
	f.Raw, f.sel = v, sel
	return nil
}

// Selector is the parsed selector (nil when the flag has no value).
func (f *SelectorFlag) Selector() labels.Selector { return f.sel }

// LeasesFlag is -controller-lease: NAMESPACE/NAME of a controller's leader Lease, repeatable
// (a split install runs one controller per set of namespaces). Its default is
// plugin.DefaultControllerLeases; the first value given replaces it, and "none" looks for no
// controller.
type LeasesFlag struct {
	refs []plugin.LeaseRef
	set  bool
}

// NewLeases is -controller-lease with its default.
func NewLeases() *LeasesFlag {
	return &LeasesFlag{refs: append([]plugin.LeaseRef(nil), plugin.DefaultControllerLeases...)}
}

func (f *LeasesFlag) String() string {
	if f == nil {
		return ""
	}
	if f.set && len(f.refs) == 0 {
		return "none"
	}
	names := make([]string, len(f.refs))
	for i, r := range f.refs {
		names[i] = r.String()
	}
	return strings.Join(names, ",")
}

func (f *LeasesFlag) Set(v string) error {
	if !f.set {
		f.refs, f.set = nil, true
	}
	if strings.TrimSpace(v) == "none" {
		return nil
	}
	r, err := plugin.ParseLeaseRef(v)
	if err != nil {
		return err
	}
	if !slices.Contains(f.refs, r) {
		f.refs = append(f.refs, r)
	}
	return nil
}

// Leases are the Leases to read (none after "none"; a nil flag: the default).
func (f *LeasesFlag) Leases() []plugin.LeaseRef {
	if f == nil {
		return append([]plugin.LeaseRef(nil), plugin.DefaultControllerLeases...)
	}
	return f.refs
}

// LeasesUsage is -controller-lease's help.
const LeasesUsage = "NAMESPACE/NAME of the controller mode's leader Lease, repeatable (\"none\": no controller): config that other workloads share is attached only where a live controller maintains it"
