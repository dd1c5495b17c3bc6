package cluster

import (
	"os/exec"
	"testing"

	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// RolloutsHandshake is the handshake of the Argo Rollouts controller's step-plugin client
// (argo-rollouts rollout/steps/plugin/client/client.go, v1.10.2), written out rather than taken
// from rpc.Handshake so that a drift in rpc.Handshake makes the tests fail.
var RolloutsHandshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
	MagicCookieValue: "step",
}

// RolloutsStepPluginKey is the key the controller dispenses a step plugin by.
const RolloutsStepPluginKey = "RpcStepPlugin"

// StepPluginClientConfig is the Argo Rollouts controller's go-plugin client configuration for
// a step plugin (rollout/steps/plugin/client): RolloutsHandshake, the plugin map
// {RpcStepPlugin: an RpcStepPlugin without Impl}, Managed. A nil Logger is go-plugin's
// default, as the controller's; a caller may add client-side sinks (Stderr, Logger) that do
// not change what the plugin process sees.
func StepPluginClientConfig(cmd *exec.Cmd) *goplugin.ClientConfig {
	return &goplugin.ClientConfig{
		HandshakeConfig: RolloutsHandshake,
		Plugins:         map[string]goplugin.Plugin{RolloutsStepPluginKey: &rolloutsrpc.RpcStepPlugin{}},
		Cmd:             cmd,
		Managed:         true,
	}
}

// StartStepPlugin starts cmd (the built binary with its arguments) exactly as the Argo Rollouts
// controller starts a step plugin (StepPluginClientConfig) and dispenses the StepPlugin the
// controller calls. The process is killed when t ends.
func StartStepPlugin(t testing.TB, cmd *exec.Cmd, logger hclog.Logger) (*goplugin.Client, rolloutsrpc.StepPlugin) {
	t.Helper()
	cfg := StepPluginClientConfig(cmd)
	cfg.Logger = logger
	return DispenseStepPlugin(t, cfg)
}

// DispenseStepPlugin starts the plugin of cfg, pings it and dispenses the StepPlugin. The
// process is killed when t ends.
func DispenseStepPlugin(t testing.TB, cfg *goplugin.ClientConfig) (*goplugin.Client, rolloutsrpc.StepPlugin) {
	t.Helper()
	c := goplugin.NewClient(cfg)
	t.Cleanup(c.Kill)
	proto, err := c.Client()
	if err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	if err := proto.Ping(); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	raw, err := proto.Dispense(RolloutsStepPluginKey)
	if err != nil {
		t.Fatalf("Dispense(%q): %v", RolloutsStepPluginKey, err)
	}
	p, ok := raw.(rolloutsrpc.StepPlugin)
	if !ok {
		t.Fatalf("dispensed %T, not a rolloutsrpc.StepPlugin", raw)
	}
	return c, p
}
