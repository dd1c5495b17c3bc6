package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/step"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	steptypes "github.com/argoproj/argo-rollouts/utils/plugin/types"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// The four modes — the step, the Job, the controller and audit -fix — find their candidates
// differently but write through one core (plugin.Attacher.Reconcile): on the same namespace
// they must write the same owner references. TestFourModes runs each fixture through all four
// and compares what each wrote ("Kind/name ← ReplicaSet UIDs", from the patches sent).
//
// The namespace of every row: Rollout shop/web, whose current ReplicaSet web-cur uses ConfigMap
// cfg (opted in) and Secret pull (an image pull secret, not opted in), and Deployment shop/api,
// whose ReplicaSet api-1 uses cfg. The step config and the Job's flags list cfg (and, in row d,
// pull); the Rollout's canary steps carry the same config, so that audit sees the same names.

const (
	modesCurHash = "cur"
	modesUIDCur  = types.UID("uid-web-cur")
	modesUIDAPI  = types.UID("uid-api-1")
	modesUIDOld  = types.UID("uid-web-orphan")
)

// modesRow is one fixture.
type modesRow struct {
	name string
	// statefulSet: StatefulSet cache also uses cfg (a user that cannot own it).
	statefulSet bool
	// orphan: ReplicaSet web-orphan, controlled by an earlier Rollout web (another UID, gone),
	// also uses cfg.
	orphan bool
	// listPull: the step config and -secrets name the image pull secret too.
	listPull bool
	// apiOwn: Deployment api uses a ConfigMap of its own, not cfg (cfg is the Rollout's alone).
	apiOwn bool
	// live: the controller's leader Lease is held and renewed (a live controller maintains cfg).
	live bool
	// want is what the step and the Job write; wantAudit what audit -fix writes, and
	// wantController what the controller writes (it maintains every user), where they differ.
	want, wantAudit, wantController []string
}

// world is one row's objects.
type modesWorld struct {
	kube     []runtime.Object
	rollout  *v1alpha1.Rollout
	stepConf string
	secrets  []string
}

func modesSpec(configMaps []string, pullSecret string) corev1.PodSpec {
	s := fixtures.PodSpec(configMaps, nil)
	if pullSecret != "" {
		s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pullSecret}}
	}
	return s
}

func (r modesRow) world() modesWorld {
	t := true
	cur := fixtures.ReplicaSet(modesCurHash, modesUIDCur, fixtures.RolloutUID, modesSpec([]string{"cfg"}, "pull"))
	cur.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: fixtures.Namespace, UID: "uid-api"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}}, Spec: modesSpec([]string{"cfg"}, "")}}}
	apiCfg := "cfg"
	if r.apiOwn {
		apiCfg = "api-cfg"
	}
	api := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: fixtures.Namespace, UID: modesUIDAPI,
		CreationTimestamp: metav1.NewTime(time.Unix(1000, 0)),
		Labels:            map[string]string{"app": "api", "pod-template-hash": "1"},
		Annotations:       map[string]string{plugin.DeploymentRevisionAnnotation: "1"},
		OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-api", Controller: &t}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api", "pod-template-hash": "1"}}, Spec: modesSpec([]string{apiCfg}, "")}}}
	dep.Spec.Template.Spec = modesSpec([]string{apiCfg}, "")
	cfg := fixtures.ConfigMap("cfg")
	cfg.UID = "uid-cfg"
	cfg.Labels[plugin.OptInLabel] = "true"
	pull := fixtures.Secret("pull")
	pull.UID = "uid-pull"
	w := modesWorld{kube: []runtime.Object{cur, dep, api, cfg, pull}}
	if r.live {
		holder, dur, renew := "cma-0", int32(15), metav1.NewMicroTime(time.Now())
		w.kube = append(w.kube, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher", Namespace: "configmap-attacher",
			Labels:      map[string]string{plugin.ControllerLeaseLabel: "true"},
			Annotations: plugin.ScopeAnnotations(nil, plugin.OptInSelector(), []string{"rollouts", "deployments"})},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}})
	}
	if r.statefulSet {
		w.kube = append(w.kube, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: fixtures.Namespace, UID: "uid-cache"},
			Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: modesSpec([]string{"cfg"}, "")}}})
	}
	if r.orphan {
		old := fixtures.ReplicaSet("orphan", modesUIDOld, "uid-rollout-deleted-long-ago", modesSpec([]string{"cfg"}, ""))
		old.CreationTimestamp = metav1.NewTime(time.Unix(500, 0))
		w.kube = append(w.kube, old)
	}
	w.stepConf = `{"configMaps":["cfg"]}`
	if r.listPull {
		w.stepConf = `{"configMaps":["cfg"],"secrets":["pull"]}`
		w.secrets = []string{"pull"}
	}
	ro := fixtures.Rollout(modesCurHash)
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
		{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: json.RawMessage(w.stepConf)}}}}
	w.rollout = ro
	return w
}

