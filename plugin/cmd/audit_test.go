package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// runAuditCmd runs `configmap-attacher audit args…` on fakes (the metadata client served
// from the typed fake).
func runAuditCmd(t *testing.T, kube kubernetes.Interface, ro rolloutsclient.Interface, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Audit{Stdout: &out, Stderr: &errb,
		Clients: Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) {
			return clientset.Clients{Kube: kube, Meta: fakemeta.WithRollouts(kube, ro), Rollouts: ro}, nil
		}}}
	code := c.Main(args)
	return code, out.String(), errb.String()
}

func TestAuditUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing", nil, "-namespace is required (or -A for every namespace)"},
		{"rollout without namespace", []string{"-rollout", "web"}, "-namespace is required"},
		{"-A and -namespace", []string{"-A", "-namespace", "shop"}, "do not combine it with -namespace or -rollout"},
		{"-A and -rollout", []string{"-A", "-rollout", "web"}, "do not combine it"},
		{"bad output", []string{"-namespace", "shop", "-o", "xml"}, `-o "xml": use text, json or yaml`},
		{"bad selector", []string{"-namespace", "shop", "-selector", "a in (b"}, `-selector "a in (b"`},
		{"empty selector", []string{"-namespace", "shop", "-selector", " "}, "selects every object without a given label"},
		{"negative-only selector", []string{"-namespace", "shop", "-selector", "!team"}, "selects every object without a given label"},
		{"stray argument", []string{"-namespace", "shop", "web"}, `unexpected argument "web"`},
		{"unknown flag", []string{"-nmspace", "shop"}, "unknown flag -nmspace: did you mean -n or --namespace?"},
		{"bad log level", []string{"-namespace", "shop", "-log-level", "loud"}, `log level "loud"`},
		{"bad opt-in selector", []string{"-namespace", "shop", "-opt-in-selector", "a in (b"}, `-opt-in-selector "a in (b"`},
		{"negative-only opt-in selector", []string{"-namespace", "shop", "-require-opt-in", "-opt-in-selector", "!team"}, `-opt-in-selector "!team": ` + plugin.NotPositive},
		{"empty opt-in selector", []string{"-namespace", "shop", "-opt-in-selector", ""}, `-opt-in-selector "": ` + plugin.NotPositive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			ro := rolloutsfake.NewSimpleClientset()
			code, out, stderr := runAuditCmd(t, kube, ro, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if !strings.Contains(stderr, tc.want) || out != "" {
				t.Errorf("stderr %q lacks %q (stdout %q)", stderr, tc.want, out)
			}
			if len(kube.Actions())+len(ro.Actions()) != 0 {
				t.Error("bad usage made API calls")
			}
		})
	}
	if code, out, _ := runAuditCmd(t, nil, nil, "-help"); code != ExitOK || !strings.Contains(out, "Usage: configmap-attacher audit") {
		t.Errorf("-help: %d %s", code, out)
	}
}

