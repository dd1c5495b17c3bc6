package doctor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

var now = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// setup is a healthy installation of the step plugin and the controller mode: the objects,
// the grants the authorizer answers with, and the metrics endpoint.
type setup struct {
	rolloutsNS    *corev1.Namespace
	config        *corev1.ConfigMap
	controller    *appsv1.Deployment
	replicaSets   []*appsv1.ReplicaSet
	objects       []runtime.Object
	lease         *coordinationv1.Lease
	denied        map[string]bool // "user verb resource namespace"
	metricsBody   string
	metricsStatus int
	opts          func(*Options)
	rollouts      []runtime.Object
}

const stepEntry = `- name: configmap-attacher/configmap-attacher
  location: file:///home/argo-rollouts/plugins/configmap-attacher
  args: ["--require-opt-in"]
`

func restrictedSC() *corev1.SecurityContext {
	t, f := true, false
	return &corev1.SecurityContext{RunAsNonRoot: &t, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func healthy() *setup {
	t1 := true
	s := &setup{
		rolloutsNS: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}},
		config: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts-config", Namespace: "argo-rollouts"},
			Data: map[string]string{"stepPlugins": stepEntry}},
		controller: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts", Namespace: "argo-rollouts"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				ServiceAccountName: "argo-rollouts",
				InitContainers:     []corev1.Container{installContainer()},
				Containers: []corev1.Container{{Name: "argo-rollouts", Image: "quay.io/argoproj/argo-rollouts:v1.10.2", SecurityContext: restrictedSC(),
					VolumeMounts: []corev1.VolumeMount{{Name: "configmap-attacher-plugin", MountPath: "/home/argo-rollouts/plugins", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "configmap-attacher-plugin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			}}}},
		lease:  &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher", Namespace: "configmap-attacher"}},
		denied: map[string]bool{}, metricsStatus: 200,
		metricsBody: "# TYPE configmap_attacher_controller_leader gauge\nconfigmap_attacher_controller_leader 1\n",
	}
	holder, dur := "pod-a", int32(15)
	renew := metav1.NewMicroTime(now.Add(-3 * time.Second))
	s.lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}
	// Deployment web in shop: two ReplicaSets, each with its own revision of web-config and
	// both with the static ca-bundle (not revisioned: never needs the label).
	for i, cm := range []string{"web-config-one", "web-config-two"} {
		s.replicaSets = append(s.replicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i+1), Namespace: "shop", UID: types.UID(fmt.Sprint("rs-", i)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep-web", Controller: &t1}}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ca-bundle"}}}}}},
				Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}}}}})
		s.objects = append(s.objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: "shop",
			Labels:      map[string]string{plugin.OptInLabel: "true"},
			Annotations: map[string]string{"argocd.argoproj.io/tracking-id": "web:/ConfigMap:shop/" + cm, "argocd.argoproj.io/sync-options": "Prune=false", "argocd.argoproj.io/compare-options": "IgnoreExtraneous"}}})
	}
	s.objects = append(s.objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca-bundle", Namespace: "shop",
		Annotations: map[string]string{"argocd.argoproj.io/tracking-id": "web:/ConfigMap:shop/ca-bundle"}}})
	return s
}

// run builds the fakes from s and runs doctor for modes; it also returns the fake's actions.
func (s *setup) run(t *testing.T, modes ...string) (*Report, []k8stesting.Action) {
	t.Helper()
	objs := append([]runtime.Object{s.rolloutsNS, s.config, s.controller, s.lease}, s.objects...)
	for _, rs := range s.replicaSets {
		objs = append(objs, rs)
	}
	kube := fake.NewClientset(objs...)
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		ra := sar.Spec.ResourceAttributes
		key := fmt.Sprintf("%s %s %s %s", sar.Spec.User, ra.Verb, ra.Resource, ra.Namespace)
		sar.Status.Allowed = !s.denied[key]
		return true, sar, nil
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(s.metricsStatus)
		fmt.Fprint(w, s.metricsBody)
	}))
	t.Cleanup(srv.Close)
	o := Defaults()
	o.Modes, o.Namespaces, o.MetricsURL, o.Now = modes, []string{"shop"}, srv.URL+"/metrics", func() time.Time { return now }
	if s.opts != nil {
		s.opts(&o)
	}
	rep := (&Doctor{Kube: kube, Meta: fakemeta.New(kube), Rollouts: rolloutsfake.NewSimpleClientset(s.rollouts...), Opts: o}).Run(context.Background())
	return rep, kube.Actions()
}

