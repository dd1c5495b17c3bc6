package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/fakemeta"
)

func runJob(t *testing.T, kube kubernetes.Interface, ro rolloutsclient.Interface, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Job{Stdout: &out, Stderr: &errb, PollInterval: 10 * time.Millisecond,
		Getenv: func(k string) string { return map[string]string{"JOB_NAME": "attach-web"}[k] },
		NewClients: func(plugin.ClientOptions) (plugin.Clients, error) {
			return plugin.Clients{Kube: kube, Meta: fakemeta.WithRollouts(kube, ro), Rollouts: ro}, nil
		}}
	code := c.Main(args)
	return code, out.String(), errb.String()
}

func TestJobUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "-rollout is required"},
		{"no namespace", []string{"-rollout", "web", "-configmaps", "a"}, "-namespace is required"},
		{"nothing to attach", []string{"-rollout", "web", "-namespace", "shop"}, "nothing to attach"},
		{"only commas", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", " , ,"}, "nothing to attach"},
		{"flag without value", []string{"-rollout"}, "flag needs an argument: -rollout"},
		{"unknown flag", []string{"-configmap", "a"}, "flag provided but not defined: -configmap"},
		{"bad name", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "Web_Config"}, `-configmaps[0]: "Web_Config" is not a valid object name`},
		{"qualified name", []string{"-rollout", "web", "-namespace", "shop", "-secrets", "ns/s"}, "namespace-qualified"},
		{"duplicate", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a,b,a"}, "listed twice"},
		{"stray argument", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "b"}, `unexpected argument "b"`},
		{"bad timeout", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-timeout", "0s"}, "-timeout 0s: must be at least 1s"},
		{"selector without discover", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-selector", "a=b"}, "-selector only applies with -discover"},
		{"bad selector", []string{"-rollout", "web", "-namespace", "shop", "-discover", "-selector", "a==b=c"}, `-selector "a==b=c"`},
		{"bad log level", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-log-level", "loud"}, `log level "loud"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			code, _, stderr := runJob(t, kube, rolloutsfake.NewSimpleClientset(), tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
			}
			if len(kube.Actions()) != 0 {
				t.Errorf("bad usage made API calls")
			}
		})
	}
	code, out, _ := runJob(t, nil, nil, "-version")
	if code != 0 || !strings.HasPrefix(out, "configmap-attacher ") {
		t.Errorf("-version: %d %q", code, out)
	}
}

// Every problem is reported at once, one line each, in the order of the checks.
func TestJobReportsEveryProblem(t *testing.T) {
	code, _, stderr := runJob(t, fake.NewClientset(), rolloutsfake.NewSimpleClientset(),
		"-configmaps", "Bad_Name,a,a", "-timeout", "0s", "-opt-in-selector", "!x", "-expect-template-annotation", "novalue", "extra")
	if code != ExitUsage {
		t.Errorf("exit %d, want %d", code, ExitUsage)
	}
	want := []string{
		`configmap-attacher: unexpected argument "extra"`,
		"configmap-attacher: -rollout is required",
		"configmap-attacher: -namespace is required",
		`configmap-attacher: -configmaps[0]: "Bad_Name" is not a valid object name`,
		`configmap-attacher: -configmaps[2]: "a" is listed twice`,
		"configmap-attacher: -timeout 0s: must be at least 1s",
		`configmap-attacher: -opt-in-selector "!x" selects every object without a given label`,
		`configmap-attacher: -expect-template-annotation "novalue": want KEY=VALUE`,
		"Run configmap-attacher -help for usage.",
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != len(want) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(want), stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want it to start with %q", i, lines[i], w)
		}
	}
}

// TestJobPrintsAndLogs: the message is the only line on stdout; the log names the Job (JOB_NAME).
func TestJobPrintsAndLogs(t *testing.T) {
	const hash = "7f9c2d"
	yes := true
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-ro", Generation: 1},
		Spec:   v1alpha1.RolloutSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: v1alpha1.RolloutStatus{CurrentPodHash: hash, ObservedGeneration: "1"}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-" + hash, Namespace: "shop", UID: "uid-rs",
		Labels:          map[string]string{"app": "web", plugin.PodTemplateHashLabel: hash},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: "uid-ro", Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "nginx"}},
			Volumes:    []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"}, Data: map[string]string{"k": "s3cr3t"}}
	kube := fake.NewClientset(rs, cm)
	code, out, stderr := runJob(t, kube, rolloutsfake.NewSimpleClientset(ro), "-rollout", "web", "-namespace", "shop", "-configmaps", "cfg, ", "-timeout", "5s")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "attached 1 ConfigMap to ReplicaSet web-" + hash + " of Rollout shop/web\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if !strings.Contains(stderr, "attach-web") || strings.Contains(stderr, "s3cr3t") {
		t.Errorf("stderr lacks the job name or logs object data: %s", stderr)
	}
	// Failures: exit 1, the reason on stderr.
	code, _, stderr = runJob(t, kube, rolloutsfake.NewSimpleClientset(), "-rollout", "web", "-namespace", "shop", "-configmaps", "cfg", "-timeout", "1s")
	if code != ExitFail || !strings.Contains(stderr, "configmap-attacher: timed out after 1s waiting for Rollout shop/web to exist") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
