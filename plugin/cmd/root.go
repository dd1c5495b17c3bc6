package cmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Root is the configmap-attacher command line: the Job's flags at the top level (the original
// tool's interface), the commands below it, `version` and `completion bash|zsh|fish`.
//
// cobra dispatches, prints the top-level help and generates the shell completion, from the
// same flag sets; each command parses its own flags (parseArgs: normalised, then pflag, every
// problem at once), so that a command run by itself in a test parses as it does here.
type Root struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Clients builds every command's clients (tests inject fakes).
	Clients Clients
}

// rootLong is the top-level help's introduction.
const rootLong = `configmap-attacher makes revisioned ConfigMaps and Secrets dependents of the objects that use
them (ReplicaSets, ControllerRevisions, Jobs, Pods), so that the garbage collector deletes them
when the last user is gone.

Without a command it is the Job: it waits until the Argo Rollouts controller has created the
ReplicaSet of the Rollout's current pod template, then adds it as an owner of each listed
ConfigMap and Secret:
  configmap-attacher -n NS --rollout NAME [--configmaps a,b] [--secrets c,d] [flags]

Long flags take one dash or two (-namespace prod, --namespace=prod); short flags one (-n prod).`

// exitStatus carries a command's exit code through cobra.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Command builds the cobra command tree.
func (r *Root) Command() *cobra.Command {
	root := &cobra.Command{
		Use:                "configmap-attacher",
		Short:              "Make revisioned ConfigMaps and Secrets dependents of their users",
		Long:               rootLong,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		SilenceErrors:      true,
		SilenceUsage:       true,
		// cobra suggests a command within this edit distance of a misspelt one.
		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(r.Stdout)
	root.SetErr(r.Stderr)
	job := &Job{Stdout: r.Stdout, Stderr: r.Stderr, Getenv: r.Getenv, Clients: r.Clients, help: func(w io.Writer) {
		root.SetOut(w)
		_ = root.Help()
	}}
	job.suggest = root.SuggestionsFor
	root.RunE = run(job.Main)
	root.Flags().AddFlagSet(pflags(job.FlagSet(), nsShort))
	for _, c := range r.commands() {
		root.AddCommand(c)
	}
	return root
}

// sub is one command below the root.
type sub struct {
	use, short string
	flags      func() *flag.FlagSet
	extras     flagExtras
	main       func([]string) int
}

// subs are the commands below the root, in the order the help lists them.
func (r *Root) subs() []sub {
	return []sub{
		{"controller", "Watch workloads and attach opted-in ConfigMaps and Secrets to every user (the Deployment's mode)",
			(&Controller{}).FlagSet, nsList, (&Controller{Stdout: r.Stdout, Stderr: r.Stderr, Getenv: r.Getenv, Clients: r.Clients}).Main},
		{"audit", "Report, per Rollout and Deployment, the config in use and what is lost, unowned or stray; --fix attaches",
			(&Audit{}).FlagSet, auditExtras, (&Audit{Stdout: r.Stdout, Stderr: r.Stderr, Clients: r.Clients}).Main},
		{"doctor", "Check, read-only, that the step plugin, the controller or the Job is set up to work",
			(&Doctor{}).FlagSet, nsList, (&Doctor{Stdout: r.Stdout, Stderr: r.Stderr, Clients: r.Clients}).Main},
		{"cleanup", "Delete the controller's anchors when it is uninstalled",
			(&Cleanup{}).FlagSet, nsList, (&Cleanup{Stdout: r.Stdout, Stderr: r.Stderr, Clients: r.Clients}).Main},
		{"install-plugin DIR", "Copy the step plugin into DIR (an initContainer of the Argo Rollouts controller)",
			(&Install{}).FlagSet, flagExtras{}, (&Install{Stdout: r.Stdout, Stderr: r.Stderr}).Main},
		{"version", "Print the version",
			(&Version{}).FlagSet, outputShort, (&Version{Stdout: r.Stdout, Stderr: r.Stderr}).Main},
	}
}

// name is the command's name (its use without the arguments).
func (s sub) name() string {
	n, _, _ := strings.Cut(s.use, " ")
	return n
}

func (r *Root) commands() []*cobra.Command {
	subs := r.subs()
	out := make([]*cobra.Command, 0, len(subs))
	for _, s := range subs {
		c := &cobra.Command{Use: s.use, Short: s.short, Args: cobra.ArbitraryArgs, DisableFlagParsing: true,
			SilenceErrors: true, SilenceUsage: true, RunE: run(s.main)}
		// The flags are there for the help and the completion; the command parses them itself.
		c.Flags().AddFlagSet(pflags(s.flags(), s.extras))
		out = append(out, c)
	}
	return out
}

// run adapts a command's Main to cobra.
func run(main func([]string) int) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		if code := main(args); code != ExitOK {
			return exitStatus(code)
		}
		return nil
	}
}

// Main runs the command line and returns the process's exit code.
func (r *Root) Main(args []string) int {
	root := r.Command()
	root.SetArgs(args)
	err := root.Execute()
	var code exitStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	default:
		// cobra's own: an unknown command after `help`, a bad `completion` shell.
		fmt.Fprintf(r.Stderr, "configmap-attacher: %v\n", err)
		return ExitUsage
	}
}
