package chart

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const optInLabel = "configmap-attacher/revisioned"

// TestHelmInstall installs the chart into the real control plane and runs what its Deployment
// describes: the built binary with exactly the rendered container args (plus -kubeconfig with
// a TokenRequest token of the chart's ServiceAccount, standing in for the in-cluster config),
// the fake kubelet marking the chart's pods Ready. An opted-in ConfigMap of a Deployment's
// ReplicaSet is adopted under exactly the chart's RBAC, the lease is taken, /readyz answers,
// and every metric the chart's dashboard and alerts query is in the /metrics scrape. It
// measures install → first adoption.
//
// Twice: with the default cluster-wide RBAC, and with rbac.scope: namespaces (a Role in the
// application's namespace only, the controller watching only it).
func TestHelmInstall(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	if err := cluster.InstallRolloutCRD(c); err != nil { // the default workloads: both kinds when the CRD is there
		t.Fatal(err)
	}
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := cluster.StartFakeKubelet(c.Client(t))
	t.Cleanup(kubelet.Stop)
	t.Run("cluster-rbac", func(t *testing.T) {
		helmInstall(t, c, bin, func(app string) string { return "" })
	})
	t.Run("per-namespace-rbac", func(t *testing.T) {
		helmInstall(t, c, bin, func(app string) string {
			return fmt.Sprintf("rbac: {scope: namespaces}\nnamespaces: [%s]\n", app)
		})
	})
	// The monitoring and extension knobs installed for real (not only a dry run): a PodMonitor
	// instead of the ServiceMonitor, its alerts, a NetworkPolicy, a spread constraint, an extra
	// volume and an extra object the volume names.
	t.Run("podmonitor-networkpolicy-extras", func(t *testing.T) {
		crds := prometheusOperatorCRDs(t)
		for _, f := range append(crds, filepath.Join(filepath.Dir(crds[0]), "monitoring.coreos.com_podmonitors.yaml")) {
			if _, err := kubectl(c, nil, "apply", "--server-side", "-f", f); err != nil {
				t.Fatal(err)
			}
		}
		for _, crd := range []string{"podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"} {
			if _, err := kubectl(c, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+crd); err != nil {
				t.Fatal(err)
			}
		}
		var ns string
		helmInstall(t, c, bin, func(string) string {
			return "podMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n" +
				"networkPolicy: {enabled: true, metricsNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}\n" +
				"topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}]\n" +
				"extraVolumes: [{name: ca, configMap: {name: cma-ca}}]\nextraVolumeMounts: [{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]\n" +
				"extraObjects:\n  - |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: {{ .Release.Name }}-ca, namespace: {{ .Release.Namespace }}}\n    data: {ca.crt: x}\n"
		}, func(installed string) { ns = installed })
		for _, res := range []string{"podmonitor/cma-configmap-attacher", "prometheusrule/cma-configmap-attacher", "networkpolicy/cma-configmap-attacher", "configmap/cma-ca"} {
			if _, err := kubectl(c, nil, "-n", ns, "get", res); err != nil {
				t.Errorf("after helm install: %v", err)
			}
		}
	})
}

// TestHelmInstallWithoutRollouts: the chart's defaults on a control plane without the Rollout
// CRD (a cluster of plain Deployments, which the README names): the controller starts, says it
// watches Deployments only, and adopts the Deployment's ConfigMap. The chart used to pass
// -workloads=rollouts,deployments always, and the controller refused to start.
func TestHelmInstallWithoutRollouts(t *testing.T) {
	cluster.Require(t, shared, sharedErr)    // the components are there (or skip, or fail on CI)
	c := cluster.Start(t, cluster.Options{}) // its own: the shared one gets the Rollout CRD
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := cluster.StartFakeKubelet(c.Client(t))
	t.Cleanup(kubelet.Stop)
	logPath := helmInstall(t, c, bin, func(string) string { return "" })
	if log, _ := os.ReadFile(logPath); !strings.Contains(string(log), "watching Deployments only") {
		t.Errorf("the controller log does not say it watches Deployments only:\n%s", tail(logPath, 20))
	}
}

