// Command configmap-attacher-step is the step plugin alone: the binary the Argo Rollouts
// controller runs for every canary step of configmap-attacher, for its whole life, in its own
// pod. It is the full binary's step plugin (stepplugin.Command, the same code, args and
// messages) without the other modes, so that it links what the step uses and nothing else:
// no typed clientset, no controller, no audit, no Prometheus. The image ships it beside the
// full binary as /configmap-attacher-step, and `configmap-attacher install-plugin DIR` copies it
// to DIR/configmap-attacher, the name argo-rollouts-config points to.
//
// Started by anything but the Rollouts controller (ARGO_ROLLOUTS_RPC_PLUGIN unset), it says so
// and exits 2.
package main

import (
	"fmt"
	"os"

	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd/stepplugin"
	"github.com/configmap-attacher/configmap-attacher/rpc"
)

func main() {
	if os.Getenv(rpc.Handshake.MagicCookieKey) == "" {
		fmt.Fprintf(os.Stderr, "configmap-attacher-step is the step plugin alone: the Argo Rollouts controller starts it "+
			"(%s is not set). Register it in argo-rollouts-config (stepPlugins) and use the configmap-attacher binary for "+
			"the other modes.\n", rpc.Handshake.MagicCookieKey)
		os.Exit(cli.ExitUsage)
	}
	os.Exit((&stepplugin.Command{Stderr: os.Stderr}).Main(os.Args[1:]))
}
