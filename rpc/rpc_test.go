package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"

	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/step"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/rpc"
)

// The Rollout under test and the objects its current ReplicaSet uses.
const (
	testNS        = "shop"
	roName        = "web"
	roUID         = k8stypes.UID("0b7c5f6e-1111-4a1a-9c1e-000000000001")
	podHash       = "7f9c2d5b8"
	rsName        = roName + "-" + podHash
	rsUID         = k8stypes.UID("0b7c5f6e-2222-4a1a-9c1e-000000000002")
	cmName        = "web-config-7f9c2"
	secretName    = "web-env-b41d0"
	otherOwnerUID = k8stypes.UID("0b7c5f6e-3333-4a1a-9c1e-000000000003")
	pluginName    = "configmap-attacher/attach"
	wantMessage   = "attached 1 ConfigMap and 1 Secret to ReplicaSet " + rsName
)

var stepConfig = json.RawMessage(`{"configMaps":["` + cmName + `"],"secrets":["` + secretName + `"]}`)

func testRollout() *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: roName, Namespace: testNS, UID: roUID},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: v1alpha1.RolloutStatus{CurrentPodHash: podHash},
	}
}

func stepContext(config json.RawMessage) *types.RpcStepContext {
	return &types.RpcStepContext{PluginName: pluginName, Config: config}
}

func testReplicaSet() *appsv1.ReplicaSet {
	yes := true
	return &appsv1.ReplicaSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: rsName, Namespace: testNS, UID: rsUID,
			Labels: map[string]string{"app": "web", plugin.PodTemplateHashLabel: podHash},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: roName, UID: roUID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", plugin.PodTemplateHashLabel: podHash}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", plugin.PodTemplateHashLabel: podHash}},
				Spec: corev1.PodSpec{
					Volumes: []corev1.Volume{{
						Name: "config",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: cmName},
						}},
					}},
					Containers: []corev1.Container{{
						Name: "web", Image: "nginx",
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}},
						EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: secretName},
						}}},
					}},
				},
			},
		},
	}
}

// otherOwner is an owner the ConfigMap already has; the patch must keep it.
func otherOwner() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "bundle", UID: otherOwnerUID}
}

func testConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: cmName, Namespace: testNS, ResourceVersion: "10",
			OwnerReferences: []metav1.OwnerReference{otherOwner()},
		},
		Data: map[string]string{"nginx.conf": "worker_processes 1;"},
	}
}

func testSecret() *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: testNS, ResourceVersion: "11"},
		Data:       map[string][]byte{"TOKEN": []byte("s3cr3t")},
	}
}

func seededClientset() *fake.Clientset {
	return fake.NewClientset(testReplicaSet(), testConfigMap(), testSecret())
}

// wantOwnerRef is the reference the plugin must add.
func wantOwnerRef() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rsName, UID: rsUID}
}

func testLogger(w io.Writer) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.DebugLevel)
	return l.WithField("plugin", "configmap-attacher")
}

func clientOf(c kubernetes.Interface) plugin.ClientFunc {
	return func() (plugin.Clients, error) {
		return plugin.Clients{Kube: clientset.Typed(c), Meta: fakemeta.New(c)}, nil
	}
}

// serve starts the plugin server in-process exactly as rpc.Serve configures it (rpc.Handshake,
// rpc.PluginMap) in go-plugin's test mode, connects a client configured like the controller's
// (its plugin map, RpcStepPlugin with no Impl), and dispenses the StepPlugin the controller
// would call. Cleanup stops the server and waits for it.
func serve(t *testing.T, impl rolloutsrpc.StepPlugin) (rolloutsrpc.StepPlugin, goplugin.ClientProtocol) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reattach := make(chan *goplugin.ReattachConfig, 1)
	closed := make(chan struct{})
	go goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: rpc.Handshake,
		Plugins:         rpc.PluginMap(impl),
		Test:            &goplugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed},
	})
	t.Cleanup(func() {
		cancel()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("plugin server did not stop within 5s")
		}
	})

	var cfg *goplugin.ReattachConfig
	select {
	case cfg = <-reattach:
	case <-time.After(5 * time.Second):
		t.Fatal("plugin server sent no reattach config within 5s")
	}
	c := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: cluster.RolloutsHandshake,
		Plugins:         map[string]goplugin.Plugin{"RpcStepPlugin": &rolloutsrpc.RpcStepPlugin{}},
		Reattach:        cfg,
		Logger:          hclog.NewNullLogger(),
	})
	proto, err := c.Client()
	if err != nil {
		t.Fatalf("connecting to the plugin server: %v", err)
	}
	raw, err := proto.Dispense(rpc.PluginKey)
	if err != nil {
		t.Fatalf("Dispense(%q): %v", rpc.PluginKey, err)
	}
	p, ok := raw.(rolloutsrpc.StepPlugin)
	if !ok {
		t.Fatalf("dispensed %T, not a rolloutsrpc.StepPlugin", raw)
	}
	return p, proto
}

