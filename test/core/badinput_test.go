package core

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// TestBadInputWritesNothing: every bad step config and every bad command line gets a message
// naming the problem and the fix, and — checked against the apiserver — nothing is written.
func TestBadInputWritesNothing(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "cur111", realapi.PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	e.ConfigMap("static")
	e.Secret("sec")
	// kube-controller-manager's ReplicaSet controller writes the status of a new ReplicaSet
	// once: let it settle so the snapshot only sees our writes.
	e.WaitObserved(rs)
	before := e.Snapshot()
	s := realapi.NewStep(cfg)

	long := strings.Repeat("a", 254)
	steps := []struct{ name, config, want string }{
		{"malformed JSON", `{"configMaps": ["cfg"`, "not valid JSON"},
		{"list instead of object", `["cfg"]`, "must be an object"},
		{"string instead of object", `"cfg"`, "must be an object"},
		{"number instead of object", `42`, "must be an object"},
		{"null", `null`, "config is empty"},
		{"empty object", `{}`, "no objects listed"},
		{"empty lists", `{"configMaps":[],"secrets":[]}`, "no objects listed"},
		{"lower-case key", `{"configmaps":["cfg"]}`, `did you mean "configMaps"`},
		{"singular key", `{"secret":["sec"]}`, `did you mean "secrets"`},
		{"unknown key", `{"configMaps":["cfg"],"replicas":2}`, `unknown key "replicas"`},
		{"string for list", `{"configMaps":"cfg"}`, "configMaps: got a string, want a list of names"},
		{"object for list", `{"secrets":{"name":"sec"}}`, "secrets: got an object"},
		{"number in list", `{"configMaps":[1]}`, "configMaps[0]: got a number, want a name"},
		{"string for bool", `{"configMaps":["cfg"],"allowUnreferenced":"true"}`, "allowUnreferenced: got a string"},
		{"number for timeout", `{"configMaps":["cfg"],"timeout":60}`, `duration string such as "5m"`},
		{"bad duration", `{"configMaps":["cfg"],"timeout":"soon"}`, `"soon" is not a duration`},
		{"negative timeout", `{"configMaps":["cfg"],"timeout":"-5m"}`, "is too short"},
		{"empty name", `{"configMaps":[""]}`, "empty name"},
		{"invalid name", `{"configMaps":["Cfg_1"]}`, "is not a valid object name"},
		{"oversized name", `{"configMaps":["` + long + `"]}`, "must be no more than 253 characters"},
		{"namespace-qualified name", `{"configMaps":["` + e.NS + `/cfg"]}`, "namespace-qualified"},
		{"duplicate name", `{"configMaps":["cfg","cfg"]}`, "listed twice"},
		{"duplicate key", `{"configMaps":["cfg"],"configMaps":["static"]}`, "duplicate field"},
		{"oversized config", `{"configMaps":["` + strings.Repeat("a", plugin.MaxConfigBytes) + `"]}`, "list fewer objects per step"},
		{"empty discover selector", `{"discover":{"selector":{}}}`, "discover.selector is empty"},
		{"unreferenced object", `{"configMaps":["cfg","static"]}`, "allowUnreferenced: true"},
		{"missing object", `{"configMaps":["nope"],"allowUnreferenced":true}`, "not found in namespace"},
	}
	for _, tc := range steps {
		r := ro.DeepCopy()
		r.Status.CurrentPodHash = "cur111"
		r.Spec.Template = realapi.TemplateOf(t, e.Admin, ro.Namespace, ro.Spec.Selector, "cur111")
		res, rerr := s.Run(r, &types.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: json.RawMessage(tc.config)})
		if rerr.HasError() || res.Phase != types.PhaseFailed {
			t.Errorf("%s: phase %q err %v, want Failed", tc.name, res.Phase, rerr)
		} else if !strings.Contains(res.Message, tc.want) {
			t.Errorf("%s: message %q lacks %q", tc.name, res.Message, tc.want)
		}
	}

	kubeconfig := c.WriteKubeconfig(t, cfg)
	base := []string{"-rollout", "web", "-namespace", e.NS, "-kubeconfig", kubeconfig}
	clis := []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "-rollout is required"},
		{"flag without value", []string{"-configmaps"}, "flag needs an argument"},
		{"unknown flag", append(append([]string{}, base...), "-configmap", "cfg"), "unknown flag -configmap: did you mean --configmaps?"},
		{"nothing to attach", base, "nothing to attach"},
		{"invalid name", append(append([]string{}, base...), "-configmaps", "Cfg"), "is not a valid object name"},
		{"stray argument", append(append([]string{}, base...), "-configmaps", "cfg", "static"), `unexpected argument "static"`},
		{"bad timeout", append(append([]string{}, base...), "-configmaps", "cfg", "-timeout", "-1s"), "must be at least 1s"},
		{"selector without discover", append(append([]string{}, base...), "-configmaps", "cfg", "-selector", "a=b"), "only applies with -discover"},
	}
	for _, tc := range clis {
		var out, errb strings.Builder
		code := (&cmd.Job{Stdout: &out, Stderr: &errb}).Main(tc.args)
		if code != cmd.ExitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want 2 and %q", tc.name, code, errb.String(), tc.want)
		}
	}
	t.Logf("%d bad step configs and %d bad command lines", len(steps), len(clis))

	after := e.Snapshot()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: resourceVersion %s → %s", k, v, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects before %d, after %d", len(before), len(after))
	}
}
