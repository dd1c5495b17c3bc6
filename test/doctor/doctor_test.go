package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	rolloutsNS = cluster.ControllerNamespace // argo-rollouts
	optIn      = "configmap-attacher/revisioned"
)

// report is doctor's -o json.
type report struct {
	Findings []struct{ Severity, Check, Subject, Message, Fix string }
	Errors   int
	Warnings int
}

// doctorRun runs the binary with args (and -kubeconfig kc) and returns the exit code, stdout
// and stderr.
func doctorRun(t *testing.T, bin, kc string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"doctor"}, args...), "-kubeconfig", kc)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("doctor: %v", err)
	return -1, "", ""
}

// expect runs doctor until its exit code is want and its output has every wants (RBAC and
// informers take a moment to reach the authorizer and the apiserver's caches), up to 20 s,
// and returns the last output.
func expect(t *testing.T, bin, kc string, want int, args []string, wants ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, stderr := doctorRun(t, bin, kc, args...)
		ok := code == want
		for _, w := range wants {
			ok = ok && strings.Contains(out, w)
		}
		if ok {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("doctor %s: exit %d (want %d), output lacks one of %q:\n%s%s", strings.Join(args, " "), code, want, wants, out, stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// kubectlStdin runs the cluster's kubectl as admin with stdin.
func kubectlStdin(t *testing.T, c *cluster.Cluster, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// helmValues is the controller part of examples/helm-values.yaml.
type helmValues struct {
	Controller struct {
		InitContainers []corev1.Container   `json:"initContainers"`
		Volumes        []corev1.Volume      `json:"volumes"`
		VolumeMounts   []corev1.VolumeMount `json:"volumeMounts"`
	} `json:"controller"`
}

// rolloutsDeployment is the Argo Rollouts controller's Deployment (replicas 0: there is no
// kubelet) with exactly examples/helm-values.yaml's initContainer, volume and mount.
func rolloutsDeployment(t *testing.T) *appsv1.Deployment {
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "helm-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v helmValues
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	zero, yes, no := int32(0), true, false
	labels := map[string]string{"app.kubernetes.io/name": "argo-rollouts"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts", Namespace: rolloutsNS},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "argo-rollouts",
				SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				InitContainers:     v.Controller.InitContainers,
				Containers: []corev1.Container{{Name: "argo-rollouts", Image: "quay.io/argoproj/argo-rollouts:v1.10.2",
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					VolumeMounts:    v.Controller.VolumeMounts}},
				Volumes: v.Controller.Volumes,
			}}}}
}

// installStep sets the step plugin up as docs/install.md describes it.
func installStep(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, app string) {
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rolloutsNS,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(rolloutsNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mod, err := cluster.RolloutsModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	binding := filepath.Join(t.TempDir(), "binding.yaml")
	if err := os.WriteFile(binding, []byte(cluster.RolloutsControllerBinding), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(mod, "manifests", "role", "argo-rollouts-clusterrole.yaml"), binding,
		filepath.Join(cluster.RepoRoot(), "examples", "rbac-step-plugin.yaml"),
		filepath.Join(cluster.RepoRoot(), "examples", "argo-rollouts-config.yaml")} {
		if err := cluster.Kubectl(c, "apply", "--server-side", "-f", f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.AppsV1().Deployments(rolloutsNS).Create(ctx, rolloutsDeployment(t), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForAccess(ctx, cs, "system:serviceaccount:argo-rollouts:argo-rollouts", authorizationv1.ResourceAttributes{Verb: "patch", Resource: "secrets", Namespace: app}); err != nil {
		t.Fatal(err)
	}
}

// app makes Deployment web in ns with two revisions: web-config-1 then web-config-2 (opted
// in, Argo CD-tracked with its prune protection), both with the static ca-bundle.
func app(t *testing.T, cs kubernetes.Interface, ns string) {
	ctx := context.Background()
	for _, n := range []string{"web-config-1", "web-config-2", "ca-bundle"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns,
			Annotations: map[string]string{"argocd.argoproj.io/tracking-id": "web:/ConfigMap:" + ns + "/" + n}}, Data: map[string]string{"k": "v"}}
		if n != "ca-bundle" {
			cm.Labels = map[string]string{optIn: "true"}
			cm.Annotations["argocd.argoproj.io/sync-options"] = "Prune=false"
			cm.Annotations["argocd.argoproj.io/compare-options"] = "IgnoreExtraneous"
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zero, no := int32(0), false
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1",
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "ca-bundle"}}}}}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "web-config-1"}}}}}}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicaSets(t, cs, ns, 1)
	patch := `{"spec":{"template":{"spec":{"volumes":[{"name":"config","configMap":{"name":"web-config-2"}}]}}}}`
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicaSets(t, cs, ns, 2)
}