func ownerRefByUID(refs []metav1.OwnerReference, uid k8stypes.UID) (metav1.OwnerReference, int) {
	n := 0
	var found metav1.OwnerReference
	for _, r := range refs {
		if r.UID == uid {
			found = r
			n++
		}
	}
	return found, n
}

// checkAttached asserts that the object carries exactly the expected owner references.
func checkAttached(t *testing.T, kind string, refs []metav1.OwnerReference, others ...metav1.OwnerReference) {
	t.Helper()
	got, n := ownerRefByUID(refs, rsUID)
	if n != 1 {
		t.Errorf("%s has %d owner references to ReplicaSet uid %s, want 1: %+v", kind, n, rsUID, refs)
		return
	}
	if !apiequality.Semantic.DeepEqual(got, wantOwnerRef()) {
		t.Errorf("%s owner reference = %s, want %s", kind, mustJSON(t, got), mustJSON(t, wantOwnerRef()))
	}
	for _, o := range others {
		if got, n := ownerRefByUID(refs, o.UID); n != 1 || !apiequality.Semantic.DeepEqual(got, o) {
			t.Errorf("%s lost or changed its existing owner %s: %+v", kind, mustJSON(t, o), refs)
		}
	}
	if want := 1 + len(others); len(refs) != want {
		t.Errorf("%s has %d owner references, want %d: %+v", kind, len(refs), want, refs)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func getObjects(t *testing.T, c kubernetes.Interface) (*corev1.ConfigMap, *corev1.Secret) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(testNS).Get(context.Background(), cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := c.CoreV1().Secrets(testNS).Get(context.Background(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm, sec
}

func TestRPCRoundTrip(t *testing.T) {
	kube := seededClientset()
	var logs cluster.SyncBuffer
	st := &step.Step{Client: clientOf(kube), Log: testLogger(&logs)}
	p, _ := serve(t, st)

	if err := p.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	if got, want := p.Type(), "configmap-attacher"; got != want {
		t.Errorf("Type() = %q, want %q", got, want)
	}

	t.Run("Run attaches", func(t *testing.T) {
		res, rerr := p.Run(testRollout(), stepContext(stepConfig))
		if rerr.HasError() {
			t.Fatalf("Run: RpcError %q; plugin log:\n%s", rerr.ErrorString, logs.String())
		}
		if res.Phase != types.PhaseSuccessful {
			t.Fatalf("Run phase = %q (message %q), want %q", res.Phase, res.Message, types.PhaseSuccessful)
		}
		if res.Message != wantMessage {
			t.Errorf("Run message = %q, want %q", res.Message, wantMessage)
		}
		if res.RequeueAfter != 0 {
			t.Errorf("Run RequeueAfter = %s, want 0 for a finished step", res.RequeueAfter)
		}

		// The Status must cross gob byte for byte: compare with what the same Step returns
		// in-process against identical objects.
		direct, derr := (&step.Step{Client: clientOf(seededClientset()), Log: testLogger(io.Discard)}).Run(testRollout(), stepContext(stepConfig))
		if derr.HasError() {
			t.Fatalf("direct Run: %v", derr)
		}
		if !bytes.Equal(res.Status, direct.Status) {
			t.Errorf("Status over RPC = %s, in-process = %s", res.Status, direct.Status)
		}
		// And it is the JSON object the CRD requires, naming what was attached.
		if !bytes.HasPrefix(bytes.TrimSpace(res.Status), []byte("{")) {
			t.Fatalf("Status %s is not a JSON object", res.Status)
		}
		var st step.Status
		if err := json.Unmarshal(res.Status, &st); err != nil {
			t.Fatalf("Status %s: %v", res.Status, err)
		}
		want := step.Status{ReplicaSet: rsName, ReplicaSetUID: string(rsUID), ConfigMaps: []string{cmName}, Secrets: []string{secretName}}
		if mustJSON(t, st) != mustJSON(t, want) {
			t.Errorf("Status = %s, want %s", mustJSON(t, st), mustJSON(t, want))
		}

		cm, sec := getObjects(t, kube)
		checkAttached(t, "ConfigMap", cm.OwnerReferences, otherOwner())
		checkAttached(t, "Secret", sec.OwnerReferences)
		if got, want := cm.Data, testConfigMap().Data; !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("ConfigMap data changed: %v, want %v", got, want)
		}
		if got, want := sec.Data, testSecret().Data; !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("Secret data changed: %v", got)
		}
	})

	t.Run("Run again and concurrently is idempotent", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		results := make([]types.RpcStepResult, n)
		errs := make([]types.RpcError, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = p.Run(testRollout(), stepContext(stepConfig))
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i].HasError() || results[i].Phase != types.PhaseSuccessful || results[i].Message != wantMessage {
				t.Errorf("call %d: phase %q message %q error %q", i, results[i].Phase, results[i].Message, errs[i].ErrorString)
			}
		}
		cm, sec := getObjects(t, kube)
		checkAttached(t, "ConfigMap", cm.OwnerReferences, otherOwner())
		checkAttached(t, "Secret", sec.OwnerReferences)
	})

	t.Run("Run with a bad config fails and writes nothing", func(t *testing.T) {
		before := len(kube.Actions())
		res, rerr := p.Run(testRollout(), stepContext(json.RawMessage(`{"configmaps":["`+cmName+`"]}`)))
		if rerr.HasError() {
			t.Fatalf("bad config must be a Failed result, not an RpcError (which the controller retries forever): %q", rerr.ErrorString)
		}
		if res.Phase != types.PhaseFailed {
			t.Errorf("phase = %q, want %q", res.Phase, types.PhaseFailed)
		}
		for _, want := range []string{`"configmaps"`, `"configMaps"`} {
			if !strings.Contains(res.Message, want) {
				t.Errorf("message %q does not name %s", res.Message, want)
			}
		}
		if len(res.Status) != 0 && !bytes.HasPrefix(res.Status, []byte("{")) {
			t.Errorf("Status %s is neither empty nor a JSON object", res.Status)
		}
		if after := kube.Actions(); len(after) != before {
			t.Errorf("bad config made %d API calls: %v", len(after)-before, after[before:])
		}
	})

	for _, op := range []struct {
		name string
		call func(*v1alpha1.Rollout, *types.RpcStepContext) (types.RpcStepResult, types.RpcError)
	}{{"Abort", p.Abort}, {"Terminate", p.Terminate}} {
		t.Run(op.name+" changes nothing", func(t *testing.T) {
			cmBefore, secBefore := getObjects(t, kube)
			before := len(kube.Actions())
			sc := stepContext(stepConfig)
			sc.Status = json.RawMessage(`{"replicaSet":"` + rsName + `"}`)
			res, rerr := op.call(testRollout(), sc)
			if rerr.HasError() {
				t.Fatalf("%s: RpcError %q", op.name, rerr.ErrorString)
			}
			if res.Phase != types.PhaseSuccessful {
				t.Errorf("%s phase = %q, want %q", op.name, res.Phase, types.PhaseSuccessful)
			}
			if res.Message == "" {
				t.Errorf("%s returned no message", op.name)
			}
			if after := kube.Actions(); len(after) != before {
				t.Errorf("%s made %d API calls: %v", op.name, len(after)-before, after[before:])
			}
			cm, sec := getObjects(t, kube)
			if !apiequality.Semantic.DeepEqual(cm, cmBefore) || !apiequality.Semantic.DeepEqual(sec, secBefore) {
				t.Errorf("%s changed the objects", op.name)
			}
		})
	}
}

