package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func runCLI(t *testing.T, kube kubernetes.Interface, ro rolloutsclient.Interface, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &CLI{Stdout: &out, Stderr: &errb, PollInterval: 10 * time.Millisecond,
		Getenv:     func(k string) string { return map[string]string{"JOB_NAME": "attach-web"}[k] },
		NewClients: func(ClientOptions) (Clients, error) { c := clientsOf(kube); c.Rollouts = ro; return c, nil }}
	code := c.Main(args)
	return code, out.String(), errb.String()
}

func TestCLIUsageErrors(t *testing.T) {
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
			code, _, stderr := runCLI(t, kube, rolloutsfake.NewSimpleClientset(), tc.args...)
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
	code, out, _ := runCLI(t, nil, nil, "-version")
	if code != 0 || !strings.HasPrefix(out, "configmap-attacher ") {
		t.Errorf("-version: %d %q", code, out)
	}
}

// TestCLIWaitsForNewReplicaSet: started before the controller caught up (stale status, no
// new ReplicaSet), it waits and then attaches to the new ReplicaSet only.
func TestCLIWaitsForNewReplicaSet(t *testing.T) {
	ro := testRollout(oldHash)
	ro.Generation = 4 // the new spec is applied, the controller has not seen it yet
	kube := fake.NewClientset(testRS(oldHash, "uid-old", rolloutUID, podSpec([]string{"cfg-old"}, nil)), testCM("cfg-old"), testCM("cfg-new"), testSecret("sec-new"))
	rc := rolloutsfake.NewSimpleClientset(ro)

	// The controller catches up after a few polls.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = kube.AppsV1().ReplicaSets(testNS).Create(t.Context(), testRS(curHash, "uid-cur", rolloutUID, podSpec([]string{"cfg-new"}, []string{"sec-new"})), metav1.CreateOptions{})
		r, _ := rc.ArgoprojV1alpha1().Rollouts(testNS).Get(t.Context(), "web", metav1.GetOptions{})
		r.Status.ObservedGeneration = "4"
		r.Status.CurrentPodHash = curHash
		_, _ = rc.ArgoprojV1alpha1().Rollouts(testNS).Update(t.Context(), r, metav1.UpdateOptions{})
	}()
	code, out, stderr := runCLI(t, kube, rc, "-rollout", "web", "-namespace", testNS, "-configmaps", "cfg-new, ", "-secrets", "sec-new", "-timeout", "10s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "attached 1 ConfigMap and 1 Secret to ReplicaSet web-" + curHash + " of Rollout shop/web\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if !strings.Contains(stderr, "waiting for the Rollouts controller to observe generation 4") || !strings.Contains(stderr, "attach-web") {
		t.Errorf("stderr lacks the wait or the job name: %s", stderr)
	}
	if !hasOwner(owners(t, kube, KindConfigMap, "cfg-new"), "uid-cur") || !hasOwner(owners(t, kube, KindSecret, "sec-new"), "uid-cur") {
		t.Error("not attached to the new ReplicaSet")
	}
	if len(owners(t, kube, KindConfigMap, "cfg-old")) != 0 {
		t.Error("touched an unlisted object")
	}
	if strings.Contains(stderr, "s3cr3t") || strings.Contains(stderr, "color: blue") {
		t.Error("object data was logged")
	}
}

func TestCLITimesOut(t *testing.T) {
	ro := testRollout(curHash)
	// The ReplicaSet of the current spec exists but no template uses the listed object: the
	// rule table fails at once instead of waiting for a template change that cannot come.
	kube := fake.NewClientset(testRS(curHash, "uid-cur", rolloutUID, podSpec([]string{"cfg-new"}, nil)), testCM("other"))
	start := time.Now()
	code, _, stderr := runCLI(t, kube, rolloutsfake.NewSimpleClientset(ro), "-rollout", "web", "-namespace", testNS, "-configmaps", "other", "-timeout", "1m")
	if code != ExitFail || !strings.Contains(stderr, "refusing to attach ConfigMap other: no ReplicaSet of Rollout shop/web references it") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s: must not wait out the timeout", d)
	}
	if len(owners(t, kube, KindConfigMap, "other")) != 0 {
		t.Error("wrote on timeout")
	}
	// A missing Rollout is waited for too, and the message says so.
	code, _, stderr = runCLI(t, kube, rolloutsfake.NewSimpleClientset(), "-rollout", "web", "-namespace", testNS, "-configmaps", "other", "-timeout", "1s")
	if code != ExitFail || !strings.Contains(stderr, "waiting for Rollout shop/web to exist") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestCLIMissingObjectFails(t *testing.T) {
	ro := testRollout(curHash)
	kube := fake.NewClientset(testRS(curHash, "uid-cur", rolloutUID, podSpec([]string{"cfg-new"}, nil)))
	code, _, stderr := runCLI(t, kube, rolloutsfake.NewSimpleClientset(ro), "-rollout", "web", "-namespace", testNS, "-configmaps", "cfg-new", "-timeout", "5s")
	if code != ExitFail || !strings.Contains(stderr, "not found in namespace shop: ConfigMap cfg-new") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestCLIWorkloadRef(t *testing.T) {
	ro := testRollout(curHash)
	ro.Spec.Selector = nil
	ro.Spec.WorkloadRef = &v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	ro.Status.WorkloadObservedGeneration = "1"
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Generation: 2},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	kube := fake.NewClientset(d, testRS(curHash, "uid-cur", rolloutUID, podSpec([]string{"cfg-new"}, nil)), testCM("cfg-new"))
	rc := rolloutsfake.NewSimpleClientset(ro)
	code, _, stderr := runCLI(t, kube, rc, "-rollout", "web", "-namespace", testNS, "-configmaps", "cfg-new", "-timeout", "1s")
	if code != ExitFail || !strings.Contains(stderr, "observe generation 2 of Deployment shop/web") {
		t.Fatalf("must wait for the Deployment's generation: %d %s", code, stderr)
	}
	ro.Status.WorkloadObservedGeneration = "2"
	_, _ = rc.ArgoprojV1alpha1().Rollouts(testNS).UpdateStatus(t.Context(), ro, metav1.UpdateOptions{})
	code, _, stderr = runCLI(t, kube, rc, "-rollout", "web", "-namespace", testNS, "-configmaps", "cfg-new", "-timeout", "5s")
	if code != 0 || !hasOwner(owners(t, kube, KindConfigMap, "cfg-new"), "uid-cur") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestCLIDiscoverAndDryRun(t *testing.T) {
	kube := historyWorld()
	rc := rolloutsfake.NewSimpleClientset(testRollout(curHash))
	code, out, stderr := runCLI(t, kube, rc, "-rollout", "web", "-namespace", testNS, "-discover", "-dry-run", "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "dry run, nothing written") || !strings.Contains(out, "discover would add 6 owner reference(s)") {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	if writes(kube) != 0 {
		t.Fatalf("dry run wrote")
	}
	code, out, stderr = runCLI(t, kube, rc, "-rollout", "web", "-namespace", testNS, "-discover", "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "discover: added 6 owner reference(s)") {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	if !hasOwner(owners(t, kube, KindConfigMap, "cfg-1"), "uid-1") {
		t.Error("first revision not attached")
	}
	// The run recorded a Normal event on the Rollout before exiting.
	evs, _ := kube.CoreV1().Events(testNS).List(t.Context(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != ReasonAttached {
		t.Errorf("events %v", evs.Items)
	}
}