func waitReplicaSets(t *testing.T, cs kubernetes.Interface, ns string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, fmt.Sprintf("%d ReplicaSets of web", n), func() (bool, string) {
		l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == n, fmt.Sprintf("%d ReplicaSets", len(l.Items))
	})
}

func setStepPlugins(t *testing.T, cs kubernetes.Interface, entries string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"data": map[string]string{"stepPlugins": entries}})
	if _, err := cs.CoreV1().ConfigMaps(rolloutsNS).Patch(context.Background(), "argo-rollouts-config", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func patchDeployment(t *testing.T, cs kubernetes.Interface, ns, name string, pt types.PatchType, p string) {
	t.Helper()
	if _, err := cs.AppsV1().Deployments(ns).Patch(context.Background(), name, pt, []byte(p), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func patchConfigMap(t *testing.T, cs kubernetes.Interface, ns, name, p string) {
	t.Helper()
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDoctor: the step plugin and the controller mode installed as the examples say pass;
// then each problem is planted on the live objects, reported with its fix (exit 1), and
// undone.
func TestDoctor(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	cs := c.Client(t)
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	installStep(t, c, cs, ns)
	app(t, cs, ns)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kc, err := cluster.ControllerModeIdentity(ctx, c, cs)
	if err != nil {
		t.Fatal(err)
	}
	// doctor finds the install by examples/controller.yaml's Deployment (at 0 replicas: the
	// controller runs as a local process below, with the binary's default Lease name, which is
	// the one the example's args name).
	exampleDeployment(t, c, cs)
	cp, err := cluster.StartController(bin, "doctor", filepath.Join(c.Dir, "controller-doctor.log"), time.Minute,
		[]string{"POD_NAMESPACE=" + cluster.ControllerModeNamespace}, "-kubeconfig", kc,
		"-leader-election-lease-duration=3s", "-leader-election-renew-deadline=2s", "-leader-election-retry-period=500ms")
	t.Cleanup(cp.Stop)
	if err != nil {
		t.Fatal(err)
	}
	admin := c.KubeconfigPath
	args := []string{"-mode", "step,controller", "-namespaces", ns, "-metrics-url", cp.MetricsURL}

	start := time.Now()
	out := expect(t, bin, admin, 0, args, "0 error(s), 0 warning(s)")
	t.Logf("healthy (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, w := range []string{"OK      step/location", "OK      step/pod-security", "enforce=restricted admits", "OK      rbac/step", "OK      rbac/controller",
		"OK      controller/install     Deployment configmap-attacher/configmap-attacher", "OK      controller/lease       Lease configmap-attacher/configmap-attacher",
		"OK      controller/lease", "OK      controller/metrics", "2 revisioned ConfigMap(s)/Secret(s)"} {
		if !strings.Contains(out, w) {
			t.Errorf("healthy output lacks %q", w)
		}
	}
	if strings.Contains(out, "ca-bundle") {
		t.Error("the static ca-bundle was reported")
	}
	code, js, _ := doctorRun(t, bin, admin, append(args, "-o", "json")...)
	var rep report
	if err := json.Unmarshal([]byte(js), &rep); err != nil || code != 0 || rep.Errors != 0 || len(rep.Findings) < 9 {
		t.Errorf("-o json: exit %d, %v, %+v", code, err, rep)
	}

	good := `- name: configmap-attacher/configmap-attacher
  location: file:///home/argo-rollouts/plugins/configmap-attacher
`
	for _, tc := range []struct {
		name        string
		plant, undo func(t *testing.T)
		extra       []string
		wants       []string
	}{
		{"missing plugin entry",
			func(t *testing.T) { setStepPlugins(t, cs, "- name: other/plugin\n  location: file:///x/other\n") },
			func(t *testing.T) { setStepPlugins(t, cs, good) }, nil,
			[]string{`ERROR   step/registration`, `no entry named "configmap-attacher/configmap-attacher"`, "fix: add the entry of examples/argo-rollouts-config.yaml"}},
		{"bad location",
			func(t *testing.T) {
				setStepPlugins(t, cs, "- name: configmap-attacher/configmap-attacher\n  location: file:///home/argo-rollouts/other/configmap-attacher\n")
			},
			func(t *testing.T) { setStepPlugins(t, cs, good) }, nil,
			[]string{"ERROR   step/location", "mounts no volume at /home/argo-rollouts/other", "fix: add the initContainer running `install-plugin /plugins`"}},
		{"missing sha256",
			func(t *testing.T) {
				setStepPlugins(t, cs, "- name: configmap-attacher/configmap-attacher\n  location: https://github.com/configmap-attacher/configmap-attacher/releases/download/v0.1.0/configmap-attacher-step-linux-amd64\n")
			},
			func(t *testing.T) { setStepPlugins(t, cs, good) }, nil,
			[]string{"ERROR   step/location", "without a sha256", "fix: set sha256 to the asset's 64-hex digest"}},
		{"old Rollouts version",
			func(t *testing.T) {
				patchDeployment(t, cs, rolloutsNS, "argo-rollouts", types.StrategicMergePatchType, `{"spec":{"template":{"spec":{"containers":[{"name":"argo-rollouts","image":"quay.io/argoproj/argo-rollouts:v1.7.2"}]}}}}`)
			},
			func(t *testing.T) {
				patchDeployment(t, cs, rolloutsNS, "argo-rollouts", types.StrategicMergePatchType, `{"spec":{"template":{"spec":{"containers":[{"name":"argo-rollouts","image":"quay.io/argoproj/argo-rollouts:v1.10.2"}]}}}}`)
			}, nil,
			[]string{"ERROR   step/version", "is Argo Rollouts v1.7.2: step plugins need v1.8 or newer", "fix: upgrade Argo Rollouts"}},
		{"restricted namespace refuses the initContainer",
			func(t *testing.T) {
				patchDeployment(t, cs, rolloutsNS, "argo-rollouts", types.JSONPatchType, `[{"op":"remove","path":"/spec/template/spec/initContainers/0/securityContext"}]`)
			},
			func(t *testing.T) {
				b, _ := json.Marshal(rolloutsDeployment(t).Spec.Template.Spec.InitContainers[0].SecurityContext)
				patchDeployment(t, cs, rolloutsNS, "argo-rollouts", types.JSONPatchType, `[{"op":"add","path":"/spec/template/spec/initContainers/0/securityContext","value":`+string(b)+`}]`)
			}, nil,
			[]string{"ERROR   step/pod-security", "enforce=restricted refuses the pod of Deployment argo-rollouts", "allowPrivilegeEscalation != false", "fix: give the pod and every container the restricted securityContext"}},
		{"missing RBAC verb",
			func(t *testing.T) {
				if err := cluster.Kubectl(c, "delete", "clusterrolebinding", "configmap-attacher-step"); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T) {
				if err := cluster.Kubectl(c, "apply", "--server-side", "-f", filepath.Join(cluster.RepoRoot(), "examples", "rbac-step-plugin.yaml")); err != nil {
					t.Fatal(err)
				}
			}, nil,
			[]string{"ERROR   rbac/step", "in namespace " + ns + " may not patch configmaps, patch secrets, list statefulsets.apps", "list cronjobs.batch", "fix: apply examples/rbac-step-plugin.yaml"}},
		{"OwnerReferencesPermissionEnforcement without delete", func(t *testing.T) {}, func(t *testing.T) {},
			[]string{"-mode", "step", "-ownerreferences-enforcement"},
			[]string{"ERROR   rbac/step", "in namespace " + ns + " may not delete configmaps, delete secrets", "examples/rbac-ownerreferences-enforcement.yaml"}},
		{"unlabelled referenced object",
			func(t *testing.T) {
				patchConfigMap(t, cs, ns, "web-config-2", `{"metadata":{"labels":{"`+optIn+`":null}}}`)
			},
			func(t *testing.T) {
				patchConfigMap(t, cs, ns, "web-config-2", `{"metadata":{"labels":{"`+optIn+`":"true"}}}`)
			}, nil,
			[]string{"ERROR   objects/opt-in", "ConfigMap " + ns + "/web-config-2: revisioned (used by Deployment web)", "fix: label it at its source"}},
		{"missing prune protection",
			func(t *testing.T) {
				patchConfigMap(t, cs, ns, "web-config-1", `{"metadata":{"labels":{"kustomize.toolkit.fluxcd.io/name":"web"}}}`)
			},
			func(t *testing.T) {
				patchConfigMap(t, cs, ns, "web-config-1", `{"metadata":{"labels":{"kustomize.toolkit.fluxcd.io/name":null}}}`)
			}, nil,
			[]string{"ERROR   objects/prune", "tracked by Flux without kustomize.toolkit.fluxcd.io/prune: disabled", "fix: annotate it (at its source) kustomize.toolkit.fluxcd.io/prune: disabled"}},
		{"step config the step refuses",
			func(t *testing.T) {
				kubectlStdin(t, c, []byte(stepRolloutYAML(`{"configmaps": ["web-config-2"]}`)), "-n", ns, "apply", "-f", "-")
			},
			func(t *testing.T) {
				if err := cluster.Kubectl(c, "-n", ns, "delete", "rollout", "api"); err != nil {
					t.Fatal(err)
				}
			}, nil,
			[]string{"ERROR   objects/step-config", "Rollout " + ns + "/api step 0: the step fails on its config", `"configmaps"`, "fix: fix the step's config"}},
		{"unlabelled object a step names",
			func(t *testing.T) {
				if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-secret-1"},
					StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				kubectlStdin(t, c, []byte(stepRolloutYAML(`{"configMaps": ["web-config-2"], "secrets": ["api-secret-1"]}`)), "-n", ns, "apply", "-f", "-")
			},
			func(t *testing.T) {
				if err := cluster.Kubectl(c, "-n", ns, "delete", "rollout", "api"); err != nil {
					t.Fatal(err)
				}
			}, nil,
			[]string{"ERROR   objects/opt-in", "Secret " + ns + "/api-secret-1: revisioned (used by Rollout api)", "kubectl -n " + ns + " label secret api-secret-1"}},
		{"metrics endpoint of another process", func(t *testing.T) {}, func(t *testing.T) {},
			[]string{"-metrics-url", cp.HealthURL + "/readyz"},
			[]string{"ERROR   controller/metrics", "without a configmap_attacher_controller_* series"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.plant(t)
			out := expect(t, bin, admin, 1, append(append([]string(nil), args...), tc.extra...), append(tc.wants, "1 error(s)")...)
			t.Logf("%s", firstErrors(out))
			tc.undo(t)
			expect(t, bin, admin, 0, args, "0 error(s), 0 warning(s)")
		})
	}

	// The OwnerReferencesPermissionEnforcement example grants what was missing above.
	kubectlStdin(t, c, nil, "-n", ns, "apply", "--server-side", "-f", filepath.Join(cluster.RepoRoot(), "examples", "rbac-ownerreferences-enforcement.yaml"))
	expect(t, bin, admin, 0, append(append([]string(nil), args...), "-mode", "step", "-ownerreferences-enforcement"), "0 error(s)")

	// The Job mode: examples/job.yaml's ServiceAccount, Role and RoleBinding (not the Job) in
	// the application namespace pass; without the Role every verb is missing.
	jobRBAC := jobExampleRBAC(t)
	kubectlStdin(t, c, jobRBAC, "-n", ns, "apply", "-f", "-")
	jobArgs := []string{"-mode", "job", "-namespaces", ns}
	expect(t, bin, admin, 0, jobArgs, "OK      rbac/job", "0 error(s)")
	if err := cluster.Kubectl(c, "-n", ns, "delete", "role", "configmap-attacher-job"); err != nil {
		t.Fatal(err)
	}
	out = expect(t, bin, admin, 1, jobArgs, "ERROR   rbac/job", "system:serviceaccount:"+ns+":configmap-attacher-job: in namespace "+ns+" may not get rollouts.argoproj.io, list rollouts.argoproj.io", "fix: apply examples/job.yaml's Role")
	t.Logf("%s", firstErrors(out))

	// Last: the controller dies without releasing its Lease (SIGKILL): the Lease goes stale
	// (3 s) and the metrics endpoint is down.
	cp.Kill()
	time.Sleep(3500 * time.Millisecond)
	out = expect(t, bin, admin, 1, args, "2 error(s)", "ERROR   controller/lease", "but expired", "fix: the leader cannot renew",
		"ERROR   controller/metrics", "does not answer")
	t.Logf("%s", firstErrors(out))
}

// exampleDeployment creates examples/controller.yaml's Deployment at 0 replicas (removed when
// the test ends, so that later tests find only their own installs).
func exampleDeployment(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "controller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		zero := int32(0)
		d.Spec.Replicas = &zero
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cs.AppsV1().Deployments(d.Namespace).Create(ctx, &d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cs.AppsV1().Deployments(d.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{})
		})
		return
	}
	t.Fatal("examples/controller.yaml has no Deployment")
}

// stepRolloutYAML is Rollout api whose first canary step is the plugin with config (JSON). No
// Rollouts controller runs: it is only read.
func stepRolloutYAML(config string) string {
	return `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api}
spec:
  replicas: 0
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: app, image: registry.invalid/api:1}]}
  strategy:
    canary:
      steps:
        - plugin:
            name: configmap-attacher/configmap-attacher
            config: ` + config + `
`
}

// jobExampleRBAC is examples/job.yaml without its Job.
func jobExampleRBAC(t *testing.T) []byte {
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---") {
		var m struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind != "" && m.Kind != "Job" {
			keep = append(keep, doc)
		}
	}
	return []byte(strings.Join(keep, "\n---\n"))
}

// firstErrors is the ERROR lines of out with their fixes.
func firstErrors(out string) string {
	var keep []string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "ERROR") {
			keep = append(keep, l)
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "        fix:") {
				keep = append(keep, lines[i+1])
			}
		}
	}
	return strings.Join(keep, "\n")
}
