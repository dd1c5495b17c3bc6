package cmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	c := &Doctor{Stdout: &out, Stderr: &errb, NewClients: func(plugin.ClientOptions) (clientset.Clients, error) {
		return clientset.Clients{Kube: kube, Meta: fakemeta.New(kube)}, nil
	}}
	return c.Main(args), out.String(), errb.String()
}

func TestDoctorUsageErrors(t *testing.T) {
	kube := fake.NewClientset()
	code, out, stderr := runDoctorCmd(t, kube, "-mode", "step,steps,step", "-namespaces", "Shop", "-o", "yaml",
		"-metrics-url", "localhost:8080", "-timeout", "0s", "-leader-election-id", "Bad_Name", "extra")
	if code != ExitUsage || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{`unexpected argument "extra"`, `-mode "step,steps,step": "steps" is not a mode`, `-mode: "step" is listed twice`,
		`-namespaces: "Shop" is not a valid namespace name`, `-o "yaml": use text or json`, `-metrics-url "localhost:8080": want http://host:port/metrics`,
		"-timeout 0s: must be positive", `-leader-election-id "Bad_Name" is not a valid name`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code, _, stderr := runDoctorCmd(t, kube, "-mode", "job"); code != ExitUsage || !strings.Contains(stderr, "-mode job needs -namespaces") {
		t.Errorf("job without namespaces: %d %s", code, stderr)
	}
	if len(kube.Actions()) != 0 {
		t.Error("bad usage made API calls")
	}
	if code, _, stderr := runDoctorCmd(t, nil, "-help"); code != ExitOK || !strings.Contains(stderr, "Usage: configmap-attacher doctor") {
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
	args := []string{"-mode", "controller", "-namespaces", "shop"}

	code, out, stderr := runDoctorCmd(t, newKube(false), append(args, "-o", "json")...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	if code != ExitFail || rep.Errors != 2 || stderr != "" {
		t.Errorf("exit %d, %d errors (want 1, 2), stderr %q:\n%s", code, rep.Errors, stderr, out)
	}

	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher-controller", Namespace: "configmap-attacher"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}
	code, out, _ = runDoctorCmd(t, newKube(true, l), args...)
	if code != ExitOK || !strings.Contains(out, "0 error(s), 1 warning(s)") || !strings.Contains(out, "fix: pass -metrics-url") {
		t.Errorf("exit %d, want 0 with one warning:\n%s", code, out)
	}
}
