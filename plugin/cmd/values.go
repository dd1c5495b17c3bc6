package cmd

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
)

// The grammars of the values several commands share: -workloads, a --namespace list, a
// comma-separated list, a repeatable flag, a numeric minimum.

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

// listValue is a repeatable string flag.
type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }

func (l *listValue) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*l = append(*l, v)
	return nil
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
