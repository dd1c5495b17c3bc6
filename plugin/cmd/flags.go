package cmd

import (
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// The commands define their flags on a Go flag.FlagSet (names, defaults, values, usage: what
// the docs' tables, doctor's reading of a controller Deployment's args and the tests share),
// and pflag parses the command line: short forms (-n, -o, -A), --flag=value, flags after
// arguments. Every set goes through the Go flag set (FlagSet.Set), so Visit still reports what
// the command line set.
//
// pflag reads a single-dash word as short flags: "-namespace prod" would be -n "amespace",
// a silently wrong namespace. Every deployed manifest writes long flags with one dash (the
// Go flag package's syntax), so normalise rewrites each single-dash long flag the command
// knows to its double-dash form before pflag sees it, and refuses any other single-dash word
// longer than one letter: a misspelt long flag is an error naming the closest flag, never a
// cluster of short flags.

// flagExtras are what a command adds to its Go flag set on the command line.
type flagExtras struct {
	// short maps a flag's name to its one-letter form ("namespace": "n").
	short map[string]string
	// aliases maps an old name to the flag it now spells ("namespaces": "namespace"): it still
	// works, hidden from the help, with a notice on use.
	aliases map[string]string
}

// helpFlag is the pflag-only flag -h/--help (Go's flag package answers -help by itself).
const helpFlag = "help"

// pflags builds the command-line view of fs: each Go flag with its short form, each alias
// hidden, and -h/--help.
func pflags(fs *flag.FlagSet, x flagExtras) *pflag.FlagSet {
	ps := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	ps.SortFlags = true
	fs.VisitAll(func(f *flag.Flag) {
		pf := pflag.PFlagFromGoFlag(f)
		pf.Value = goValue{f.Value}
		pf.DefValue = f.DefValue
		if s, ok := x.short[f.Name]; ok {
			pf.Shorthand = s
		}
		ps.AddFlag(pf)
	})
	for _, alias := range sortedAliases(x.aliases) {
		to := ps.Lookup(x.aliases[alias])
		if to == nil {
			panic(fmt.Sprintf("alias -%s names no flag -%s", alias, x.aliases[alias])) // a programming error
		}
		ps.AddFlag(&pflag.Flag{Name: alias, Usage: "deprecated: use --" + to.Name, Value: to.Value, DefValue: to.DefValue,
			NoOptDefVal: to.NoOptDefVal, Hidden: true})
	}
	if ps.Lookup(helpFlag) == nil {
		short := "h"
		if ps.ShorthandLookup(short) != nil {
			short = ""
		}
		ps.BoolP(helpFlag, short, false, "help for "+fs.Name())
	}
	return ps
}

func sortedAliases(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// goValue shows a Go flag's value to pflag with a type name the help can print.
type goValue struct{ flag.Value }

// Type is what pflag's help prints as the value's placeholder.
func (v goValue) Type() string {
	switch v.Value.(type) {
	case interface{ IsBoolFlag() bool }:
		return "bool"
	}
	switch t := fmt.Sprintf("%T", v.Value); t {
	case "*flag.durationValue":
		return "duration"
	case "*flag.intValue":
		return "int"
	case "*flag.float64Value":
		return "float"
	}
	return "string"
}

// parsedFlags is the result of parseFlags.
type parsedFlags struct {
	// problems: each bad flag or value, in the order of the args.
	problems []string
	// deprecated: one notice per alias used.
	deprecated []string
	help       bool
	// args are the positional arguments.
	args []string
}

// parseFlags parses args into fs (through fs.Set) with pflag's syntax after normalising them.
// It goes on after a bad value, so that every problem is reported at once; a refused value
// leaves its flag as it was, so that validation does not report it again.
func parseFlags(fs *flag.FlagSet, x flagExtras, args []string) parsedFlags {
	ps := pflags(fs, x)
	norm, problems := normalise(ps, args)
	out := parsedFlags{problems: problems}
	err := ps.ParseAll(norm, func(f *pflag.Flag, value string) error {
		name := f.Name
		if f.Name == helpFlag && fs.Lookup(helpFlag) == nil {
			out.help = true
			return nil
		}
		if to, ok := x.aliases[name]; ok {
			out.deprecated = append(out.deprecated, fmt.Sprintf("-%s is deprecated: use --%s", name, to))
			name = to
		}
		before := fs.Lookup(name).Value.String()
		if err := fs.Set(name, value); err != nil {
			_ = fs.Lookup(name).Value.Set(before)
			out.problems = append(out.problems, fmt.Sprintf("-%s %q: %v", name, value, err))
		}
		return nil
	})
	if err != nil {
		// Only a flag without its value at the end of the args gets here: normalise has
		// taken out every unknown flag.
		out.problems = append(out.problems, err.Error())
	}
	out.args = ps.Args()
	return out
}

// normalise rewrites each single-dash long flag of ps ("-namespace", "-namespace=prod") to its
// double-dash form and leaves values, short flags and positional arguments as they are. It
// takes out each unknown flag and returns a problem naming the closest known one.
func normalise(ps *pflag.FlagSet, args []string) (out, problems []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...), problems
		}
		if len(a) < 2 || a[0] != '-' {
			out = append(out, a)
			continue
		}
		dashes := "-"
		body := a[1:]
		if strings.HasPrefix(body, "-") {
			dashes, body = "--", body[1:]
		}
		name, _, hasValue := strings.Cut(body, "=")
		f := ps.Lookup(name)
		if dashes == "-" && len(name) == 1 {
			f = ps.ShorthandLookup(name)
		}
		if f == nil {
			problems = append(problems, unknownFlag(ps, dashes+name))
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++ // its value, most likely: reported once, as the unknown flag
			}
			continue
		}
		if dashes == "-" && len(name) > 1 {
			a = "-" + a
		}
		out = append(out, a)
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i]) // the value, as it is even if it starts with a dash
		}
	}
	return out, problems
}

// unknownFlag words an unknown flag with the closest known one.
func unknownFlag(ps *pflag.FlagSet, given string) string {
	name := strings.TrimLeft(given, "-")
	best, bestD := "", -1
	ps.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := levenshtein(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if bestD < 0 || d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" && bestD <= max(2, len(name)/3) {
		hint := "--" + best
		if f := ps.Lookup(best); f.Shorthand != "" {
			hint = "-" + f.Shorthand + " or " + hint
		}
		return fmt.Sprintf("unknown flag %s: did you mean %s?", given, hint)
	}
	return fmt.Sprintf("unknown flag %s: see --help for the flags", given)
}

// levenshtein is the edit distance of a and b (bytes: flag names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// The short forms, as kubectl has them: -n/--namespace, -A/--all-namespaces, -o/--output.
var (
	// nsShort: the Job, whose one namespace is -n/--namespace.
	nsShort = flagExtras{short: map[string]string{"namespace": "n"}}
	// auditExtras: audit, of one namespace or all, with a report.
	auditExtras = flagExtras{short: map[string]string{"namespace": "n", "all-namespaces": "A", "output": "o"}}
	// nsList: the commands that take a list of namespaces (doctor, cleanup, the controller),
	// spelt -n/--namespace as the other commands spell it; their old name -namespaces still
	// works.
	nsList = flagExtras{short: map[string]string{"namespace": "n", "output": "o"}, aliases: map[string]string{"namespaces": "namespace"}}
	// outputShort: version.
	outputShort = flagExtras{short: map[string]string{"output": "o"}}
)
