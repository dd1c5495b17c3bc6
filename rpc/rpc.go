// Package rpc is the go-plugin boundary: the handshake the Argo Rollouts controller expects,
// and a rollouts StepPlugin that turns every call into a call of the plugin package, with
// panics recovered so the plugin process never dies under the controller.
package rpc

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"

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

// StepPlugin adapts plugin.Step to the rollouts StepPlugin interface.
type StepPlugin struct {
	Step *plugin.Step
	Log  logrus.FieldLogger
}

var _ rolloutsrpc.StepPlugin = (*StepPlugin)(nil)

// InitPlugin does nothing that can fail: the controller never calls it again after a failure
// and would keep sending Run to an uninitialised plugin. The client is built lazily in Run.
func (p *StepPlugin) InitPlugin() (rerr types.RpcError) {
	defer p.recover("InitPlugin", nil, &rerr)
	p.log().WithField("version", plugin.Version).Info("configmap-attacher step plugin initialised")
	return types.RpcError{}
}

// Run attaches the step's objects to the ReplicaSet being rolled out.
func (p *StepPlugin) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer p.recover("Run", ro, &rerr)
	return p.Step.Run(ro, sc)
}

// Terminate is called when the rollout is fully promoted while the step still runs.
func (p *StepPlugin) Terminate(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer p.recover("Terminate", ro, &rerr)
	return p.Step.Terminate(ro, sc)
}

// Abort is called when the rollout is aborted.
func (p *StepPlugin) Abort(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer p.recover("Abort", ro, &rerr)
	return p.Step.Abort(ro, sc)
}

// Type names the plugin; the controller never calls it for step plugins.
func (p *StepPlugin) Type() string { return "configmap-attacher" }

// log is the logger; a StepPlugin built without one must not turn a recovered panic into a
// second, fatal one inside recover.
func (p *StepPlugin) log() logrus.FieldLogger {
	if p.Log == nil {
		return logrus.StandardLogger()
	}
	return p.Log
}

// recover turns a panic into an error result: the controller retries the step, and the
// process, shared by every Rollout, stays up.
func (p *StepPlugin) recover(op string, ro *v1alpha1.Rollout, rerr *types.RpcError) {
	r := recover()
	if r == nil {
		return
	}
	log := p.log().WithField("operation", op)
	if ro != nil {
		log = log.WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace})
	}
	log.WithField("stack", string(debug.Stack())).Errorf("panic: %v", r)
	*rerr = types.RpcError{ErrorString: fmt.Sprintf("configmap-attacher: internal error in %s: %v (please report it)", op, r)}
}

// PluginMap is what the plugin serves, under the key the controller dispenses.
func PluginMap(impl rolloutsrpc.StepPlugin) map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{PluginKey: &rolloutsrpc.RpcStepPlugin{Impl: impl}}
}

// Options are the plugin's args in argo-rollouts-config (stepPlugins[].args).
type Options struct {
	Client      plugin.ClientOptions
	LogLevel    string
	LogFormat   string
	Concurrency int
	// Policy is --require-opt-in and --opt-in-selector. Plugin args live in
	// argo-rollouts-config, which only cluster administrators change, so a Rollout's author
	// cannot turn the policy off.
	Policy plugin.Policy
}

// ParseArgs reads the plugin's args, e.g. ["--log-level", "debug", "--require-opt-in"]. It
// reports every problem at once, in flag order.
func ParseArgs(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("configmap-attacher (step plugin)", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Client.Kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	qps := fs.Float64("qps", plugin.DefaultQPS, "client-side queries per second to the apiserver")
	fs.IntVar(&o.Client.Burst, "burst", plugin.DefaultBurst, "client-side burst of requests to the apiserver")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "patches in flight per step")
	fs.BoolVar(&o.Policy.RequireOptIn, "require-opt-in", false, "write owner references only on objects that match --opt-in-selector: listed objects that do not fail the step, discovery adopts only matching ones")
	optIn := fs.String("opt-in-selector", plugin.DefaultDiscoverLabel+"=true", "label selector of opted-in objects")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("plugin args in argo-rollouts-config: %w", err)
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"--qps", *qps}, {"--burst", float64(o.Client.Burst)}, {"--concurrency", float64(o.Concurrency)}} {
		if p.v <= 0 {
			problems = append(problems, fmt.Sprintf("%s %v: must be positive", p.name, p.v))
		}
	}
	if sel, err := labels.Parse(*optIn); err != nil {
		problems = append(problems, fmt.Sprintf("--opt-in-selector %q: %v", *optIn, err))
	} else if !plugin.Positive(sel) {
		problems = append(problems, fmt.Sprintf("--opt-in-selector %q %s", *optIn, plugin.NotPositive))
	} else {
		o.Policy.OptIn = sel
	}
	if len(problems) > 0 {
		return o, fmt.Errorf("plugin args in argo-rollouts-config: %s", strings.Join(problems, "; "))
	}
	o.Client.QPS = float32(*qps)
	return o, nil
}

// Serve runs the plugin server until the controller stops it. stderr must be the process's
// original standard error: go-plugin swaps os.Stderr for a pipe nobody reads once Serve
// starts, so the logger is bound to the real file first. Its lines reach the controller's
// log, re-logged by go-plugin as "plugin.<binary>" lines.
func Serve(args []string, stderr io.Writer) int {
	log := logrus.New()
	log.SetOutput(stderr)
	o, err := ParseArgs(args, stderr)
	if err == nil {
		err = plugin.ConfigureLogger(log, o.LogLevel, o.LogFormat)
	}
	if err != nil {
		log.Errorf("plugin args in argo-rollouts-config: %v", err)
		return 2
	}
	log.SetFormatter(pluginFormatter(o.LogFormat))
	entry := log.WithField("plugin", "configmap-attacher")
	client := plugin.LazyClient(o.Client)
	// Events are sent in the background: a step's latency does not include them.
	events := plugin.NewAsyncEvents(&plugin.APIEvents{Client: client, Log: entry}, 64, entry)
	step := &plugin.Step{Client: client, Log: entry, Concurrency: o.Concurrency, Events: events, Policy: o.Policy}
	entry.WithFields(logrus.Fields{"requireOptIn": o.Policy.RequireOptIn, "optInSelector": o.Policy.OptIn.String()}).Info("policy")
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginMap(&StepPlugin{Step: step, Log: entry}),
	})
	return 0
}
