// Package cmd holds the commands of the configmap-attacher binary: the Job (command line),
// audit, the controller and install-plugin (the step plugin's args are package stepplugin's).
// Each has the skeleton of command.go and package cli: options bound to flags → parse and
// validate (every problem at once, one selector flag type, one -workloads grammar) → run, with
// the same exit codes; the work itself is done by the core in package plugin and the mode
// packages beside it. main.go only dispatches to them.
package cmd
