package chart

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/hack/release/notes"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestSnippetsAdmittedByRestricted: every pod the project tells a user to run is admitted by
// Pod Security's restricted level of the real kube-apiserver (its PodSecurity admission plugin,
// on a server dry run in a namespace labelled pod-security.kubernetes.io/enforce: restricted;
// admission needs no kubelet): the chart's controller, examples/controller.yaml's, the Job of
// examples/job.yaml, and the Rollouts controller's pod once our initContainer is added, as
// examples/helm-values.yaml, the comment of examples/argo-rollouts-config.yaml and the
// release's install.md give it. The Rollouts controller's own container is made compliant here,
// and the pod has no pod-level securityContext (argo-helm's default), so our initContainer alone
// decides. The same pod with the initContainer's seccompProfile removed is refused: the check
// can fail. None of the snippets sets a fixed runAsUser or runAsGroup (OpenShift's
// restricted-v2 refuses a UID outside the namespace's range).
func TestSnippetsAdmittedByRestricted(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := restrictedNamespace(t, c)
	admit := func(name string, spec corev1.PodSpec) error { return admitPod(ctx, cs, ns, spec) }

	pods := map[string]corev1.PodSpec{}
	// The chart's Deployment, default values.
	objs, _, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	pods["chart Deployment"] = podTemplateOf(t, find(objs, "Deployment", releaseNS, "rel-configmap-attacher"))
	// The examples' workloads.
	for _, f := range []struct{ file, kind string }{{"controller.yaml", "Deployment"}, {"job.yaml", "Job"}} {
		pods["examples/"+f.file+" "+f.kind] = podTemplateOf(t, docOfKind(t, filepath.Join(repoRoot(), "examples", f.file), f.kind))
	}
	// The Rollouts controller with our initContainer, from each place that gives it.
	inits := map[string][]corev1.Container{}
	var hv struct {
		Controller struct {
			InitContainers []corev1.Container `json:"initContainers"`
		} `json:"controller"`
	}
	readYAML(t, filepath.Join(repoRoot(), "examples", "helm-values.yaml"), &hv)
	inits["examples/helm-values.yaml"] = hv.Controller.InitContainers
	inits["examples/argo-rollouts-config.yaml (comment)"] = commentedInitContainers(t, filepath.Join(repoRoot(), "examples", "argo-rollouts-config.yaml"))
	inits["release install.md"] = releaseInitContainers(t)
	for where, ic := range inits {
		if len(ic) != 1 {
			t.Fatalf("%s: %d initContainers, want ours", where, len(ic))
		}
		pods["Rollouts controller + initContainer of "+where] = rolloutsControllerPod(ic)
	}

	for name, spec := range pods {
		if err := admit(name, spec); err != nil {
			t.Errorf("%s: refused by Pod Security restricted: %v", name, err)
		}
		for _, ctr := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
			if sc := ctr.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
				t.Errorf("%s: container %s sets a fixed runAsUser/runAsGroup (OpenShift restricted-v2 refuses it)", name, ctr.Name)
			}
		}
		if sc := spec.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
			t.Errorf("%s: the pod sets a fixed runAsUser/runAsGroup (OpenShift restricted-v2 refuses it)", name)
		}
	}
	// The planted fault: without its seccompProfile the initContainer makes the pod inadmissible.
	bad := rolloutsControllerPod(hv.Controller.InitContainers)
	bad.InitContainers[0].SecurityContext = bad.InitContainers[0].SecurityContext.DeepCopy()
	bad.InitContainers[0].SecurityContext.SeccompProfile = nil
	if err := admit("planted", bad); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "seccompProfile") {
		t.Errorf("the initContainer without seccompProfile: %v, want Forbidden naming seccompProfile", err)
	}
	t.Logf("%d pods admitted by restricted in %s; the planted fault refused", len(pods), ns)
}