// stepRollout is Rollout shop/web whose first canary step is our plugin with config.
func stepRollout(config string) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: v1alpha1.RolloutSpec{Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
			{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: []byte(config)}}}}}}}
}

func text(r *Report) string {
	var b strings.Builder
	r.WriteText(&b)
	return b.String()
}

// find returns the findings of check with severity sev.
func find(r *Report, sev Severity, check string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == sev && f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

func TestHealthyPasses(t *testing.T) {
	rep, actions := healthy().run(t, ModeStep, ModeController)
	if rep.Errors != 0 || rep.Warnings != 0 {
		t.Fatalf("a healthy setup reported problems:\n%s", text(rep))
	}
	for _, check := range []string{"step/registration", "step/location", "step/version", "step/pod-security", "rbac/step", "rbac/controller", "objects", "controller/lease", "controller/metrics"} {
		if len(find(rep, OK, check)) == 0 {
			t.Errorf("no passing %s finding:\n%s", check, text(rep))
		}
	}
	// Read-only: gets and lists, and SubjectAccessReviews.
	for _, a := range actions {
		v, res := a.GetVerb(), a.GetResource().Resource
		if v != "get" && v != "list" && (v != "create" || res != "subjectaccessreviews") {
			t.Errorf("doctor sent %s %s", v, res)
		}
		// The only ConfigMap read by name is the plugin configuration.
		if g, ok := a.(k8stesting.GetAction); ok && res == "configmaps" && g.GetName() != "argo-rollouts-config" {
			t.Errorf("doctor read ConfigMap %s", g.GetName())
		}
		if res == "secrets" && v != "list" {
			t.Errorf("doctor sent %s secrets", v)
		}
	}
	// A chart Argo CD renders carries Helm's label; Argo CD, not Helm, prunes it.
	s := healthy()
	s.objects[0].(*corev1.ConfigMap).Labels["app.kubernetes.io/managed-by"] = "Helm"
	if rep, _ := s.run(t, ModeStep); rep.Failed() {
		t.Errorf("an Argo CD-rendered Helm object was asked for helm.sh/resource-policy:\n%s", text(rep))
	}
	// A step naming an opted-in object is fine.
	s = healthy()
	s.rollouts = append(s.rollouts, stepRollout(`{"configMaps": ["web-config-one"]}`))
	if rep, _ := s.run(t, ModeStep); rep.Failed() {
		t.Errorf("a step naming an opted-in object:\n%s", text(rep))
	}
	// The static ca-bundle is used by every revision: never asked to carry the label.
	if strings.Contains(text(rep), "ca-bundle") {
		t.Errorf("the static ca-bundle was reported:\n%s", text(rep))
	}
}

// Each planted problem is reported once, as an error with its fix, and nothing else fails.
func TestPlantedProblems(t *testing.T) {
	sa := func(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }
	for _, tc := range []struct {
		name   string
		modes  []string
		plant  func(s *setup)
		check  string
		want   string
		fixHas string
	}{
		{"no plugin entry", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: other/plugin\n  location: file:///x/other\n"
		}, "step/registration", `no entry named "configmap-attacher/configmap-attacher"`, "examples/argo-rollouts-config.yaml"},
		{"no stepPlugins key", []string{ModeStep}, func(s *setup) { delete(s.config.Data, "stepPlugins") }, "step/registration", "has no stepPlugins key", "examples/argo-rollouts-config.yaml"},
		{"stepPlugins does not parse", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: [configmap-attacher/configmap-attacher\n"
		}, "step/registration", "does not parse", "fix the YAML"},
		// A misspelt key is ignored by the controller (a warning); its field stays empty.
		{"stepPlugins key misspelt", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  locaton: file:///x\n"
		}, "step/location", `location "" is not a URL`, "file://"},
		{"no ConfigMap", []string{ModeStep}, func(s *setup) { s.config.Name = "elsewhere" }, "step/registration", "not found", "examples/argo-rollouts-config.yaml"},
		{"location without mount", []string{ModeStep}, func(s *setup) {
			s.controller.Spec.Template.Spec.Containers[0].VolumeMounts = nil
		}, "step/location", "mounts no volume at /home/argo-rollouts/plugins", "install-plugin /plugins"},
		{"no install initContainer", []string{ModeStep}, func(s *setup) {
			s.controller.Spec.Template.Spec.InitContainers[0].Args = []string{"install-plugin", "/elsewhere"}
		}, "step/location", "no initContainer runs `install-plugin DIR`", "install-plugin /plugins"},
		{"bad scheme", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  location: ftp://host/configmap-attacher\n"
		}, "step/location", `scheme "ftp"`, "https:// with sha256"},
		{"https without sha256", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  location: https://example.com/configmap-attacher-step-linux-amd64\n"
		}, "step/location", "without a sha256", "64-hex digest"},
		{"short sha256", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  location: https://example.com/x\n  sha256: abc123\n"
		}, "step/location", `sha256 "abc123" is not 64 lowercase hex`, "checksums.txt"},
		// Argo Rollouts compares the digest with its own lowercase %x output.
		{"uppercase sha256", []string{ModeStep}, func(s *setup) {
			s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  location: https://example.com/x\n  sha256: " + strings.Repeat("AB", 32) + "\n"
		}, "step/location", "is not 64 lowercase hex", "checksums.txt"},
		{"other ServiceAccount", []string{ModeStep}, func(s *setup) {
			s.controller.Spec.Template.Spec.ServiceAccountName = "rollouts-sa"
		}, "step/controller", "runs as ServiceAccount rollouts-sa, not argo-rollouts", "-rollouts-service-account rollouts-sa"},
		{"old Rollouts", []string{ModeStep}, func(s *setup) {
			s.controller.Spec.Template.Spec.Containers[0].Image = "quay.io/argoproj/argo-rollouts:v1.7.2"
		}, "step/version", "step plugins need v1.8 or newer", "upgrade Argo Rollouts"},
		{"restricted refuses the initContainer", []string{ModeStep}, func(s *setup) {
			s.controller.Spec.Template.Spec.InitContainers[0].SecurityContext = nil
		}, "step/pod-security", "enforce=restricted refuses the pod", "seccompProfile RuntimeDefault"},
		{"missing RBAC verb", []string{ModeStep}, func(s *setup) {
			s.denied[sa("argo-rollouts", "argo-rollouts")+" patch secrets shop"] = true
		}, "rbac/step", "in namespace shop may not patch secrets", "examples/rbac-step-plugin.yaml"},
		{"OwnerReferencesPermissionEnforcement without delete", []string{ModeController}, func(s *setup) {
			s.opts = func(o *Options) { o.OwnerReferencesEnforcement = true }
			s.denied[sa("configmap-attacher", "configmap-attacher")+" delete configmaps shop"] = true
		}, "rbac/controller", "in namespace shop may not delete configmaps", "examples/rbac-ownerreferences-enforcement.yaml"},
		{"controller Lease verb", []string{ModeController}, func(s *setup) {
			s.denied[sa("configmap-attacher", "configmap-attacher")+" update leases configmap-attacher"] = true
		}, "rbac/controller", "in namespace configmap-attacher may not update leases.coordination.k8s.io", "Lease Role"},
		{"job RBAC", []string{ModeJob}, func(s *setup) {
			s.denied[sa("shop", "configmap-attacher-job")+" get rollouts shop"] = true
		}, "rbac/job", "in namespace shop may not get rollouts.argoproj.io", "examples/job.yaml"},
		{"unlabelled referenced object", []string{ModeController}, func(s *setup) {
			s.objects[1].(*corev1.ConfigMap).Labels = nil
		}, "objects/opt-in", "revisioned (used by Deployment web) but does not match configmap-attacher/revisioned=true", "kubectl -n shop label configmap web-config-two configmap-attacher/revisioned=true"},
		{"unlabelled kustomize-hashed object", []string{ModeController}, func(s *setup) {
			// One ReplicaSet only: the name alone (a Kustomize hash) says it is revisioned.
			s.replicaSets = s.replicaSets[:1]
			s.replicaSets[0].Spec.Template.Spec.Volumes[0].ConfigMap.Name = "web-config-5fk2hmc7tb"
			s.objects = append(s.objects, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config-5fk2hmc7tb", Namespace: "shop"}})
		}, "objects/opt-in", "ConfigMap shop/web-config-5fk2hmc7tb", "label it"},
		{"unlabelled object a step names", []string{ModeStep}, func(s *setup) {
			// No ReplicaSet uses it yet (the canary's does not exist): the step's list says it
			// is revisioned, and --require-opt-in fails the step on it.
			s.objects = append(s.objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-secret", Namespace: "shop"}})
			s.rollouts = append(s.rollouts, stepRollout(`{"secrets": ["web-secret"]}`))
		}, "objects/opt-in", "Secret shop/web-secret: revisioned (used by Rollout web)", "kubectl -n shop label secret web-secret"},
		{"step config the step refuses", []string{ModeStep}, func(s *setup) {
			s.rollouts = append(s.rollouts, stepRollout(`{"configmaps": ["web-config-two"]}`))
		}, "objects/step-config", "Rollout shop/web step 0: the step fails on its config", "docs/step.md#config-fields"},
		{"Flux without prune protection", []string{ModeController}, func(s *setup) {
			s.objects[0].(*corev1.ConfigMap).Annotations = nil
			s.objects[0].(*corev1.ConfigMap).Labels["kustomize.toolkit.fluxcd.io/name"] = "web"
		}, "objects/prune", "tracked by Flux without kustomize.toolkit.fluxcd.io/prune: disabled", "docs/gitops.md#flux"},
		{"Helm without keep", []string{ModeController}, func(s *setup) {
			s.objects[0].(*corev1.ConfigMap).Annotations = map[string]string{"meta.helm.sh/release-name": "web"}
		}, "objects/prune", "tracked by Helm without helm.sh/resource-policy: keep", "docs/gitops.md#helm"},
		{"Argo CD without Prune=false, step alone", []string{ModeStep}, func(s *setup) {
			delete(s.objects[0].(*corev1.ConfigMap).Annotations, "argocd.argoproj.io/sync-options")
		}, "objects/prune", "tracked by Argo CD without argocd.argoproj.io/sync-options: Prune=false", "docs/gitops.md#argo-cd"},
		{"stale Lease", []string{ModeController}, func(s *setup) {
			old := metav1.NewMicroTime(now.Add(-time.Minute))
			s.lease.Spec.RenewTime = &old
		}, "controller/lease", "expired 45s ago", "cannot renew"},
		{"Lease without holder", []string{ModeController}, func(s *setup) { s.lease.Spec.HolderIdentity = nil }, "controller/lease", "has no holder", "replica is running"},
		{"no Lease", []string{ModeController}, func(s *setup) { s.lease.Name = "other" }, "controller/lease", "not found", "-leader-election-id"},
		{"metrics endpoint down", []string{ModeController}, func(s *setup) { s.metricsStatus = http.StatusServiceUnavailable }, "controller/metrics", "answered 503", "-metrics-addr"},
		{"metrics of another process", []string{ModeController}, func(s *setup) { s.metricsBody = "go_goroutines 7\n" }, "controller/metrics", "without a configmap_attacher_controller_* series", "not another process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := healthy()
			tc.plant(s)
			rep, _ := s.run(t, tc.modes...)
			got := find(rep, Error, tc.check)
			if rep.Errors != 1 || len(got) != 1 {
				t.Fatalf("want exactly one %s error, got %d errors:\n%s", tc.check, rep.Errors, text(rep))
			}
			f := got[0]
			if !strings.Contains(f.Subject+": "+f.Message, tc.want) || !strings.Contains(f.Fix, tc.fixHas) {
				t.Errorf("finding %+v: want message with %q and fix with %q", f, tc.want, tc.fixHas)
			}
			if !rep.Failed() {
				t.Error("an error does not fail the run")
			}
		})
	}
}

