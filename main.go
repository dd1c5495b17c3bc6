// Command configmap-attacher makes revisioned ConfigMaps and Secrets dependents of the Argo
// Rollouts ReplicaSets that use them, so the garbage collector keeps them exactly as long as
// a ReplicaSet in the Rollout's history needs them.
//
// Started by the Argo Rollouts controller (ARGO_ROLLOUTS_RPC_PLUGIN is set) it serves the
// step plugin; `configmap-attacher audit ...` audits Rollouts (see cmd.Audit);
// `configmap-attacher controller ...` runs the watcher; `configmap-attacher doctor ...` checks a
// setup, read-only; `configmap-attacher cleanup ...` deletes the controller's anchors when it
// is uninstalled; `configmap-attacher install-plugin DIR`
// copies itself into DIR; otherwise it is the command-line (Job) mode. The commands are in
// plugin/cmd.
package main

import (
	"os"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd/stepplugin"
	"github.com/configmap-attacher/configmap-attacher/rpc"
)

func main() {
	if os.Getenv(rpc.Handshake.MagicCookieKey) != "" {
		os.Exit((&stepplugin.Command{Stderr: os.Stderr}).Main(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "install-plugin" {
		os.Exit((&cmd.Install{Stdout: os.Stdout, Stderr: os.Stderr}).Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "controller" {
		os.Exit((&cmd.Controller{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}).Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		os.Exit((&cmd.Audit{Stdout: os.Stdout, Stderr: os.Stderr}).Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "cleanup" {
		os.Exit((&cmd.Cleanup{Stdout: os.Stdout, Stderr: os.Stderr}).Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "doctor" {
		os.Exit((&cmd.Doctor{Stdout: os.Stdout, Stderr: os.Stderr}).Main(os.Args[2:]))
	}
	os.Exit((&cmd.Job{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}).Main(os.Args[1:]))
}
