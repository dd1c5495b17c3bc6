package cmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
)

// Every command has the same skeleton: options bound to a flag set, parse (every flag problem
// at once), complete and validate (every value problem at once), run. parseArgs does the
// first half for all of them, so a command differs only in its flags, its checks and its run.

// spec is what a command gives parseArgs.
type spec struct {
	// stdout gets the help that --help asks for (nil: stderr).
	stdout io.Writer
	// name prefixes each problem, e.g. "configmap-attacher audit".
	name string
	// usage is printed, then the flags, for --help (on stderr); a problem only points to
	// --help.
	usage string
	fs    *flag.FlagSet
	// extras are the short forms and old names of fs's flags on the command line.
	extras flagExtras
	// help prints the help instead of usage and the flags (the root's lists the commands).
	help func(io.Writer)
	// deprecated reports an old flag name used (nil: a line on stderr; the controller logs it).
	deprecated func(notice string)
	// validate completes the options after parsing and returns every problem (nil: none).
	validate func() []string
	// args takes the positional arguments (nil: a command without any refuses them).
	args func(rest []string) []string
}

// errHelp: -help was asked for; the usage has been printed (exit 0).
var errHelp = errors.New("help requested")

// parseArgs parses args into s.fs and validates them. Each problem is printed once on stderr
// as "<name>: <problem>", followed by a pointer to --help; the result is nil, errHelp, or an
// error that means ExitUsage.
func parseArgs(s spec, args []string, stderr io.Writer) error {
	p := parseFlags(s.fs, s.extras, args)
	if p.help {
		out := s.stdout
		if out == nil {
			out = stderr
		}
		s.printHelp(out)
		return errHelp
	}
	problems := p.problems
	switch {
	case s.args != nil:
		problems = append(problems, s.args(p.args)...)
	case len(p.args) > 0:
		problems = append(problems, fmt.Sprintf("unexpected argument %q: all input is given by flags", p.args[0]))
	}
	if s.validate != nil {
		problems = append(problems, s.validate()...)
	}
	if len(problems) == 0 {
		for _, d := range p.deprecated {
			if s.deprecated != nil {
				s.deprecated(d)
			} else {
				fmt.Fprintf(stderr, "%s: %s\n", s.name, d)
			}
		}
		return nil
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "%s: %s\n", s.name, p)
	}
	fmt.Fprintf(stderr, "Run %s --help for usage.\n", s.name)
	return errors.New(strings.Join(problems, "; "))
}

// printHelp prints the command's help: its usage text and its flags as the command line
// spells them.
func (s spec) printHelp(w io.Writer) {
	if s.help != nil {
		s.help(w)
		return
	}
	fmt.Fprint(w, s.usage)
	fmt.Fprint(w, pflags(s.fs, s.extras).FlagUsages())
}

// exitCode maps parseArgs' result to the exit of a command that stops there.
func exitCode(err error) int {
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	return ExitUsage
}

// workloadsFlag is the -workloads grammar of every command: a comma-separated list of
// rollouts and deployments (any case, singular accepted), each at most once.
type workloadsFlag struct {
	cli.Given
	kinds []string
	set   bool
}

func newWorkloads(def string) *workloadsFlag {
	f := &workloadsFlag{}
	if err := f.Set(def); err != nil {
		panic(err) // a default is a constant
	}
	f.set = false
	return f
}

func (f *workloadsFlag) Set(v string) error {
	kinds, problems := ParseWorkloads(v)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	f.Raw, f.kinds, f.set = v, kinds, true
	return nil
}

// Has reports whether kind (plugin.KindRollout, plugin.KindDeployment, "StatefulSet", ...) is
// named.
func (f *workloadsFlag) Has(kind string) bool {
	for _, k := range f.kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// workloadWords are the words of -workloads and the kinds they name.
var workloadWords = []struct{ word, kind string }{
	{"rollouts", plugin.KindRollout}, {"deployments", plugin.KindDeployment}, {"statefulsets", "StatefulSet"},
	{"daemonsets", "DaemonSet"}, {"jobs", "Job"}, {"cronjobs", "CronJob"}, {"pods", "Pod"},
}

// allWorkloads is every -workloads word: the controller's default.
const allWorkloads = "rollouts,deployments,statefulsets,daemonsets,jobs,cronjobs,pods"

// ParseWorkloads reads a -workloads value ("rollouts,deployments,statefulsets") into workload
// kinds (plugin.KindRollout, plugin.KindDeployment, "StatefulSet", "DaemonSet", "Job",
// "CronJob", "Pod"), reporting every unknown or repeated word.
func ParseWorkloads(v string) ([]string, []string) {
	var kinds, problems []string
	for _, w := range strings.Split(v, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		var kind string
		for _, ww := range workloadWords {
			if l := strings.ToLower(w); l == ww.word || l == strings.TrimSuffix(ww.word, "s") {
				kind = ww.kind
			}
		}
		if kind == "" {
			problems = append(problems, fmt.Sprintf("%q is not a workload kind: use any of %s", w, allWorkloads))
			continue
		}
		if contains(kinds, kind) {
			problems = append(problems, fmt.Sprintf("%q is listed twice", w))
			continue
		}
		kinds = append(kinds, kind)
	}
	if len(kinds) == 0 && len(problems) == 0 {
		problems = append(problems, "it names no workload kind: use any of "+allWorkloads)
	}
	return kinds, problems
}

// parseNamespaces reads a --namespace list (comma-separated) into namespace names, reporting
// every invalid or repeated name, and a value that names none; omit says what leaving the flag
// out means ("omit it to watch all").
func parseNamespaces(raw, omit string) (nss, problems []string) {
	seen := map[string]bool{}
	for _, ns := range splitList(raw) {
		switch {
		case len(validation.IsDNS1123Label(ns)) > 0:
			problems = append(problems, fmt.Sprintf("-n/--namespace: %q is not a valid namespace name", ns))
		case seen[ns]:
			problems = append(problems, fmt.Sprintf("-n/--namespace: %q is listed twice", ns))
		default:
			seen[ns] = true
			nss = append(nss, ns)
		}
	}
	if strings.TrimSpace(raw) != "" && len(nss) == 0 && len(problems) == 0 {
		problems = append(problems, "-n/--namespace names no namespace ("+omit+")")
	}
	return nss, problems
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// atLeast reports a numeric flag below its minimum.
func atLeast[T int | float64](flagName string, v, min T) []string {
	if v < min {
		return []string{fmt.Sprintf("%s %v: must be at least %v", flagName, v, min)}
	}
	return nil
}
