package cmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Version is `configmap-attacher version`.
type Version struct {
	Stdout, Stderr io.Writer
}

// versionOptions are one run of version: the command and its -o.
type versionOptions struct {
	*Version
	output string
}

const versionUsage = "Usage: configmap-attacher version [-o text|json|yaml]\n\nPrints the version (the Job's -version prints the same line).\n\nFlags:\n"

// FlagSet returns a fresh flag set with every flag of the command.
func (c *Version) FlagSet() *flag.FlagSet { return (&versionOptions{Version: c}).flags() }

// Main prints the version and returns the exit code.
func (c *Version) Main(args []string) int {
	cc := *c
	cc.Stdout, cc.Stderr = orDiscard(c.Stdout), orDiscard(c.Stderr)
	return execute(context.Background(), &versionOptions{Version: &cc}, args)
}

func (o *versionOptions) spec() spec {
	return spec{stdout: o.Stdout, stderr: o.Stderr, name: "configmap-attacher version", usage: versionUsage, fs: o.flags(), extras: outputShort}
}

func (o *versionOptions) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("configmap-attacher version", flag.ContinueOnError)
	fs.StringVar(&o.output, "output", "text", outputUsage)
	return fs
}

// versionInfo is version's document (-o json|yaml).
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// validate checks -o.
func (o *versionOptions) validate() []string { return outputProblems(o.output) }

// run prints the version. It makes no API call: ctx is unused.
func (o *versionOptions) run(context.Context) int {
	info := versionInfo{Version: plugin.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	switch o.output {
	case "json", "yaml":
		b, err := json.MarshalIndent(info, "", "  ")
		if err == nil && o.output == "yaml" {
			b, err = yaml.JSONToYAML(b)
		}
		if err != nil {
			fmt.Fprintf(o.Stderr, "configmap-attacher version: %v\n", err)
			return ExitFail
		}
		fmt.Fprintln(o.Stdout, string(b))
	default:
		fmt.Fprintln(o.Stdout, "configmap-attacher", plugin.Version)
	}
	return ExitOK
}
