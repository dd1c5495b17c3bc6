package cmd

import (
	"bytes"
	"errors"
	"io"
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
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

func runJob(t *testing.T, kube kubernetes.Interface, ro rolloutsclient.Interface, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Job{Stdout: &out, Stderr: &errb, PollInterval: 10 * time.Millisecond,
		Getenv: func(k string) string { return map[string]string{"JOB_NAME": "attach-web"}[k] },
		Clients: Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) {
			return clientset.Clients{Kube: kube, Meta: fakemeta.WithRollouts(kube, ro), Rollouts: ro}, nil
		}}}
	code := c.Main(args)
	return code, out.String(), errb.String()
}

// runJobUsage runs the command line on arguments it must refuse: building clients fails the
// run at once, so a missing check fails the test instead of waiting out -timeout.
func runJobUsage(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Job{Stdout: &out, Stderr: &errb, PollInterval: 10 * time.Millisecond,
		Clients: Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) {
			t.Errorf("bad usage %q got as far as building clients", args)
			return clientset.Clients{}, errors.New("bad usage built clients")
		}}}
	return c.Main(args), errb.String()
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
		{"flag without value", []string{"-rollout"}, "flag needs an argument: --rollout"},
		{"unknown flag", []string{"-configmap", "a"}, "unknown flag -configmap: did you mean --configmaps?"},
		{"bad name", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "Web_Config"}, `-configmaps[0]: "Web_Config" is not a valid object name`},
		{"qualified name", []string{"-rollout", "web", "-namespace", "shop", "-secrets", "ns/s"}, "namespace-qualified"},
		{"duplicate", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a,b,a"}, "listed twice"},
		{"stray argument", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "b"}, `unexpected argument "b"`},
		{"bad timeout", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-timeout", "0s"}, "-timeout 0s: must be at least 1s"},
		{"negative timeout", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-timeout", "-5m"}, "-timeout -5m0s: must be at least 1s"},
		{"timeout too long", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-timeout", "1h0m1s"}, "-timeout 1h0m1s: must be at most 1h"},
		{"timeout typo", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-timeout", "5h"}, "-timeout 5h0m0s: must be at most 1h"},
		{"uppercase rollout", []string{"-rollout", "Web", "-namespace", "shop", "-configmaps", "a"}, `-rollout "Web" is not a valid Rollout name (a DNS-1123 subdomain): a lowercase RFC 1123 subdomain`},
		{"rollout with slash", []string{"-rollout", "shop/web", "-namespace", "shop", "-configmaps", "a"}, `-rollout "shop/web" is not a valid Rollout name`},
		{"rollout too long", []string{"-rollout", strings.Repeat("w", 254), "-namespace", "shop", "-configmaps", "a"}, "must be no more than 253 characters"},
		{"namespace with dot", []string{"-rollout", "web", "-namespace", "shop.prod", "-configmaps", "a"}, `-namespace "shop.prod" is not a valid namespace name (a DNS-1123 label): must not contain dots`},
		{"namespace too long", []string{"-rollout", "web", "-namespace", strings.Repeat("n", 64), "-configmaps", "a"}, "must be no more than 63 characters"},
		{"unexpanded namespace", []string{"-rollout", "web", "-namespace", "$(POD_NAMESPACE)", "-configmaps", "a"}, "unexpanded $(VAR) reference: define that env var"},
		{"selector without discover", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-selector", "a=b"}, "-selector only applies with -discover"},
		{"bad selector", []string{"-rollout", "web", "-namespace", "shop", "-discover", "-selector", "a==b=c"}, `-selector "a==b=c"`},
		{"bad log level", []string{"-rollout", "web", "-namespace", "shop", "-configmaps", "a", "-log-level", "loud"}, `log level "loud"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runJobUsage(t, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
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
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing names", []string{"-configmaps", "Bad_Name,a,a", "-timeout", "0s", "-opt-in-selector", "!x", "-expect-template-annotation", "novalue", "extra"}, []string{
			`configmap-attacher: -opt-in-selector "!x": selects every object without a given label`,
			`configmap-attacher: unexpected argument "extra"`,
			"configmap-attacher: -rollout is required",
			"configmap-attacher: -namespace is required",
			`configmap-attacher: -configmaps[0]: "Bad_Name" is not a valid object name`,
			`configmap-attacher: -configmaps[2]: "a" is listed twice`,
			"configmap-attacher: -timeout 0s: must be at least 1s",
			`configmap-attacher: -expect-template-annotation "novalue": want KEY=VALUE`,
		}},
		{"invalid names", []string{"-rollout", "Web_1", "-namespace", "shop.prod", "-configmaps", "a", "-timeout", "24h"}, []string{
			`configmap-attacher: -rollout "Web_1" is not a valid Rollout name (a DNS-1123 subdomain)`,
			`configmap-attacher: -namespace "shop.prod" is not a valid namespace name (a DNS-1123 label)`,
			"configmap-attacher: -timeout 24h0m0s: must be at most 1h",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runJobUsage(t, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			want := append(tc.want, "Run configmap-attacher --help for usage.")
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != len(want) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(want), stderr)
			}
			for i, w := range want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d %q, want it to start with %q", i, lines[i], w)
				}
			}
		})
	}
}

// The bounds themselves are accepted: names at their longest, a dotted Rollout name, -timeout
// 1s and 1h.
func TestJobValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    jobOptions
	}{
		{"shortest timeout", jobOptions{rollout: "web", namespace: "shop", configMaps: "a", timeout: time.Second}},
		{"longest timeout", jobOptions{rollout: "web", namespace: "shop", configMaps: "a", timeout: time.Hour}},
		{"dotted rollout", jobOptions{rollout: "web.v2", namespace: "shop", configMaps: "a", timeout: time.Minute}},
		{"longest names", jobOptions{rollout: strings.Repeat("w", 253), namespace: strings.Repeat("n", 63), configMaps: "a", timeout: time.Minute}},
		{"digits", jobOptions{rollout: "0web", namespace: "0shop", configMaps: "a", timeout: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.selector, tc.o.optInSelector = cli.NewSelector(""), cli.NewSelector(plugin.OptInLabel+"=true")
			// What the flag set defaults and the Job gives: validate also configures the logger.
			tc.o.Job, tc.o.logLevel, tc.o.logFormat = &Job{Stderr: io.Discard}, "info", "text"
			problems := tc.o.validate()
			req := tc.o.req
			if len(problems) > 0 {
				t.Fatalf("problems: %q", problems)
			}
			if req.Rollout != tc.o.rollout || req.Namespace != tc.o.namespace || req.Config.Timeout.Duration != tc.o.timeout {
				t.Errorf("request %s/%s timeout %s, want %s/%s timeout %s", req.Namespace, req.Rollout, req.Config.Timeout.Duration, tc.o.namespace, tc.o.rollout, tc.o.timeout)
			}
		})
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