// TestRPCStatusRoundTrip checks the Status the controller stores travels back in the next
// call: a step waiting for its ReplicaSet keeps its start time and times out from it.
func TestRPCStatusRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var now atomic.Pointer[time.Time]
	now.Store(&t0)
	sp := &step.Step{
		Client: clientOf(seededClientset()),
		Log:    testLogger(io.Discard),
		Now:    func() time.Time { return *now.Load() },
	}
	p, _ := serve(t, sp)

	ro := testRollout()
	ro.Status.CurrentPodHash = "5d6f7a8b9" // the controller has not created this ReplicaSet yet
	cfg := json.RawMessage(`{"configMaps":["` + cmName + `"],"timeout":"1m"}`)

	res, rerr := p.Run(ro, stepContext(cfg))
	if rerr.HasError() || res.Phase != types.PhaseRunning {
		t.Fatalf("first Run: phase %q message %q error %q, want Running", res.Phase, res.Message, rerr.ErrorString)
	}
	if res.RequeueAfter != step.RequeueAfter || res.RequeueAfter <= 10*time.Second {
		t.Errorf("RequeueAfter = %s, want %s (> the controller's 10s floor)", res.RequeueAfter, step.RequeueAfter)
	}
	var st step.Status
	if err := json.Unmarshal(res.Status, &st); err != nil || st.WaitingSince == nil || !st.WaitingSince.Time.Equal(t0) {
		t.Fatalf("first Status = %s (%v), want waitingSince %s", res.Status, err, t0.Format(time.RFC3339))
	}

	// 30s later, with the stored Status: still waiting, same start.
	t1 := t0.Add(30 * time.Second)
	now.Store(&t1)
	sc := stepContext(cfg)
	sc.Status = res.Status
	res2, rerr := p.Run(ro, sc)
	if rerr.HasError() || res2.Phase != types.PhaseRunning {
		t.Fatalf("second Run: phase %q message %q error %q, want Running", res2.Phase, res2.Message, rerr.ErrorString)
	}
	if !bytes.Equal(res2.Status, res.Status) {
		t.Errorf("second Status = %s, want the first one back %s", res2.Status, res.Status)
	}

	// Past the timeout, counted from the start carried in the Status.
	t2 := t0.Add(2 * time.Minute)
	now.Store(&t2)
	sc.Status = res2.Status
	res3, rerr := p.Run(ro, sc)
	if rerr.HasError() || res3.Phase != types.PhaseFailed {
		t.Fatalf("third Run: phase %q message %q error %q, want Failed", res3.Phase, res3.Message, rerr.ErrorString)
	}
	if !strings.Contains(res3.Message, "timed out after 2m0s") {
		t.Errorf("message %q does not say it timed out after 2m0s (the wait start must come from the Status)", res3.Message)
	}
}