// Warnings do not fail: Argo CD's protection is a backstop once the controller runs, a
// disabled entry still lets rollouts go on, and no -metrics-url means the metrics are not checked.
func TestWarningsDoNotFail(t *testing.T) {
	s := healthy()
	delete(s.objects[0].(*corev1.ConfigMap).Annotations, "argocd.argoproj.io/sync-options")
	s.config.Data["stepPlugins"] = stepEntry + "  disabled: true\n"
	s.opts = func(o *Options) { o.MetricsURL = "" }
	rep, _ := s.run(t, ModeStep, ModeController)
	if rep.Failed() || rep.Warnings != 3 {
		t.Fatalf("want 3 warnings and no error:\n%s", text(rep))
	}
	for _, c := range []string{"objects/prune", "step/registration", "controller/metrics"} {
		if len(find(rep, Warning, c)) != 1 {
			t.Errorf("no %s warning:\n%s", c, text(rep))
		}
	}
}

// Every problem is reported, not only the first.
func TestEveryProblemAtOnce(t *testing.T) {
	s := healthy()
	s.controller.Spec.Template.Spec.Containers[0].Image = "quay.io/argoproj/argo-rollouts:v1.6.0"
	s.denied["system:serviceaccount:argo-rollouts:argo-rollouts patch configmaps shop"] = true
	s.denied["system:serviceaccount:argo-rollouts:argo-rollouts list cronjobs shop"] = true
	s.objects[0].(*corev1.ConfigMap).Labels = nil
	old := metav1.NewMicroTime(now.Add(-time.Hour))
	s.lease.Spec.RenewTime = &old
	rep, _ := s.run(t, ModeStep, ModeController)
	if rep.Errors != 4 {
		t.Fatalf("want 4 errors (version, rbac, opt-in, lease):\n%s", text(rep))
	}
	rb := find(rep, Error, "rbac/step")
	if len(rb) != 1 || !strings.Contains(rb[0].Message, "patch configmaps") || !strings.Contains(rb[0].Message, "list cronjobs.batch") {
		t.Errorf("both missing verbs in one finding: %+v", rb)
	}
	// Errors are listed first.
	if rep.Findings[0].Severity != Error {
		t.Errorf("first finding is %s", rep.Findings[0].Severity)
	}
}