// helmInstall installs the chart with extraValues, runs its controller and checks it; it
// returns the controller's log path. release, if given, is told the release's namespace.
func helmInstall(t *testing.T, c *cluster.Cluster, bin string, extraValues func(app string) string, release ...func(ns string)) string {
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The application, before the controller exists: a Deployment whose ReplicaSet uses an
	// opted-in ConfigMap, and a second opted-in ConfigMap that an admission policy refuses to
	// change (so that the error metrics the dashboard and the alerts query exist).
	app := c.Namespace(t)
	denyUpdates(t, c, app, "web-denied")
	for _, n := range []string{"web-config-1", "web-denied"} {
		if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{optInLabel: "true"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := int32(1)
	no := false
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: app},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1",
					EnvFrom:      []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-denied"}}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}}}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "web-config-1"}}}}}}}}}
	if _, err := cs.AppsV1().Deployments(app).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := waitReplicaSet(t, ctx, cs, app, "web")

	// helm install, as a user would (listeners on loopback: the binary runs on this host).
	ns := c.Namespace(t)
	for _, f := range release {
		f(ns)
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf("metrics: {bindAddress: 127.0.0.1, port: %d}\nhealth: {bindAddress: 127.0.0.1, port: %d}\nlogFormat: text\n%s",
		ports[0], ports[1], extraValues(app))), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := helm(t, c.KubeconfigPath, "install", "cma", chartDir(), "-n", ns, "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	installed := time.Since(start)
	t.Cleanup(func() {
		// --no-hooks: the cleanup hook's pod would never run (no kubelet runs a Job's pod here).
		if _, err := helm(t, c.KubeconfigPath, "uninstall", "cma", "-n", ns, "--no-hooks"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	if !strings.Contains(out, "STATUS: deployed") {
		t.Errorf("helm install printed:\n%s", out)
	}

	// The Deployment as the apiserver has it: its container args, its ServiceAccount.
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "cma-configmap-attacher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if len(ctr.Command) != 0 || len(ctr.Args) == 0 || ctr.Args[0] != "controller" {
		t.Fatalf("container command %q args %q: want the image's entrypoint with controller ...", ctr.Command, ctr.Args)
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, c, cs, ns, sa, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(ctr.Args), "-kubeconfig", kubeconfig)
	env := []string{"POD_NAMESPACE=" + ns} // the Deployment's fieldRef
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			env = append(env, fmt.Sprintf("%s=%d", e.Name, ctr.Resources.Limits.Memory().Value())) // what the kubelet sets
		case e.Name != "POD_NAMESPACE":
			t.Fatalf("env %s: a source this test does not emulate: %+v", e.Name, e.ValueFrom)
		}
	}
	logPath := filepath.Join(c.Dir, "chart-controller-"+ns+".log")
	proc := startProcess(t, bin, args, env, logPath)
	t.Logf("running %s %s", filepath.Base(bin), strings.Join(args, " "))

	// The first adoption.
	var adopted time.Duration
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "web-config-1 owned by ReplicaSet "+rs.Name, func() (bool, string) {
		if !proc.running() { // no need to wait for the deadline
			t.Fatalf("controller exited before adopting: %s", tail(logPath, 20))
		}
		cm, err := cs.CoreV1().ConfigMaps(app).Get(ctx, "web-config-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range cm.OwnerReferences {
			if o.UID == rs.UID && o.Kind == "ReplicaSet" && o.Name == rs.Name {
				adopted = time.Since(start)
				return true, ""
			}
		}
		return false, fmt.Sprintf("owners %v; controller log: %s", cm.OwnerReferences, tail(logPath, 5))
	})
	if !proc.running() {
		t.Fatalf("controller exited: %s", tail(logPath, 20))
	}

	// The lease, readiness, the chart's pods Ready (fake kubelet), and the scrape.
	lease := d.Name // leaderElection.id defaults to the full name
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "lease "+lease+" held", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, fmt.Sprint(err)
		}
		return true, ""
	})
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "/readyz 200", func() (bool, string) {
		code, body := httpGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if code, body := httpGet(fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "the chart's Deployment available", func() (bool, string) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == *d.Spec.Replicas, fmt.Sprintf("%d/%d available", d.Status.AvailableReplicas, *d.Spec.Replicas)
	})

	// Every metric the dashboard and the alerts query, against a real scrape.
	objs, _, err := render(t, "prometheusRule: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	used := queriedMetrics(t, objs)
	var missing []string
	var scraped map[string]bool
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second) // gauges and counters appear within a reconcile
	defer scancel()
	cluster.WaitUntil(t, sctx, 50*time.Millisecond, "every queried metric in the scrape", func() (bool, string) {
		code, body := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]))
		if code != http.StatusOK {
			return false, fmt.Sprintf("/metrics: %d", code)
		}
		scraped = scrapedNames([]byte(body))
		missing = missing[:0]
		for m := range used {
			if !scraped[m] {
				missing = append(missing, m)
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, fmt.Sprintf("not scraped: %v", missing)
	})
	var names []string
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	t.Logf("helm install in %s; install → first adoption %s; %d queried metrics all scraped: %s",
		installed.Round(time.Millisecond), adopted.Round(time.Millisecond), len(names), strings.Join(names, " "))
	return logPath
}

// denyUpdates makes the apiserver refuse every UPDATE (PATCH included) of ConfigMap name in ns,
// with a ValidatingAdmissionPolicy, and waits until it is in force.
func denyUpdates(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	policy := "cma-chart-deny-" + ns
	c.ApplyYAML(t, nil, []byte(fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["UPDATE"]
        resources: ["configmaps"]
  validations:
    - expression: "object.metadata.name != '%[3]s'"
      message: "the chart test refuses changes to %[3]s"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: %[2]s}
`, policy, ns, name)), "")
	cs := c.Client(t)
	ctx := context.Background()
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, policy, metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
	})
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, probe, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsConflict(err) {
			break // refused by the policy
		}
		if time.Now().After(deadline) {
			t.Fatalf("ValidatingAdmissionPolicy %s not in force after 30s", policy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitReplicaSet(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, deployment string) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "the ReplicaSet of Deployment "+deployment, func() (bool, string) {
		l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range l.Items {
			for _, o := range l.Items[i].OwnerReferences {
				if o.Kind == "Deployment" && o.Name == deployment {
					rs = &l.Items[i]
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d ReplicaSets", len(l.Items))
	})
	return rs
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// startProcess starts bin with its output in logPath; SIGTERM (then SIGKILL) at cleanup, by PID.
func startProcess(t *testing.T, bin string, args, env []string, logPath string) *process {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("controller log %s:\n%s", logPath, tail(logPath, 40))
		}
	})
	return p
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
