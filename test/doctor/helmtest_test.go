package doctor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// helmVersion is the helm hack/build-binaries.sh builds (test/chart's HelmVersion).
const helmVersion = "v3.22.0"

const image = "ghcr.io/configmap-attacher/configmap-attacher"

// helm runs the cached helm (failing under CI=true, skipping otherwise, when it is missing)
// with an isolated HOME and the admin kubeconfig.
func helm(t *testing.T, c *cluster.Cluster, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(cluster.CacheDir(), "helm-"+helmVersion, "helm")
	if _, err := os.Stat(bin); err != nil {
		cluster.SkipOrFail(t, fmt.Errorf("%w: %s missing (hack/build-binaries.sh helm)", cluster.ErrUnavailable, bin))
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "c"), "HELM_CONFIG_HOME="+filepath.Join(home, "g"),
		"HELM_DATA_HOME="+filepath.Join(home, "d"), "KUBECONFIG="+c.KubeconfigPath)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String(), nil
}

// TestHelmTestHook: the chart's `helm test` hook, three ways. Rendered by the real helm and
// applied with a server-side dry run; its Pod's exact arguments run as the hook's own
// ServiceAccount (impersonated, with only the hook's RBAC applied) against the release: exit 0,
// and exit 1 once the hook's Lease grant is removed (the RBAC is what makes it pass). Then a
// real `helm test`: the fake kubelet runs the release's controller pod and the hook Pod as the
// local binary with their ServiceAccounts' tokens; it passes, deletes its hook resources, and
// fails when the hook's metrics URL points at nothing.
func TestHelmTestHook(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	cs := c.Client(t)
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	appNS := c.Namespace(t)
	app(t, cs, appNS)
	rel := c.Namespace(t)

	// The release's pods run as the local binary, each as its ServiceAccount.
	logs := filepath.Join(c.Dir, "helmtest-pods")
	kubelet := cluster.StartFakeKubelet(cs)
	t.Cleanup(kubelet.Stop)
	kubelet.RunImage(image, cluster.PodRunner{Binary: bin, LogDir: logs, Timeout: 4 * time.Minute,
		Kubeconfig: func(ctx context.Context, ns, sa string) (string, error) {
			return cluster.ServiceAccountKubeconfig(ctx, c, cs, ns, sa, t.TempDir())
		}})
	ports, err := cluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`replicas: 1
logFormat: text
namespaces: [%s]
metrics: {bindAddress: 127.0.0.1, port: %d}
health: {bindAddress: 127.0.0.1, port: %d}
tests:
  doctor:
    metricsURL: %s
`, appNS, ports[0], ports[1], metricsURL)), 0o644); err != nil {
		t.Fatal(err)
	}

	// 1. Rendered and dry-run on the server.
	manifest, err := helm(t, c, "template", "cma", filepath.Join(cluster.RepoRoot(), "charts", "configmap-attacher"), "-n", rel, "-f", values,
		"--show-only", "templates/tests/doctor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	var rbac []string
	var podDoc string
	for _, doc := range strings.Split(manifest, "\n---") {
		var m struct {
			Kind     string
			Metadata struct{ Annotations map[string]string }
		}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind != "" && m.Metadata.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("%s is not a test hook", m.Kind)
		}
		if m.Kind == "Pod" {
			podDoc, pod = doc, &corev1.Pod{}
			if err := yaml.Unmarshal([]byte(doc), pod); err != nil {
				t.Fatal(err)
			}
		} else if m.Kind != "" {
			rbac = append(rbac, doc)
		}
	}
	if pod == nil || len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].Args) == 0 || pod.Spec.Containers[0].Args[0] != "doctor" {
		t.Fatalf("the hook's Pod does not run doctor:\n%s", manifest)
	}
	hookArgs := pod.Spec.Containers[0].Args[1:]
	// The Pod's dry run needs its ServiceAccount (the ServiceAccount admission): below.
	kubectlStdin(t, c, []byte(strings.Join(rbac, "\n---\n")), "apply", "--dry-run=server", "-f", "-")
	t.Logf("hook args: %s", strings.Join(hookArgs, " "))

	// The release, its controller run by the fake kubelet.
	if _, err := helm(t, c, "install", "cma", filepath.Join(cluster.RepoRoot(), "charts", "configmap-attacher"), "-n", rel, "-f", values); err != nil {
		t.Fatal(err)
	}
	// --no-hooks: the uninstall cleanup hook's Job is no part of this test.
	t.Cleanup(func() { _, _ = helm(t, c, "uninstall", "cma", "-n", rel, "--no-hooks") })
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the release's Lease held", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases(rel).Get(ctx, "cma-configmap-attacher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, fmt.Sprintf("%v; pod runs %+v", err, kubelet.Runs(rel))
		}
		return true, ""
	})

	// 2. Exactly the hook's args, as the hook's ServiceAccount with only the hook's RBAC.
	kubectlStdin(t, c, []byte(strings.Join(rbac, "\n---\n")), "apply", "-f", "-")
	kubectlStdin(t, c, []byte(podDoc), "apply", "--dry-run=server", "-f", "-")
	sa := pod.Spec.ServiceAccountName
	user := "system:serviceaccount:" + rel + ":" + sa
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		{Verb: "list", Group: "apps", Resource: "replicasets", Namespace: appNS},
		{Verb: "list", Group: "apps", Resource: "deployments", Namespace: rel},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: rel, Name: "cma-configmap-attacher"},
	} {
		if err := cluster.WaitForAccess(ctx, cs, user, a); err != nil {
			t.Fatal(err)
		}
	}
	imp := rest.CopyConfig(c.AdminConfig)
	imp.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + rel, "system:authenticated"}}
	kc := c.WriteKubeconfig(t, imp)
	out := expect(t, bin, kc, 0, hookArgs, "0 error(s)", "OK      controller/install     Deployment "+rel+"/cma-configmap-attacher", "OK      rbac/controller", "OK      controller/lease", "OK      controller/metrics", "OK      objects")
	t.Logf("as %s:\n%s", user, out)
	// Planted: without the hook's Lease grant the same run fails, naming the grant.
	if err := cluster.Kubectl(c, "-n", rel, "delete", "rolebinding", sa+"-lease"); err != nil {
		t.Fatal(err)
	}
	out = expect(t, bin, kc, 1, hookArgs, "ERROR   controller/lease", "forbidden", "grant the identity running doctor get on leases")
	t.Logf("without the Lease grant:\n%s", firstErrors(out))
	// Planted: without the discovery grant doctor cannot find the release, and says so.
	if err := cluster.Kubectl(c, "-n", rel, "delete", "rolebinding", sa+"-discovery"); err != nil {
		t.Fatal(err)
	}
	out = expect(t, bin, kc, 1, hookArgs, "ERROR   controller/install", "cannot list them", "grant the identity running doctor list on deployments.apps")
	t.Logf("without the discovery grant:\n%s", firstErrors(out))
	kubectlStdin(t, c, []byte(strings.Join(rbac, "\n---\n")), "delete", "--ignore-not-found", "-f", "-")

	// 3. A real `helm test`.
	start := time.Now()
	out, err = helm(t, c, "test", "cma", "-n", rel, "--timeout", "3m")
	if err != nil || !strings.Contains(out, "Phase:          Succeeded") {
		t.Fatalf("helm test: %v\n%s\nhook pod logs:\n%s", err, out, readLogs(logs, rel))
	}
	t.Logf("helm test passed in %v", time.Since(start).Round(time.Millisecond))
	// The Pod ran doctor for real (the fake kubelet's run of the local binary, as its token).
	if l := readLogs(logs, rel); !strings.Contains(l, "0 error(s)") || !strings.Contains(l, "OK      controller/lease") {
		t.Errorf("the hook Pod's log:\n%s", l)
	}
	if _, err := cs.CoreV1().ServiceAccounts(rel).Get(ctx, sa, metav1.GetOptions{}); err == nil {
		t.Errorf("ServiceAccount %s outlived the passed test (hook-delete-policy hook-succeeded)", sa)
	}
	// Planted: the hook's metrics URL points at nothing: helm test fails.
	if _, err := helm(t, c, "upgrade", "cma", filepath.Join(cluster.RepoRoot(), "charts", "configmap-attacher"), "-n", rel, "-f", values,
		"--set", "tests.doctor.metricsURL=http://127.0.0.1:1/metrics"); err != nil {
		t.Fatal(err)
	}
	out, err = helm(t, c, "test", "cma", "-n", rel, "--timeout", "3m")
	if err == nil {
		t.Fatalf("helm test passed with a metrics URL that answers nothing:\n%s", out)
	}
	if l := readLogs(logs, rel); !strings.Contains(l, "ERROR   controller/metrics") {
		t.Errorf("the failed hook's log does not name the metrics endpoint:\n%s", l)
	}
}

// readLogs is the logs of the fake kubelet's runs of the doctor Pod in ns.
func readLogs(dir, ns string) string {
	b, _ := os.ReadFile(filepath.Join(dir, ns+"_cma-configmap-attacher-doctor.log"))
	return string(b)
}