func TestPodSecurityLevels(t *testing.T) {
	for _, tc := range []struct {
		level   string
		initSC  bool
		allowed bool
	}{{"restricted", true, true}, {"restricted", false, false}, {"baseline", false, true}, {"", false, true}} {
		t.Run(fmt.Sprintf("%s/securityContext=%v", tc.level, tc.initSC), func(t *testing.T) {
			s := healthy()
			s.rolloutsNS.Labels = map[string]string{"pod-security.kubernetes.io/enforce": tc.level}
			if !tc.initSC {
				s.controller.Spec.Template.Spec.InitContainers[0].SecurityContext = nil
			}
			rep, _ := s.run(t, ModeStep)
			if got := len(find(rep, Error, "step/pod-security")) == 0; got != tc.allowed {
				t.Errorf("allowed %v, want %v:\n%s", got, tc.allowed, text(rep))
			}
		})
	}
	// Without our initContainer in the template (an https install, or not added yet) the
	// example's is evaluated: a restricted namespace admits it.
	s := healthy()
	s.controller.Spec.Template.Spec.InitContainers = nil
	s.config.Data["stepPlugins"] = "- name: configmap-attacher/configmap-attacher\n  location: https://example.com/x\n  sha256: " + strings.Repeat("ab", 32) + "\n"
	rep, _ := s.run(t, ModeStep)
	if f := find(rep, OK, "step/pod-security"); len(f) != 1 || !strings.Contains(f[0].Message, "initContainer added") || rep.Failed() {
		t.Errorf("https install:\n%s", text(rep))
	}
}