// admitPod creates a pod of spec in ns with a server dry run: admission (Pod Security
// included) decides, nothing is stored. The ServiceAccount is dropped: the ServiceAccount
// admission plugin would refuse a pod whose account does not exist in this namespace, which is
// not what is tested.
func admitPod(ctx context.Context, cs kubernetes.Interface, ns string, spec corev1.PodSpec) error {
	spec.ServiceAccountName, spec.DeprecatedServiceAccount = "", ""
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "snippet", Namespace: ns}, Spec: spec}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// restrictedNamespace is a new namespace labelled pod-security.kubernetes.io/enforce:
// restricted: the PodSecurity admission plugin refuses there every pod that level refuses.
func restrictedNamespace(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t)
	nsObj, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// rolloutsControllerPod is the Rollouts controller's pod with inits added: its own container
// compliant with restricted, no pod-level securityContext.
func rolloutsControllerPod(inits []corev1.Container) corev1.PodSpec {
	no, yes := false, true
	return corev1.PodSpec{
		InitContainers: inits,
		Containers: []corev1.Container{{Name: "argo-rollouts", Image: "quay.io/argoproj/argo-rollouts:v1.10.2",
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, RunAsNonRoot: &yes, ReadOnlyRootFilesystem: &yes,
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			VolumeMounts: []corev1.VolumeMount{{Name: "configmap-attacher-plugin", MountPath: "/home/argo-rollouts/plugins", ReadOnly: true}}}},
		Volumes: []corev1.Volume{{Name: "configmap-attacher-plugin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
}

func podTemplateOf(t *testing.T, o obj) corev1.PodSpec {
	t.Helper()
	if o == nil {
		t.Fatal("no such object")
	}
	tmpl := get(map[string]any(o), "spec", "template", "spec")
	if o.kind() == "CronJob" {
		tmpl = get(map[string]any(o), "spec", "jobTemplate", "spec", "template", "spec")
	}
	b, err := yaml.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("%s: pod spec: %v", o.key(), err)
	}
	return spec
}

func docOfKind(t *testing.T, file, kind string) obj {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o.kind() == kind {
			return o
		}
	}
	t.Fatalf("%s has no %s", file, kind)
	return nil
}

func readYAML(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// commentedInitContainers reads the initContainers snippet in the comments of
// examples/argo-rollouts-config.yaml: the lines from "#   initContainers:" up to the next key
// at the same indentation, with the comment prefix removed.
func commentedInitContainers(t *testing.T, file string) []corev1.Container {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	start := regexp.MustCompile(`(?m)^(\s*#)(\s*)initContainers:\s*$`)
	m := start.FindSubmatchIndex(b)
	if m == nil {
		t.Fatalf("%s: no commented initContainers snippet", file)
	}
	prefix, indent := string(b[m[2]:m[3]]), string(b[m[4]:m[5]])
	var snippet bytes.Buffer
	for i, line := range strings.Split(string(b[m[0]:]), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok || (i > 0 && strings.HasPrefix(rest, indent) && len(rest) > len(indent) && rest[len(indent)] != ' ') {
			break // the comment or the snippet ended
		}
		snippet.WriteString(strings.TrimPrefix(rest, indent) + "\n")
	}
	var v struct {
		InitContainers []corev1.Container `json:"initContainers"`
	}
	if err := yaml.UnmarshalStrict(snippet.Bytes(), &v); err != nil {
		t.Fatalf("%s: the commented snippet does not parse: %v\n%s", file, err, snippet.String())
	}
	return v.InitContainers
}

// releaseInitContainers renders the release's install.md (hack/release) with placeholder
// figures and reads the chart values' initContainers from it.
func releaseInitContainers(t *testing.T) []corev1.Container {
	t.Helper()
	var md bytes.Buffer
	r := notes.Release{Version: "v0.0.0-test", Image: "ghcr.io/configmap-attacher/configmap-attacher",
		Digest: "sha256:" + strings.Repeat("0", 64), DownloadURL: "https://example.invalid/"}
	if err := notes.Render(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, blk := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(md.String(), -1) {
		var v struct {
			Controller *struct {
				InitContainers []corev1.Container `json:"initContainers"`
			} `json:"controller"`
		}
		if err := yaml.Unmarshal([]byte(blk[1]), &v); err == nil && v.Controller != nil {
			return v.Controller.InitContainers
		}
	}
	t.Fatal("install.md has no chart values with initContainers")
	return nil
}
