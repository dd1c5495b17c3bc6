// Command configmap-attacher makes revisioned ConfigMaps and Secrets dependents of the objects
// that use them, so the garbage collector keeps them exactly as long as a user needs them.
//
// Started by the Argo Rollouts controller (ARGO_ROLLOUTS_RPC_PLUGIN is set) it serves the
// step plugin, with the plugin's own args; otherwise it is the command line of cmd.Root:
// `controller`, `audit`, `doctor`, `cleanup`, `install-plugin DIR`, `version`, `completion`,
// and without a command the original tool's Job. The commands are in plugin/cmd.
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
	os.Exit((&cmd.Root{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}).Main(os.Args[1:]))
}