func TestJSON(t *testing.T) {
	s := healthy()
	s.lease.Spec.HolderIdentity = nil
	rep, _ := s.run(t, ModeController)
	var b strings.Builder
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"errors": 1`, `"check": "controller/lease"`, `"severity": "error"`, `"fix": "check that a controller replica`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
}

// -leader-elect=false: a controller without leader election has no Lease to check; the same
// missing Lease is an error with it (TestPlantedProblems/no_Lease).
func TestNoLeaderElection(t *testing.T) {
	s := healthy()
	s.lease.Name = "other"
	s.opts = func(o *Options) { o.LeaderElect = false }
	// Nor its RBAC: the chart grants no Lease Role without leader election.
	for _, v := range []string{"get", "create", "update"} {
		s.denied["system:serviceaccount:configmap-attacher:configmap-attacher"+" "+v+" leases configmap-attacher"] = true
	}
	rep, _ := s.run(t, ModeController)
	if rep.Failed() || len(find(rep, OK, "controller/lease")) != 0 {
		t.Errorf("the Lease was checked:\n%s", text(rep))
	}
}

// A key the controller ignores is a warning, not an error: the controller parses stepPlugins
// leniently and starts; an entry with an extra field still gets its location checked.
func TestUnknownStepPluginKeyWarns(t *testing.T) {
	s := healthy()
	s.config.Data["stepPlugins"] += "  type: Step\n"
	rep, _ := s.run(t, ModeStep)
	if rep.Failed() || len(find(rep, Warning, "step/registration")) != 1 || len(find(rep, OK, "step/location")) != 1 {
		t.Errorf("want one step/registration warning, no error, the location checked:\n%s", text(rep))
	}
}

