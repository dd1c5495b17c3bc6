package cmd

import (
	"flag"
	"fmt"
	"io"

	"github.com/configmap-attacher/configmap-attacher/plugin/install"
)

// installUsage is printed for -help and bad arguments.
const installUsage = `usage: configmap-attacher install-plugin DIR

Copies the step plugin to DIR/` + install.Name + ` (atomically, mode 0755) and exits 0: the step plugin
alone (` + install.StepName + `, beside this executable in the image), else this executable. Run it as an
initContainer of the Argo Rollouts controller with DIR on a volume (an emptyDir) that the
controller container also mounts, and register the plugin in argo-rollouts-config with
  location: file://<the controller's mount path>/` + install.Name + `
`

// Install is `configmap-attacher install-plugin DIR`: it has no flags, only the directory.
type Install struct {
	Stdout, Stderr io.Writer
	// Installer does the copy (nil: the running executable, install.Installer{}).
	Installer *install.Installer
}

// FlagSet returns the command's flag set, which has no flags (the directory is an argument);
// its usage writes to Stderr.
func (c *Install) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher install-plugin", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), installUsage) }
	return fs
}

// validate checks the positional arguments: exactly one, the directory.
func (c *Install) validate(args []string) []string {
	if len(args) != 1 || args[0] == "" {
		return []string{fmt.Sprintf("want exactly one argument, the directory to install into; got %q", args)}
	}
	return nil
}

// Main runs install-plugin with the arguments after "install-plugin" and returns the
// process's exit code: 0 installed (or -help), 1 failed, 2 bad arguments.
func (c *Install) Main(args []string) int {
	fs := c.FlagSet()
	var dir string
	validate := func(rest []string) []string {
		if p := c.validate(rest); p != nil {
			return p
		}
		dir = rest[0]
		return nil
	}
	if err := parseArgs(spec{stdout: c.Stdout, name: "configmap-attacher install-plugin", usage: installUsage, fs: fs, args: validate}, args, c.Stderr); err != nil {
		return exitCode(err)
	}
	in := c.Installer
	if in == nil {
		in = &install.Installer{}
	}
	r, err := in.Install(dir)
	if err != nil {
		fmt.Fprintf(c.Stderr, "configmap-attacher install-plugin: %v\n", err)
		return ExitFail
	}
	fmt.Fprintf(c.Stdout, "installed %s from %s (%d bytes, sha256 %s)\n", r.Path, r.Source, r.Size, r.SHA256)
	return ExitOK
}
