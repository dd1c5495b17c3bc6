// Package cmd holds the command line of the configmap-attacher binary: the Job at the top
// level and the commands controller, audit, doctor, cleanup, install-plugin, version and
// completion (the step plugin's args are package stepplugin's, below it).
//
// One file a command: job.go, controller.go, audit.go, doctor.go, cleanup.go, installplugin.go,
// version.go; root.go is the command tree (cobra: dispatch, the top-level help, completion).
// Every command has the skeleton of skeleton.go: an options struct (the command's streams and
// clients, and its flags) → validate() []string (every problem at once) → run(ctx) int, run by
// execute, with the exit codes of exitcodes.go. flags.go parses the command line (the
// single-dash long flags normalised, then pflag), values.go holds the value grammars the
// commands share (-workloads, a namespace list), clients.go the one place every command's
// clients are built (Clients, the seam for fakes), output.go the reports' -o, docs.go the flag
// tables the docs render. The work itself is done by the core (package plugin) and the mode
// packages beside it; main.go only picks the step plugin or Root.
package cmd
