package cmd

import (
	"bytes"
	"encoding/json"
	"sigs.k8s.io/yaml"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/doctor"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

func runDoctorCmd(t *testing.T, kube *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Doctor{Stdout: &out, Stderr: &errb, Clients: Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) {
		return clientset.Clients{Kube: kube, Meta: fakemeta.New(kube)}, nil
	}}}
	return c.Main(args), out.String(), errb.String()
}

func TestDoctorUsageErrors(t *testing.T) {
	kube := fake.NewClientset()
	code, out, stderr := runDoctorCmd(t, kube, "-mode", "step,steps,step", "-namespaces", "Shop", "-o", "xml",
		"-metrics-url", "localhost:8080", "-timeout", "0s", "-leader-election-id", "Bad_Name", "extra")
	if code != ExitUsage || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{`unexpected argument "extra"`, `-mode "step,steps,step": "steps" is not a mode`, `-mode: "step" is listed twice`,
		`-n/--namespace: "Shop" is not a valid namespace name`, `-o "xml": use text, json or yaml`, `-metrics-url "localhost:8080": want http://host:port/metrics`,
		"-timeout 0s: must be positive", `-leader-election-id "Bad_Name" is not a valid name`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code, _, stderr := runDoctorCmd(t, kube, "-mode", "job"); code != ExitUsage || !strings.Contains(stderr, "-mode job needs -n/--namespace") {
		t.Errorf("job without namespaces: %d %s", code, stderr)
	}
	if len(kube.Actions()) != 0 {
		t.Error("bad usage made API calls")
	}
	if code, stderr, _ := runDoctorCmd(t, nil, "-help"); code != ExitOK || !strings.Contains(stderr, "Usage: configmap-attacher doctor") {
		t.Errorf("-help: %d %s", code, stderr)
	}
}

// The exit code follows the findings: 1 with an error (here: no Lease, and the RBAC the
// authorizer denies), 0 with warnings only (no -metrics-url); -o json parses.
func TestDoctorExitCodesAndJSON(t *testing.T) {
	holder, dur := "pod-a", int32(3600)
	renew := metav1.NowMicro()
	newKube := func(allow bool, objs ...runtime.Object) *fake.Clientset {
		kube := fake.NewClientset(objs...)
		kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
			sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
			sar.Status.Allowed = allow
			return true, sar, nil
		})
		return kube
	}
	args := []string{"-mode", "controller", "-namespace", "shop"}
	dep := controllerDeployment("configmap-attacher", "configmap-attacher", "configmap-attacher", "controller", "-selector=configmap-attacher/revisioned=true")

	code, out, stderr := runDoctorCmd(t, newKube(false, dep), append(args, "-o", "json")...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	if code != ExitFail || rep.Errors != 2 || stderr != "" {
		t.Errorf("exit %d, %d errors (want 1, 2), stderr %q:\n%s", code, rep.Errors, stderr, out)
	}
	// -o yaml is the same document.
	_, out, _ = runDoctorCmd(t, newKube(false, dep), append(args, "-o", "yaml")...)
	var yrep doctor.Report
	if err := yaml.Unmarshal([]byte(out), &yrep); err != nil || yrep.Errors != rep.Errors || len(yrep.Findings) != len(rep.Findings) {
		t.Errorf("-o yaml: %v, %d errors and %d findings (json: %d, %d):\n%s", err, yrep.Errors, len(yrep.Findings), rep.Errors, len(rep.Findings), out)
	}

	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher", Namespace: "configmap-attacher"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}
	code, out, _ = runDoctorCmd(t, newKube(true, l, dep), args...)
	if code != ExitOK || !strings.Contains(out, "0 error(s), 1 warning(s)") || !strings.Contains(out, "fix: pass -metrics-url") {
		t.Errorf("exit %d, want 0 with one warning:\n%s", code, out)
	}
}

// controllerDeployment is a controller Deployment labelled as the chart labels it, with its
// args (after the image's entrypoint) and ServiceAccount.
func controllerDeployment(ns, name, instance string, args ...string) *appsv1.Deployment {
	l := map[string]string{doctor.LabelName: doctor.AppName, doctor.LabelInstance: instance, "app.kubernetes.io/component": "controller"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{{Name: "controller", Args: args,
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}}}}}}}}
}