func TestRPCPanicIsAnErrorAndServerSurvives(t *testing.T) {
	kube := seededClientset()
	var calls atomic.Int32
	var logs cluster.SyncBuffer
	st := &step.Step{
		Client: func() (plugin.Clients, error) {
			if calls.Add(1) == 1 {
				var m map[string]int
				m["boom"]++ //nolint:staticcheck // SA5000: a real nil-map panic, not a panic(string), is the point
			}
			return plugin.Clients{Kube: clientset.Typed(kube), Meta: fakemeta.New(kube)}, nil
		},
		Log: testLogger(&logs),
	}
	p, _ := serve(t, st)

	res, rerr := p.Run(testRollout(), stepContext(stepConfig))
	if !rerr.HasError() {
		t.Fatalf("Run with a panicking client: no RpcError (phase %q, message %q)", res.Phase, res.Message)
	}
	for _, want := range []string{"internal error", "Run", "assignment to entry in nil map"} {
		if !strings.Contains(rerr.ErrorString, want) {
			t.Errorf("RpcError %q does not mention %q", rerr.ErrorString, want)
		}
	}
	if res.Phase == types.PhaseFailed || res.Phase == types.PhaseSuccessful {
		t.Errorf("phase = %q alongside an error", res.Phase)
	}
	if l := logs.String(); !strings.Contains(l, "panic") || !strings.Contains(l, "goroutine") || !strings.Contains(l, "rollout=web") {
		t.Errorf("panic not logged with its stack and rollout:\n%s", l)
	}

	// Same server, later calls: it is still there and works.
	if got := p.Type(); got != "configmap-attacher" {
		t.Errorf("Type() after the panic = %q", got)
	}
	if err := p.InitPlugin(); err.HasError() {
		t.Errorf("InitPlugin after the panic: %v", err)
	}
	res, rerr = p.Run(testRollout(), stepContext(stepConfig))
	if rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run after the panic: phase %q message %q error %q", res.Phase, res.Message, rerr.ErrorString)
	}
	cm, _ := getObjects(t, kube)
	checkAttached(t, "ConfigMap", cm.OwnerReferences, otherOwner())
}

