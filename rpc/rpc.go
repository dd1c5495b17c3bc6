// Package rpc is the go-plugin boundary: the handshake the Argo Rollouts controller expects,
// the plugin map it dispenses from, and Serve. The step mode (plugin/step.Step) implements
// argo-rollouts' step plugin interface (rolloutsrpc.StepPlugin) itself, panics recovered, as
// argo-rollouts' own sample plugin does; the step plugin's arguments are parsed by plugin/cmd
// (StepPlugin).
//
// Three things are called "plugin" here: our core package (plugin), HashiCorp's go-plugin
// (goplugin) and argo-rollouts' step plugin RPC interface (rolloutsrpc.StepPlugin).
package rpc

import (
	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	goplugin "github.com/hashicorp/go-plugin"
)

// Handshake is the step plugin handshake of the Argo Rollouts controller
// (rollout/steps/plugin/client): protocol 1, ARGO_ROLLOUTS_RPC_PLUGIN=step.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
	MagicCookieValue: "step",
}

// PluginKey is the name the controller dispenses.
const PluginKey = "RpcStepPlugin"

// PluginMap is what the plugin serves, under the key the controller dispenses.
func PluginMap(impl rolloutsrpc.StepPlugin) map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{PluginKey: &rolloutsrpc.RpcStepPlugin{Impl: impl}}
}

// Serve serves impl until the controller stops the process. impl's logger must already write
// to the process's original standard error: go-plugin swaps os.Stderr for a pipe nobody reads
// once Serve starts. Its lines reach the controller's log, re-logged by go-plugin as
// "plugin.<binary>" lines; format them with LogFormatter so they keep their level.
func Serve(impl rolloutsrpc.StepPlugin) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginMap(impl),
	})
}