// Discovery with no flags: every labelled controller Deployment, in any namespace and of any
// release name, is checked with its own ServiceAccount, Lease (its -leader-election-id, or the
// controller's default), watched namespaces and metrics Service; a Deployment of another mode
// or without the labels is not an install; a flag overrides what is read; -instance and
// -controller-namespace narrow it.
func TestDoctorDiscoversInstalls(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // doctor runs outside a cluster here
	holder, dur := "pod-a", int32(3600)
	renew := metav1.NowMicro()
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}
	}
	a := controllerDeployment("team-a", "cma-a-configmap-attacher", "cma-a", "controller", "-namespaces=app-a", "-leader-election-id", "cma-a-configmap-attacher", "-metrics-addr=:9090")
	a.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 9090
	b := controllerDeployment("team-b", "cmb", "cmb", "controller", "--namespaces", "app-b") // the default Lease name
	notController := controllerDeployment("team-b", "job", "cmb", "-rollout=web")
	unlabelled := controllerDeployment("team-c", "other", "other", "controller")
	unlabelled.Labels = nil
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "cma-a-configmap-attacher-metrics", Namespace: "team-a", Labels: a.Labels},
		Spec: corev1.ServiceSpec{Selector: a.Spec.Template.Labels, Ports: []corev1.ServicePort{{Name: "metrics", Port: 8080, TargetPort: intstr.FromString("metrics")}}}}
	kube := fake.NewClientset(a, b, notController, unlabelled, svc, lease("team-a", "cma-a-configmap-attacher"), lease("team-b", doctor.DefaultLeaseName))
	var users []string
	kube.PrependReactor("create", "subjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		sar := act.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		users = append(users, sar.Spec.User+" in "+sar.Spec.ResourceAttributes.Namespace)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	code, out, stderr := runDoctorCmd(t, kube, "-mode", "controller")
	for _, want := range []string{
		`OK      controller/install     Deployment team-a/cma-a-configmap-attacher: instance "cma-a": ServiceAccount cma-a-configmap-attacher, Lease team-a/cma-a-configmap-attacher, watches app-a, metrics Service cma-a-configmap-attacher-metrics:8080`,
		`OK      controller/install     Deployment team-b/cmb: instance "cmb": ServiceAccount cmb, Lease team-b/configmap-attacher, watches app-b`,
		"OK      controller/lease       Lease team-a/cma-a-configmap-attacher", "OK      controller/lease       Lease team-b/configmap-attacher",
		"OK      rbac/controller        system:serviceaccount:team-a:cma-a-configmap-attacher: may do all", "OK      rbac/controller        system:serviceaccount:team-b:cmb: may do all",
		// Outside a cluster the Service's DNS name does not resolve: found, named, not fetched.
		"WARNING controller/metrics     Service team-a/cma-a-configmap-attacher-metrics: found, not fetched", "port-forward svc/cma-a-configmap-attacher-metrics 8080:8080",
		// The objects of the namespaces the installs watch, not of every namespace.
		"OK      objects                namespace app-a:", "OK      objects                namespace app-b:",
		"0 error(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"team-b/job", "team-c", "Lease team-a/configmap-attacher", "every namespace:"} {
		if strings.Contains(out, not) {
			t.Errorf("reports %q:\n%s", not, out)
		}
	}
	if code != ExitOK || stderr != "" {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	// RBAC was asked in each install's own watched namespaces.
	for _, want := range []string{"system:serviceaccount:team-a:cma-a-configmap-attacher in app-a", "system:serviceaccount:team-b:cmb in app-b"} {
		if !contains(users, want) {
			t.Errorf("no SubjectAccessReview for %s: %v", want, users)
		}
	}

	// -instance narrows to one release; -leader-election-id overrides what is read.
	code, out, _ = runDoctorCmd(t, kube, "-mode", "controller", "-instance", "cmb", "-leader-election-id", "elsewhere")
	if code != ExitFail || strings.Contains(out, "team-a") || !strings.Contains(out, "ERROR   controller/lease       Lease team-b/elsewhere: not found") {
		t.Errorf("-instance cmb -leader-election-id elsewhere: exit %d\n%s", code, out)
	}
	// -controller-namespace narrows to one namespace; none there: an error that says what to do.
	code, out, _ = runDoctorCmd(t, kube, "-mode", "controller", "-controller-namespace", "team-c")
	if code != ExitFail || !strings.Contains(out, "ERROR   controller/install     Deployments labelled app.kubernetes.io/name=configmap-attacher in namespace team-c: none runs `configmap-attacher controller`") {
		t.Errorf("-controller-namespace team-c: exit %d\n%s", code, out)
	}
	// An unlabelled install is checked by the names the flags give.
	code, out, _ = runDoctorCmd(t, kube, "-mode", "controller", "-controller-namespace", "team-b", "-instance", "none",
		"-controller-service-account", "cmb", "-leader-election-id", doctor.DefaultLeaseName)
	if code != ExitOK || !strings.Contains(out, "WARNING controller/install") || !strings.Contains(out, "OK      controller/lease       Lease team-b/configmap-attacher") {
		t.Errorf("unlabelled, by flags: exit %d\n%s", code, out)
	}
}

// The Lease doctor assumes for a Deployment without -leader-election-id is the controller's
// own default (one flag set parses both).
func TestParseControllerArgsDefaults(t *testing.T) {
	a, err := ParseControllerArgs(nil)
	if err != nil || a.LeaseName != doctor.DefaultLeaseName || !a.LeaderElect || a.MetricsAddr != ":8080" || a.Selector.String() != plugin.OptInLabel+"=true" {
		t.Errorf("%+v %v", a, err)
	}
	if _, err := ParseControllerArgs([]string{"-no-such-flag"}); err == nil {
		t.Error("an unknown flag parsed")
	}
}
