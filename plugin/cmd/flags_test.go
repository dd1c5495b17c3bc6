package cmd

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// cliCommands are the Job (the top level) and every command below it, as the root has them.
func cliCommands() []sub {
	return append([]sub{{use: "(job)", flags: (&Job{}).FlagSet, extras: nsShort}}, (&Root{}).subs()...)
}

// sampleValue finds a value the flag accepts and prints back unchanged, from its type: a
// generated table, so that a flag added later is covered without editing this test.
func sampleValue(t *testing.T, newFS func() *flag.FlagSet, name string) string {
	t.Helper()
	candidates := map[string][]string{"duration": {"7s"}, "int": {"7"}, "float": {"7.5"}, "bool": {"true"},
		"string": {"prod-1", "app=web", "ns-1/lease-1", "rollouts", "http://example.com:9/metrics"}}
	f := newFS().Lookup(name)
	for _, v := range candidates[goValue{f.Value}.Type()] {
		fs := newFS()
		if fs.Set(name, v) == nil && fs.Lookup(name).Value.String() == v {
			return v
		}
	}
	t.Fatalf("-%s: no sample value fits", name)
	return ""
}

// TestEveryFlagInEveryForm: every flag of every command, in each form the command line
// accepts (one dash or two, value as the next word or after =, the short form), sets that flag
// to that value and nothing else. The deployed manifests write -flag v and -flag=v; pflag alone
// would read "-namespace prod" as -n "amespace".
func TestEveryFlagInEveryForm(t *testing.T) {
	n := 0
	for _, c := range cliCommands() {
		pflags(c.flags(), c.extras).VisitAll(func(f *pflag.Flag) {
			if f.Name == helpFlag {
				return
			}
			canonical := f.Name
			if to, ok := c.extras.aliases[f.Name]; ok {
				canonical = to
			}
			for _, form := range flagForms(t, c.flags, f, canonical) {
				n++
				fs := c.flags()
				p := parseFlags(fs, c.extras, form.args)
				var set []string
				fs.Visit(func(g *flag.Flag) { set = append(set, g.Name) })
				got := fs.Lookup(canonical).Value.String()
				if len(p.problems) > 0 || len(p.args) > 0 || !slices.Equal(set, []string{canonical}) || got != form.want {
					t.Errorf("%s %q: -%s = %q (want %q), set %v, problems %q, arguments %q", c.use, form.args, canonical, got, form.want, set, p.problems, p.args)
				}
			}
		})
	}
	t.Logf("%d forms of %d commands", n, len(cliCommands()))
}

type flagForm struct {
	args []string
	want string
}

// flagForms are the ways to write one flag with a value, and the value each must set.
func flagForms(t *testing.T, newFS func() *flag.FlagSet, f *pflag.Flag, canonical string) []flagForm {
	names := []string{"-" + f.Name, "--" + f.Name}
	if f.Shorthand != "" {
		names = append(names, "-"+f.Shorthand)
	}
	var forms []flagForm
	for _, name := range names {
		if f.NoOptDefVal != "" { // a switch
			forms = append(forms, flagForm{[]string{name}, "true"}, flagForm{[]string{name + "=true"}, "true"}, flagForm{[]string{name + "=false"}, "false"})
			continue
		}
		v := sampleValue(t, newFS, canonical)
		forms = append(forms, flagForm{[]string{name, v}, v}, flagForm{[]string{name + "=" + v}, v})
	}
	return forms
}

// TestMisspeltLongFlagIsAnError: a single-dash word that is no flag is an error naming the
// closest flag; pflag would read it as short flags (-namspace: -n "amspace").
func TestMisspeltLongFlagIsAnError(t *testing.T) {
	for _, c := range cliCommands() {
		ps := pflags(c.flags(), c.extras)
		ps.VisitAll(func(f *pflag.Flag) {
			if len(f.Name) < 4 || f.Hidden {
				return
			}
			typo := f.Name[:1] + f.Name[2:] // the second letter dropped
			if ps.Lookup(typo) != nil {
				return
			}
			fs := c.flags()
			p := parseFlags(fs, c.extras, []string{"-" + typo, "x"})
			var set []string
			fs.Visit(func(g *flag.Flag) { set = append(set, g.Name) })
			if len(set) > 0 || len(p.problems) != 1 || !strings.Contains(p.problems[0], "unknown flag -"+typo+": did you mean") {
				t.Errorf("%s -%s x: set %v, problems %q", c.use, typo, set, p.problems)
			}
		})
	}
}

// The old name of -n/--namespace still works, with a notice.
func TestNamespacesAlias(t *testing.T) {
	for _, args := range [][]string{{"-namespaces", "a,b"}, {"-namespaces=a,b"}, {"--namespaces", "a,b"}} {
		fs := (&Doctor{}).FlagSet()
		p := parseFlags(fs, nsList, args)
		if got := fs.Lookup("namespace").Value.String(); got != "a,b" || len(p.problems) > 0 || len(p.deprecated) != 1 {
			t.Errorf("%q: -namespace %q, problems %q, notices %q", args, got, p.problems, p.deprecated)
		}
	}
}

// The top-level help lists every command with one line each; completion covers them.
func TestRootHelpAndCompletion(t *testing.T) {
	var out, errb bytes.Buffer
	r := &Root{Stdout: &out, Stderr: &errb}
	if code := r.Main([]string{"--help"}); code != ExitOK {
		t.Fatalf("--help: exit %d: %s", code, errb.String())
	}
	subs := r.subs()
	for _, s := range subs {
		name, _, _ := strings.Cut(s.use, " ")
		if !strings.Contains(out.String(), "\n  "+name+" ") {
			t.Errorf("--help lacks %s:\n%s", name, out.String())
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out.Reset()
		if code := r.Main([]string{"completion", shell}); code != ExitOK || !strings.Contains(out.String(), "configmap-attacher") {
			t.Errorf("completion %s: exit %d, %d bytes: %s", shell, code, out.Len(), errb.String())
		}
	}
	// The completion itself: the commands, and a command's flags.
	out.Reset()
	if code := r.Main([]string{"__complete", ""}); code != ExitOK {
		t.Fatalf("__complete: exit %d", code)
	}
	for _, s := range subs {
		name, _, _ := strings.Cut(s.use, " ")
		if !strings.Contains(out.String(), name+"\t") {
			t.Errorf("completion of the commands lacks %s:\n%s", name, out.String())
		}
	}
	out.Reset()
	if r.Main([]string{"__complete", "audit", "--nam"}); !strings.Contains(out.String(), "--namespace") {
		t.Errorf("completion of audit --nam:\n%s", out.String())
	}
}

// version and the Job's -version print the same line.
func TestVersion(t *testing.T) {
	var a, b, errb bytes.Buffer
	(&Root{Stdout: &a, Stderr: &errb}).Main([]string{"version"})
	(&Root{Stdout: &b, Stderr: &errb}).Main([]string{"-version"})
	if a.String() == "" || a.String() != b.String() || !strings.HasPrefix(a.String(), "configmap-attacher ") {
		t.Errorf("version %q, -version %q, stderr %q", a.String(), b.String(), errb.String())
	}
}