// TestStepLeaseGrant: the step plugin may not get the controller's Lease: a warning naming the
// Lease and the Role to bind (the step still attaches config of one Rollout alone); with the
// grant, a check passed.
func TestStepLeaseGrant(t *testing.T) {
	s := healthy()
	rep, _ := s.run(t, ModeStep, ModeController)
	if len(find(rep, Warning, "rbac/step-lease")) != 0 {
		t.Fatalf("granted, still warned:\n%s", text(rep))
	}
	s = healthy()
	s.denied["system:serviceaccount:argo-rollouts:argo-rollouts get leases configmap-attacher"] = true
	rep, _ = s.run(t, ModeStep, ModeController)
	got := find(rep, Warning, "rbac/step-lease")
	if rep.Failed() || len(got) != 1 || !strings.Contains(got[0].Message, "may not get Lease configmap-attacher/configmap-attacher") ||
		!strings.Contains(got[0].Fix, "lease-reader") {
		t.Errorf("want one rbac/step-lease warning naming the Lease and the Role:\n%s", text(rep))
	}
}

// TestStepRevisionsGrant: without list on controllerrevisions the step reads the StatefulSets'
// and DaemonSets' Pods in full instead: a warning naming the grant and the fix, not a failure.
func TestStepRevisionsGrant(t *testing.T) {
	s := healthy()
	s.denied["system:serviceaccount:argo-rollouts:argo-rollouts list controllerrevisions shop"] = true
	rep, _ := s.run(t, ModeStep)
	got := find(rep, Warning, "rbac/step")
	if rep.Failed() || len(got) != 1 || !strings.Contains(got[0].Message, "may not list controllerrevisions.apps") ||
		!strings.Contains(got[0].Message, "Pods instead of their revisions") || !strings.Contains(got[0].Fix, "examples/rbac-step-plugin.yaml") {
		t.Errorf("want one rbac/step warning naming the grant:\n%s", text(rep))
	}
}
