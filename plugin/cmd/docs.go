package cmd

import (
	"flag"

	"github.com/spf13/pflag"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd/stepplugin"
)

// DocCommand is a command whose flag table the documentation carries between
// <!-- flags:NAME --> and <!-- /flags:NAME --> (hack/docs renders it from the flag set, and
// its test fails make test when a table drifts).
type DocCommand struct {
	Name string
	// Prefix is how the docs write a flag of FlagSet: "--" (the step plugin's args in
	// argo-rollouts-config are written --name).
	Prefix  string
	FlagSet func() *flag.FlagSet
	// Flags is the command line's view (short forms, -h/--help, old names hidden); nil for the
	// step plugin, whose args the Argo Rollouts controller passes.
	Flags func() *pflag.FlagSet
}

// DocCommands are the commands with a flag table: the Job (the top level), the commands in
// the order of the help, then the step plugin.
func DocCommands() []DocCommand {
	out := []DocCommand{docCommand("job", (&Job{}).FlagSet, nsShort)}
	for _, s := range (&Root{}).subs() {
		out = append(out, docCommand(s.name(), s.flags, s.extras))
	}
	return append(out, DocCommand{Name: "step-plugin", Prefix: "--", FlagSet: (&stepplugin.Command{}).FlagSet})
}

func docCommand(name string, fs func() *flag.FlagSet, x flagExtras) DocCommand {
	return DocCommand{Name: name, Prefix: "--", FlagSet: fs, Flags: func() *pflag.FlagSet { return pflags(fs(), x) }}
}