// Every problem is reported at once, each naming its flag.
func TestAuditReportsEveryProblem(t *testing.T) {
	code, _, stderr := runAuditCmd(t, nil, nil, "-o", "xml", "-selector", "!team", "-opt-in-selector", "!x", "-workloads", "replicasets", "-log-level", "loud", "extra")
	if code != ExitUsage {
		t.Errorf("exit %d, want %d", code, ExitUsage)
	}
	for _, want := range []string{`unexpected argument "extra"`, "-namespace is required", `-o "xml"`, `-selector "!team"`, `-opt-in-selector "!x"`, `-workloads "replicasets": "replicasets" is not a workload kind`, `log level "loud"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// api is a Deployment with two ReplicaSets: api-rs2 (current) uses api-2 (opted in, no
// owner), api-rs1 uses api-1 (lost).
func apiDeployment() (*fake.Clientset, *rolloutsfake.Clientset) {
	t1 := true
	podSpec := func(cm string) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}},
			Volumes: []corev1.Volume{{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}}
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop", UID: "uid-deploy"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}}, Spec: podSpec("api-2")}}}
	rsFor := func(name, rev string, spec corev1.PodSpec) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name),
			Labels:          map[string]string{"app": "api", "pod-template-hash": name},
			Annotations:     map[string]string{plugin.DeploymentRevisionAnnotation: rev},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-deploy", Controller: &t1}}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api", "pod-template-hash": name}}, Spec: spec}}}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-2", Namespace: "shop", Labels: map[string]string{plugin.OptInLabel: "true"}}}
	kube := fake.NewClientset(d, rsFor("api-rs1", "1", podSpec("api-1")), rsFor("api-rs2", "2", podSpec("api-2")), cm)
	return kube, rolloutsfake.NewSimpleClientset()
}

// The command end to end: text and JSON output, -fix, and the exit codes.
func TestAuditCommand(t *testing.T) {
	kube, ro := apiDeployment()
	code, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop")
	for _, want := range []string{"Deployment shop/api\n", "ReplicaSet api-rs2 (current, revision 2)", "ConfigMap api-2  MISSING OWNER", "ConfigMap api-1  LOST (does not exist)",
		"missing owners: 1 owner reference(s) can be added: run again with -fix", "findings: 1 lost, 1 unowned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s%s", want, out, stderr)
		}
	}
	if code != ExitFail {
		t.Errorf("exit %d, want 1 (api-1 is lost)", code)
	}
	code, out, _ = runAuditCmd(t, kube, ro, "-namespace", "shop", "-fix", "-o", "json")
	var rep audit.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if code != ExitFail || rep.Fix == nil || len(rep.Fix.Added) != 1 || rep.Fix.Added[0].Name != "api-2" || rep.Summary.Fixable != 0 || rep.Summary.Lost != 1 {
		t.Errorf("-fix: exit %d, %+v %+v", code, rep.Fix, rep.Summary)
	}
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Name != "api-rs2" {
		t.Errorf("api-2 owners %+v", c.OwnerReferences)
	}
	// Nothing lost: exit 0.
	if err := kube.AppsV1().ReplicaSets("shop").Delete(t.Context(), "api-rs1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop"); code != ExitOK || !strings.HasSuffix(out, "findings: 0 lost, 0 unowned, 0 stray, 0 legacy\n") {
		t.Errorf("clean: exit %d\n%s%s", code, out, stderr)
	}
	// A missing Rollout: exit 1 with the reason on stderr.
	if code, _, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-rollout", "nope"); code != ExitFail || !strings.Contains(stderr, "configmap-attacher audit: Rollout shop/nope not found") {
		t.Errorf("missing rollout: exit %d %s", code, stderr)
	}
}

// -workloads chooses the kinds; without the Rollout CRD a defaulted run audits the
// Deployments with a warning, a named one is an error.
func TestAuditWorkloadsFlag(t *testing.T) {
	kube, ro := apiDeployment()
	if err := ro.Tracker().Add(&v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := runAuditCmd(t, kube, ro, "-namespace", "shop", "-workloads", "rollouts"); strings.Contains(out, "Deployment shop/api") || !strings.Contains(out, "Rollout shop/web") {
		t.Errorf("-workloads rollouts:\n%s", out)
	}
	if _, out, _ := runAuditCmd(t, kube, ro, "-namespace", "shop", "-workloads", " Deployment, "); strings.Contains(out, "Rollout shop/web") || !strings.Contains(out, "Deployment shop/api") {
		t.Errorf("-workloads deployment:\n%s", out)
	}
	if code, _, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-rollout", "web", "-workloads", "deployments"); code != ExitUsage || !strings.Contains(stderr, "-workloads must include rollouts") {
		t.Errorf("-rollout with deployments only: exit %d %s", code, stderr)
	}
	ro.PrependReactor("list", "rollouts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "argoproj.io", Resource: "rollouts"}, "")
	})
	if code, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-log-level", "warn"); !strings.Contains(out, "Deployment shop/api") || !strings.Contains(stderr, "not installed") || code == ExitUsage {
		t.Errorf("defaulted without the CRD: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-workloads", "rollouts,deployments"); code != ExitFail || !strings.Contains(stderr, "Rollout CRD (rollouts.argoproj.io) is not installed") {
		t.Errorf("named without the CRD: exit %d %s", code, stderr)
	}
	if code, _, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-workloads", "statefulsets"); code != ExitUsage || !strings.Contains(stderr, "-workloads statefulsets: audit reads the ReplicaSets of rollouts and deployments") {
		t.Errorf("bad -workloads: exit %d %s", code, stderr)
	}
	if _, problems := ParseWorkloads(" , "); len(problems) != 1 || !strings.Contains(problems[0], "names no workload kind") {
		t.Errorf("empty -workloads: %v", problems)
	}
	kinds, problems := ParseWorkloads("statefulsets, DaemonSet,jobs,cronjob,pods,rollouts,deployment")
	if want := "StatefulSet,DaemonSet,Job,CronJob,Pod,Rollout,Deployment"; strings.Join(kinds, ",") != want || len(problems) != 0 {
		t.Errorf("every kind: %v %v, want %s", kinds, problems, want)
	}
	if _, problems := ParseWorkloads("jobs,job"); len(problems) != 1 || !strings.Contains(problems[0], `"job" is listed twice`) {
		t.Errorf("repeated kind: %v", problems)
	}
}

// FlagSet is every flag at its default, for -help and the docs' flag table.
func TestAuditFlagSet(t *testing.T) {
	var errb bytes.Buffer
	fs := (&Audit{Stderr: &errb}).FlagSet()
	want := map[string]string{"namespace": "", "rollout": "", "all-namespaces": "false", "output": "text", "fix": "false",
		"selector": "", "workloads": "rollouts,deployments", "kubeconfig": "", "context": "", "as": "", "as-group": "", "log-level": "warn",
		"require-opt-in": "false", "opt-in-selector": plugin.OptInLabel + "=true",
		"controller-lease": "configmap-attacher/configmap-attacher"}
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if d, ok := want[f.Name]; !ok || f.DefValue != d || f.Usage == "" {
			t.Errorf("flag -%s default %q (want %q, known %v)", f.Name, f.DefValue, d, ok)
		}
	})
	if n != len(want) {
		t.Errorf("%d flags, want %d", n, len(want))
	}
	fs.Usage()
	if !strings.HasPrefix(errb.String(), "Usage: configmap-attacher audit") || !strings.Contains(errb.String(), "-workloads value") {
		t.Errorf("usage:\n%s", errb.String())
	}
	if (&Audit{}).FlagSet() == fs {
		t.Error("FlagSet returned the same flag set twice")
	}
}

// -require-opt-in and -opt-in-selector are the administrator's policy, as for the step and the
// Job: the audit reports with the opt-in selector (unless -selector names another), and -fix
// writes under the policy only.
func TestAuditPolicyFlags(t *testing.T) {
	world := func() (*fake.Clientset, *rolloutsfake.Clientset) {
		kube, ro := apiDeployment()
		c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{})
		c.Labels = map[string]string{"team": "shop"} // not the default label
		if _, err := kube.CoreV1().ConfigMaps("shop").Update(t.Context(), c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return kube, ro
	}
	// The opt-in selector is the one the audit reports with.
	kube, ro := world()
	code, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-opt-in-selector", "team=shop")
	if code != ExitFail || !strings.Contains(out, "ConfigMap api-2  MISSING OWNER\n") || !strings.Contains(out, "opted in (team=shop)") {
		t.Errorf("-opt-in-selector team=shop: exit %d\n%s%s", code, out, stderr)
	}
	if _, out, _ = runAuditCmd(t, kube, ro, "-namespace", "shop"); !strings.Contains(out, "ConfigMap api-2  not opted in") {
		t.Errorf("default opt-in selector:\n%s", out)
	}
	// -selector opts it in for the audit, but -require-opt-in with the default opt-in
	// selector refuses it: the report says so, and -fix writes nothing.
	args := []string{"-namespace", "shop", "-selector", "team=shop", "-require-opt-in"}
	if _, out, _ = runAuditCmd(t, kube, ro, args...); !strings.Contains(out, "-fix leaves it alone: -require-opt-in is set and it does not match configmap-attacher/revisioned=true") ||
		strings.Contains(out, "run again with -fix") {
		t.Errorf("-require-opt-in:\n%s", out)
	}
	_, out, _ = runAuditCmd(t, kube, ro, append(args, "-fix")...)
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 0 || !strings.Contains(out, "fixed: nothing to add") {
		t.Errorf("-require-opt-in -fix wrote %+v\n%s", c.OwnerReferences, out)
	}
	// Without -require-opt-in, -fix adds what -selector opts in.
	_, out, _ = runAuditCmd(t, kube, ro, "-namespace", "shop", "-selector", "team=shop", "-fix")
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 1 {
		t.Errorf("-selector -fix: owners %+v\n%s", c.OwnerReferences, out)
	}
}

// An object a StatefulSet also uses, which no live controller maintains, is a finding of its
// own, in text and JSON, and -fix leaves it alone.
func TestAuditShared(t *testing.T) {
	kube, ro := apiDeployment()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "shop"},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "api-2"}}}}}}}}}
	if err := kube.Tracker().Add(sts); err != nil {
		t.Fatal(err)
	}
	_, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop")
	for _, want := range []string{"ConfigMap api-2  MISSING OWNER (shared: -fix leaves it alone)",
		"SHARED   ConfigMap api-2: ConfigMap api-2 is also used by StatefulSet cache, outside Deployment shop/api: no live configmap-attacher controller maintains it (Lease configmap-attacher/configmap-attacher: not found",
		"; -fix leaves it alone\n", "-fix leaves it alone: it is shared (see SHARED)",
		"shared: 1 ReplicaSet(s) use objects that a user that cannot own them also uses; -fix leaves them alone\n", "findings: 1 lost, 1 unowned, 0 stray, 0 legacy, 1 shared\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s%s", want, out, stderr)
		}
	}
	if strings.Contains(out, "run again with -fix") || strings.Contains(out, "not opted in:") {
		t.Errorf("a shared object offered to -fix, or called not opted in:\n%s", out)
	}
	code, out, _ := runAuditCmd(t, kube, ro, "-namespace", "shop", "-fix", "-o", "json")
	var rep audit.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if code != ExitFail || rep.Summary.Shared != 1 || rep.Summary.Fixable != 0 || rep.Summary.SharedOwners != 1 || len(rep.Fix.Added) != 0 || len(rep.Fix.Skipped) != 1 || rep.Warnings == nil {
		t.Errorf("-fix: exit %d summary %+v fix %+v warnings %v", code, rep.Summary, rep.Fix, rep.Warnings)
	}
	o := rep.Deployments[0].Objects
	if len(o) != 2 || o[1].Name != "api-2" || strings.Join(o[1].SharedWith, ",") != "StatefulSet cache" || o[1].Fixable || o[0].SharedWith == nil {
		t.Errorf("objects %+v", o)
	}
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 0 {
		t.Errorf("-fix wrote a shared object: %+v", c.OwnerReferences)
	}
	// Users that cannot be read: a warning, not a crash; the rest of the report stands.
	kube.PrependReactor("list", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "", errors.New("no"))
	})
	code, out, _ = runAuditCmd(t, kube, ro, "-namespace", "shop")
	if code != ExitFail || !strings.Contains(out, "warning: namespace shop: objects also used by StatefulSets, DaemonSets, Jobs, CronJobs or bare Pods are not reported (-fix writes nothing there): forbidden to list statefulsets.apps") ||
		!strings.Contains(out, "ConfigMap api-1  LOST") {
		t.Errorf("forbidden users: exit %d\n%s", code, out)
	}
}

// TestAuditSharedUnmaintained: an object Deployment api shares with Deployment worker is a
// SHARED finding while no live controller maintains it (-fix writes nothing), and no finding
// once the controller's Lease is live (-fix leaves it to the controller).
func TestAuditSharedUnmaintained(t *testing.T) {
	kube, ro := apiDeployment()
	t1 := true
	worker := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "worker-w1", Namespace: "shop", UID: "uid-worker-w1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "worker", UID: "uid-worker", Controller: &t1}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "api-2"}}}}}}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: "shop", UID: "uid-worker"}}
	for _, o := range []runtime.Object{worker, dep} {
		if err := kube.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	_, out, stderr := runAuditCmd(t, kube, ro, "-namespace", "shop", "-fix")
	if !strings.Contains(out, "SHARED   ConfigMap api-2: ConfigMap api-2 is also used by ReplicaSet worker-w1 (of Deployment worker), outside Deployment shop/api: no live configmap-attacher controller maintains it") {
		t.Errorf("no SHARED finding for the unmaintained object:\n%s%s", out, stderr)
	}
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 0 {
		t.Errorf("-fix wrote an unmaintained shared object: %+v", c.OwnerReferences)
	}

	holder, dur, renew := "cma-0", int32(15), metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher", Namespace: "configmap-attacher",
		Labels:      map[string]string{plugin.ControllerLeaseLabel: "true"},
		Annotations: plugin.ScopeAnnotations(nil, plugin.OptInSelector(), []string{"rollouts", "deployments"})},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}
	if err := kube.Tracker().Add(lease); err != nil {
		t.Fatal(err)
	}
	_, out, stderr = runAuditCmd(t, kube, ro, "-namespace", "shop", "-fix")
	if strings.Contains(out, "SHARED") || !strings.Contains(out, "left to the controller of Lease configmap-attacher/configmap-attacher") {
		t.Errorf("a live controller maintains it: no finding, -fix leaves it to the controller:\n%s%s", out, stderr)
	}
	if c, _ := kube.CoreV1().ConfigMaps("shop").Get(t.Context(), "api-2", metav1.GetOptions{}); len(c.OwnerReferences) != 0 {
		t.Errorf("-fix wrote an object the controller maintains: %+v", c.OwnerReferences)
	}
}