// written returns "Kind/name ← UID,UID" for every object an owner-reference patch among
// actions made a ReplicaSet's dependent: the ReplicaSets' UIDs of all its patches. (The
// controller also writes the owners of other users, anchors included: tested in
// plugin/controller and test/controllermode.)
func written(t *testing.T, actions []k8stesting.Action) []string {
	t.Helper()
	byObject := map[string]map[string]bool{}
	for _, a := range actions {
		p, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		kind := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret"}[p.GetResource().Resource]
		if kind == "" {
			continue
		}
		var body struct {
			Metadata struct {
				OwnerReferences []struct {
					Kind string    `json:"kind"`
					UID  types.UID `json:"uid"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatalf("patch %s: %v", p.GetPatch(), err)
		}
		key := kind + "/" + p.GetName()
		for _, r := range body.Metadata.OwnerReferences {
			if r.Kind != "ReplicaSet" {
				continue
			}
			if byObject[key] == nil {
				byObject[key] = map[string]bool{}
			}
			byObject[key][string(r.UID)] = true
		}
	}
	var out []string
	for key, set := range byObject {
		uids := make([]string, 0, len(set))
		for uid := range set {
			uids = append(uids, uid)
		}
		sort.Strings(uids)
		out = append(out, fmt.Sprintf("%s ← %s", key, strings.Join(uids, ",")))
	}
	sort.Strings(out)
	return out
}

func modesLog(t *testing.T) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(testLogWriter{t})
	l.SetLevel(logrus.InfoLevel)
	return l
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runStep is the step plugin's Run on the row's namespace.
func runStep(t *testing.T, w modesWorld) []string {
	kube := fake.NewClientset(w.kube...)
	ro := rolloutsfake.NewSimpleClientset(w.rollout)
	cl := plugin.Clients{Kube: clientset.Typed(kube), Meta: fakemeta.WithRollouts(kube, ro)}
	s := &step.Step{Client: func() (plugin.Clients, error) { return cl, nil }, Log: modesLog(t), ControllerLeases: plugin.DefaultControllerLeases}
	res, rpcErr := s.Run(w.rollout, &steptypes.RpcStepContext{PluginName: "configmap-attacher/configmap-attacher", Config: json.RawMessage(w.stepConf)})
	t.Logf("step: phase %s: %s %s", res.Phase, res.Message, rpcErr.ErrorString)
	if rpcErr.ErrorString != "" || res.Phase == steptypes.PhaseRunning {
		t.Errorf("step: not a verdict: phase %q error %q", res.Phase, rpcErr.ErrorString)
	}
	return written(t, kube.Actions())
}

// runJobMode is the command-line (Job) mode, by its flags.
func runJobMode(t *testing.T, w modesWorld) []string {
	kube := fake.NewClientset(w.kube...)
	ro := rolloutsfake.NewSimpleClientset(w.rollout)
	args := []string{"-rollout", "web", "-namespace", fixtures.Namespace, "-configmaps", "cfg", "-timeout", "5s"}
	if len(w.secrets) > 0 {
		args = append(args, "-secrets", strings.Join(w.secrets, ","))
	}
	code, out, errb := runJob(t, kube, ro, args...)
	t.Logf("job: exit %d: %s%s", code, out, errb)
	if code == ExitUsage {
		t.Errorf("job: usage error: %s", errb)
	}
	return written(t, kube.Actions())
}

// runAuditFix is `configmap-attacher audit -namespace shop -fix`.
func runAuditFix(t *testing.T, w modesWorld) []string {
	kube := fake.NewClientset(w.kube...)
	ro := rolloutsfake.NewSimpleClientset(w.rollout)
	code, out, errb := runAuditCmd(t, kube, ro, "-namespace", fixtures.Namespace, "-fix")
	t.Logf("audit -fix: exit %d:\n%s%s", code, out, errb)
	if code == ExitUsage {
		t.Errorf("audit: usage error: %s", errb)
	}
	return written(t, kube.Actions())
}

// runController runs the controller on the row's namespace until every object was reconciled
// and the queue is idle. Its caches read workloads' and objects' metadata through a metadata
// fake, the ReplicaSets and the pod templates that cannot own through a typed fake.
func runController(t *testing.T, w modesWorld) []string {
	var typed []runtime.Object
	sch := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	partial := func(apiVersion, kind string, m metav1.ObjectMeta) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, ObjectMeta: m}
	}
	metas := []runtime.Object{partial("argoproj.io/v1alpha1", "Rollout", w.rollout.ObjectMeta)}
	// The full reconcile at start queues every opted-in object: each is reconciled at least once.
	optedIn := 0
	for _, o := range w.kube {
		if m, ok := o.(metav1.Object); ok && plugin.OptInSelector().Matches(labels.Set(m.GetLabels())) {
			optedIn++
		}
		switch o := o.(type) {
		case *corev1.ConfigMap:
			metas = append(metas, partial("v1", "ConfigMap", o.ObjectMeta))
		case *corev1.Secret:
			metas = append(metas, partial("v1", "Secret", o.ObjectMeta))
		case *appsv1.Deployment:
			// Cached typed (its template: the anchor), confirmed as metadata.
			metas = append(metas, partial("apps/v1", "Deployment", o.ObjectMeta))
			typed = append(typed, o)
		default:
			typed = append(typed, o)
		}
	}
	// The namespace exists: the controller reads its UID for the anchors it owns.
	typed = append(typed, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.rollout.Namespace, UID: "uid-ns"}})
	kube := fake.NewClientset(typed...)
	md := metadatafake.NewSimpleMetadataClient(sch, metas...)
	m := controller.NewMetrics()
	ctl, err := controller.New(controller.Config{Kube: kube, Meta: md, Selector: plugin.OptInSelector(), Rollouts: true, Deployments: true,
		RolloutsServed: true, Log: modesLog(t), Metrics: m, Events: record.NewFakeRecorder(100)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller Run: %v", err)
		}
	}()
	reconciled := func() float64 {
		var n float64
		for _, r := range []string{"noop", "patched", "dry_run", "blocked", "error"} {
			var v dto.Metric
			if err := m.Reconciles.WithLabelValues(r).Write(&v); err == nil {
				n += v.GetCounter().GetValue()
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for idle := 0; idle < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("controller: not idle after 10s (ready %v, leading %v, reconciles %v, queue %d)", ctl.Ready(), ctl.Leading(), reconciled(), ctl.QueueLen())
		}
		time.Sleep(50 * time.Millisecond)
		if ctl.Ready() && ctl.Leading() && reconciled() >= float64(optedIn) && ctl.QueueLen() == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	t.Logf("controller: %v reconciles", reconciled())
	return written(t, md.Actions())
}

// TestFourModes: the same fixtures through the step, the Job, the controller and audit -fix.
// Config of one workload alone: every mode writes the same owner references. Config shared
// with Deployment api: the controller maintains every user; the step and the Job, which see
// only their Rollout's later revisions, write its own ReplicaSet where a live controller
// maintains the rest, and nothing otherwise (they fail); audit -fix leaves shared config to
// the controller.
func TestFourModes(t *testing.T) {
	both := []string{"ConfigMap/cfg ← " + string(modesUIDAPI) + "," + string(modesUIDCur)}
	own := []string{"ConfigMap/cfg ← " + string(modesUIDCur)}
	rows := []modesRow{
		{name: "a: the Rollout's alone: every mode writes its ReplicaSet", apiOwn: true, want: own},
		{name: "b: shared by a Rollout and a Deployment, no controller: the one-shot modes write nothing", want: nil, wantController: both},
		{name: "c: shared, a live controller: the step and the Job write the Rollout's own ReplicaSet", live: true, want: own, wantAudit: []string{}, wantController: both},
		{name: "d: a StatefulSet uses it too: the one-shot modes write nothing, the controller maintains every user", statefulSet: true, want: nil, wantController: both},
		{name: "e: a ReplicaSet whose Rollout is gone uses it too: never an owner", orphan: true, apiOwn: true, want: own},
		{name: "f: an image pull secret not opted in, listed: left alone", listPull: true, apiOwn: true, want: own},
	}
	modes := []struct {
		name string
		run  func(*testing.T, modesWorld) []string
	}{
		{"step", runStep},
		{"job", runJobMode},
		{"controller", runController},
		{"audit -fix", runAuditFix},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			got := map[string][]string{}
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					w := row.world()
					got[m.name] = m.run(t, w)
					want := row.want
					switch {
					case m.name == "controller" && row.wantController != nil:
						want = row.wantController
					case m.name == "audit -fix" && row.wantAudit != nil:
						want = row.wantAudit
					}
					if len(want) == 0 {
						want = nil
					}
					if !slices.Equal(got[m.name], want) {
						t.Errorf("%s wrote %q, want %q", m.name, got[m.name], want)
					}
				})
			}
			if !slices.Equal(got["step"], got["job"]) {
				t.Errorf("the one-shot modes disagree: step wrote %q, job wrote %q", got["step"], got["job"])
			}
		})
	}
}
