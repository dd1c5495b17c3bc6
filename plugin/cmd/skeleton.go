package cmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Every command has the same skeleton, and execute is the only way one runs:
//
//	options (the command's streams and clients, and its flags, bound to a flag set by spec)
//	→ validate() []string  (completes the options from the flags; every value problem at once)
//	→ run(ctx) int         (the work; the exit code)
//
// parseArgs does the parsing for all of them (every flag problem at once), so a command
// differs only in its flags, its checks and its run. Each command's exported Main builds its
// options and calls execute with the context the command runs under; tests call execute with
// their own context and the command's options.

// command is one invocation of a command: its options, validated, then run.
type command interface {
	// spec names the command and binds its flags to the options.
	spec() spec
	// validate completes the options from the parsed flags and returns every problem at once
	// (nil: none). It reads nothing but the options: no clients, no cluster.
	validate() []string
	// run does the command's work under ctx and returns the exit code.
	run(ctx context.Context) int
}

// execute runs c on args: parse and validate (exit 2 on any problem, 0 after --help), then run.
func execute(ctx context.Context, c command, args []string) int {
	s := c.spec()
	s.validate = c.validate
	if err := parseArgs(s, args); err != nil {
		return exitCode(err)
	}
	return c.run(ctx)
}

// spec is what a command gives parseArgs.
type spec struct {
	// stdout gets the help that --help asks for (nil: stderr); stderr gets the problems.
	stdout, stderr io.Writer
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
	// validate is the command's validate (execute sets it).
	validate func() []string
	// args takes the positional arguments (nil: a command without any refuses them).
	args func(rest []string) []string
}

// errHelp: -help was asked for; the usage has been printed (exit 0).
var errHelp = errors.New("help requested")

// parseArgs parses args into s.fs and validates them. Each problem is printed once on stderr
// as "<name>: <problem>", followed by a pointer to --help; the result is nil, errHelp, or an
// error that means ExitUsage.
func parseArgs(s spec, args []string) error {
	stderr := s.stderr
	if stderr == nil {
		stderr = io.Discard
	}
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

// orDiscard is w, or io.Discard for a stream the caller left nil. A command never falls back
// to the process's own streams: in plugin mode its standard output carries go-plugin's
// handshake, so only main.go names them.
func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
