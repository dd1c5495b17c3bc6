package cmd

import (
	"context"
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

// installOptions are one run of install-plugin: the command and its directory argument.
type installOptions struct {
	*Install
	args []string
	dir  string
}

// FlagSet returns the command's flag set, which has no flags (the directory is an argument);
// its usage writes to Stderr.
func (c *Install) FlagSet() *flag.FlagSet { return (&installOptions{Install: c}).flags() }

// Main runs install-plugin with the arguments after "install-plugin" and returns the
// process's exit code: 0 installed (or -help), 1 failed, 2 bad arguments.
func (c *Install) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &installOptions{Install: &cc}, args)
}

func (o *installOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher install-plugin", usage: installUsage, fs: o.flags(),
		args: func(rest []string) []string { o.args = rest; return nil }}
}

func (o *installOptions) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher install-plugin", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), installUsage) }
	return fs
}

// validate checks the positional arguments: exactly one, the directory.
func (o *installOptions) validate() []string {
	if len(o.args) != 1 || o.args[0] == "" {
		return []string{fmt.Sprintf("want exactly one argument, the directory to install into; got %q", o.args)}
	}
	o.dir = o.args[0]
	return nil
}

// run copies the step plugin into the directory. It makes no API call: ctx is unused.
func (o *installOptions) run(context.Context) int {
	in := o.Installer
	if in == nil {
		in = &install.Installer{}
	}
	r, err := in.Install(o.dir)
	if err != nil {
		fmt.Fprintf(o.Stderr, "configmap-attacher install-plugin: %v\n", err)
		return ExitFail
	}
	fmt.Fprintf(o.Stdout, "installed %s from %s (%d bytes, sha256 %s)\n", r.Path, r.Source, r.Size, r.SHA256)
	return ExitOK
}
