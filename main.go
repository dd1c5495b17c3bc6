// Command configmap-attacher makes revisioned ConfigMaps and Secrets dependents of the Argo
// Rollouts ReplicaSets that use them, so the garbage collector keeps them exactly as long as
// a ReplicaSet in the Rollout's history needs them.
//
// Started by the Argo Rollouts controller (ARGO_ROLLOUTS_RPC_PLUGIN is set) it serves the
// step plugin; `configmap-attacher audit ...` audits Rollouts (see plugin.AuditCLI);
// `configmap-attacher controller ...` runs the watcher (see plugin/controller); otherwise it
// is the command-line (Job) mode.
package main

import (
	"os"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
	"github.com/configmap-attacher/configmap-attacher/plugin/install"
	"github.com/configmap-attacher/configmap-attacher/rpc"
)

func main() {
	if os.Getenv(rpc.Handshake.MagicCookieKey) != "" {
		os.Exit(rpc.Serve(os.Args[1:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "install-plugin" {
		os.Exit(install.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "controller" {
		os.Exit(controller.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		os.Exit((&plugin.AuditCLI{Stdout: os.Stdout, Stderr: os.Stderr}).Main(os.Args[2:]))
	}
	cli := &plugin.CLI{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(cli.Main(os.Args[1:]))
}
