// Package rpc is the go-plugin boundary: the handshake the Argo Rollouts controller expects,
// and an Adapter that implements argo-rollouts' step plugin interface (rolloutsrpc.StepPlugin)
// by calling our core's plugin.Step, with panics recovered so the plugin process never dies
// under the controller. The step plugin's arguments are parsed by plugin/cmd (StepPlugin).
//
// Four things are called "plugin" here: our core package (plugin), HashiCorp's go-plugin
// (goplugin), argo-rollouts' step plugin RPC interface (rolloutsrpc.StepPlugin) and the
// Adapter between the first and the third.
package rpc

import (
	"fmt"
	"runtime/debug"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	rolloutstypes "github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"

	"github.com/configmap-attacher/configmap-attacher/plugin"
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

// Adapter adapts plugin.Step to argo-rollouts' rolloutsrpc.StepPlugin interface.
type Adapter struct {
	Step *plugin.Step
	Log  logrus.FieldLogger
}

var _ rolloutsrpc.StepPlugin = (*Adapter)(nil)

// InitPlugin does nothing that can fail: the controller never calls it again after a failure
// and would keep sending Run to an uninitialised plugin. The client is built lazily in Run.
func (a *Adapter) InitPlugin() (rerr rolloutstypes.RpcError) {
	defer a.recover("InitPlugin", nil, &rerr)
	a.log().WithField("version", plugin.Version).Info("configmap-attacher step plugin initialised")
	return rolloutstypes.RpcError{}
}

// Run attaches the step's objects to the ReplicaSet being rolled out.
func (a *Adapter) Run(ro *v1alpha1.Rollout, sc *rolloutstypes.RpcStepContext) (res rolloutstypes.RpcStepResult, rerr rolloutstypes.RpcError) {
	defer a.recover("Run", ro, &rerr)
	return a.Step.Run(ro, sc)
}

// Terminate is called when the rollout is fully promoted while the step still runs.
func (a *Adapter) Terminate(ro *v1alpha1.Rollout, sc *rolloutstypes.RpcStepContext) (res rolloutstypes.RpcStepResult, rerr rolloutstypes.RpcError) {
	defer a.recover("Terminate", ro, &rerr)
	return a.Step.Terminate(ro, sc)
}

// Abort is called when the rollout is aborted.
func (a *Adapter) Abort(ro *v1alpha1.Rollout, sc *rolloutstypes.RpcStepContext) (res rolloutstypes.RpcStepResult, rerr rolloutstypes.RpcError) {
	defer a.recover("Abort", ro, &rerr)
	return a.Step.Abort(ro, sc)
}

// Type names the plugin; the controller never calls it for step plugins.
func (a *Adapter) Type() string { return "configmap-attacher" }

// log is the logger; an Adapter built without one must not turn a recovered panic into a
// second, fatal one inside recover.
func (a *Adapter) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

// recover turns a panic into an error result: the controller retries the step, and the
// process, shared by every Rollout, stays up.
func (a *Adapter) recover(op string, ro *v1alpha1.Rollout, rerr *rolloutstypes.RpcError) {
	r := recover()
	if r == nil {
		return
	}
	log := a.log().WithField("operation", op)
	if ro != nil {
		log = log.WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace})
	}
	log.WithField("stack", string(debug.Stack())).Errorf("panic: %v", r)
	*rerr = rolloutstypes.RpcError{ErrorString: fmt.Sprintf("configmap-attacher: internal error in %s: %v (please report it)", op, r)}
}

// PluginMap is what the plugin serves, under the key the controller dispenses.
func PluginMap(impl rolloutsrpc.StepPlugin) map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{PluginKey: &rolloutsrpc.RpcStepPlugin{Impl: impl}}
}

// Serve serves step through an Adapter (panics recovered and logged to log) until the
// controller stops the process. log must already write to the process's original standard
// error: go-plugin swaps os.Stderr for a pipe nobody reads once Serve starts. Its lines reach
// the controller's log, re-logged by go-plugin as "plugin.<binary>" lines; format them with
// LogFormatter so they keep their level.
func Serve(step *plugin.Step, log logrus.FieldLogger) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginMap(&Adapter{Step: step, Log: log}),
	})
}
