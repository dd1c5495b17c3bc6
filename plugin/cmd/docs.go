package cmd

import (
	"flag"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd/stepplugin"
)

// DocCommand is a command whose flag table the documentation carries between
// <!-- flags:NAME --> and <!-- /flags:NAME --> (hack/docs renders it from the flag set, and
// its test fails make test when a table drifts).
type DocCommand struct {
	Name string
	// Prefix is how the docs write a flag: "-" (the command line), "--" (the step plugin's
	// args in argo-rollouts-config are written --name).
	Prefix  string
	FlagSet func() *flag.FlagSet
}

// DocCommands are the commands with a flag table, in the order main.go dispatches them.
func DocCommands() []DocCommand {
	return []DocCommand{
		{"job", "-", (&Job{}).FlagSet},
		{"audit", "-", (&Audit{}).FlagSet},
		{"doctor", "-", (&Doctor{}).FlagSet},
		{"controller", "-", (&Controller{}).FlagSet},
		{"cleanup", "-", (&Cleanup{}).FlagSet},
		{"install-plugin", "-", (&Install{}).FlagSet},
		{"step-plugin", "--", (&stepplugin.Command{}).FlagSet},
	}
}