func TestRPCPanicWithoutLogger(t *testing.T) {
	// A StepPlugin built without a logger must still recover (and not panic again in recover).
	st := &step.Step{Client: func() (plugin.Clients, error) { panic("no client") }, Log: testLogger(io.Discard)}
	p, _ := serve(t, st)
	logrus.SetOutput(io.Discard)
	t.Cleanup(func() { logrus.SetOutput(logrusDefaultOut) })
	if err := p.InitPlugin(); err.HasError() {
		t.Errorf("InitPlugin: %v", err)
	}
	_, rerr := p.Run(testRollout(), stepContext(stepConfig))
	if !strings.Contains(rerr.ErrorString, "internal error") || !strings.Contains(rerr.ErrorString, "no client") {
		t.Errorf("RpcError = %q, want an internal error naming the panic", rerr.ErrorString)
	}
}

var logrusDefaultOut = logrus.StandardLogger().Out

func TestRPCClientErrorIsRetriable(t *testing.T) {
	st := &step.Step{
		Client: func() (plugin.Clients, error) {
			return plugin.Clients{}, errors.New("no configuration has been provided")
		},
		Log: testLogger(io.Discard),
	}
	p, _ := serve(t, st)
	res, rerr := p.Run(testRollout(), stepContext(stepConfig))
	if !rerr.HasError() {
		t.Fatalf("Run without a client: no RpcError (phase %q, message %q); want an error the controller retries", res.Phase, res.Message)
	}
	if !strings.Contains(rerr.ErrorString, "no configuration has been provided") {
		t.Errorf("RpcError %q does not carry the cause", rerr.ErrorString)
	}
	if res.Phase == types.PhaseFailed {
		t.Errorf("phase Failed would abort the rollout on a transient client problem")
	}
}

func TestRPCClosedConnection(t *testing.T) {
	st := &step.Step{Client: clientOf(seededClientset()), Log: testLogger(io.Discard)}
	p, proto := serve(t, st)
	if err := p.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	if err := proto.Close(); err != nil {
		t.Fatalf("closing the client: %v", err)
	}

	check := func(op string, rerr types.RpcError) {
		t.Helper()
		if !rerr.HasError() || !strings.Contains(rerr.ErrorString, op+" rpc call error") {
			t.Errorf("%s after close: RpcError %q, want %q", op, rerr.ErrorString, op+" rpc call error: …")
		}
	}
	check("InitPlugin", p.InitPlugin())
	_, rerr := p.Run(testRollout(), stepContext(stepConfig))
	check("Run", rerr)
	_, rerr = p.Terminate(testRollout(), stepContext(stepConfig))
	check("Terminate", rerr)
	_, rerr = p.Abort(testRollout(), stepContext(stepConfig))
	check("Abort", rerr)
	if got := p.Type(); !strings.HasPrefix(got, "Type rpc call error") {
		t.Errorf("Type after close = %q", got)
	}
}

// TestPluginMap pins the key the controller dispenses and that the served plugin is the
// rollouts RpcStepPlugin wrapping our implementation.
func TestPluginMap(t *testing.T) {
	impl := &step.Step{}
	m := rpc.PluginMap(impl)
	if len(m) != 1 {
		t.Fatalf("PluginMap has %d entries, want 1", len(m))
	}
	sp, ok := m["RpcStepPlugin"].(*rolloutsrpc.RpcStepPlugin)
	if !ok {
		t.Fatalf(`PluginMap()["RpcStepPlugin"] = %T, want *rolloutsrpc.RpcStepPlugin`, m["RpcStepPlugin"])
	}
	if sp.Impl != rolloutsrpc.StepPlugin(impl) {
		t.Errorf("PluginMap does not serve the given implementation")
	}
	if rpc.Handshake != cluster.RolloutsHandshake {
		t.Errorf("rpc.Handshake = %+v, the controller uses %+v", rpc.Handshake, cluster.RolloutsHandshake)
	}
}

// Compile-time: the adapter is what the controller calls.
