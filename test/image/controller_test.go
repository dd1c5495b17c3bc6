package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/plugin/install"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// helmValues is the part of examples/helm-values.yaml the install uses.
type helmValues struct {
	Controller struct {
		StepPlugins []struct {
			Name     string
			Location string
			Args     []string
		} `json:"stepPlugins"`
		InitContainers []corev1.Container   `json:"initContainers"`
		Volumes        []corev1.Volume      `json:"volumes"`
		VolumeMounts   []corev1.VolumeMount `json:"volumeMounts"`
	}
}

// TestInstallImageUnderController installs the plugin as examples/helm-values.yaml does — the
// image's entrypoint run with the initContainer's args into a directory standing for the shared
// emptyDir — then starts the real Argo Rollouts controller with the file:// location into that
// directory and runs a canary whose first step is the plugin: the step is Successful and the
// new ReplicaSet owns the revision's ConfigMap.
func TestInstallImageUnderController(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the image's binaries run on linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	start := time.Now()
	root := moduleRoot(t)

	// The example's install: initContainer args, its mount, the controller's mount, location.
	b, err := os.ReadFile(filepath.Join(root, "examples", "helm-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v helmValues
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("examples/helm-values.yaml: %v", err)
	}
	if len(v.Controller.InitContainers) != 1 || len(v.Controller.StepPlugins) != 1 || len(v.Controller.VolumeMounts) != 1 || len(v.Controller.Volumes) != 1 {
		t.Fatalf("examples/helm-values.yaml: want one initContainer, stepPlugin, volume and volumeMount: %+v", v.Controller)
	}
	ic, sp, vm, vol := v.Controller.InitContainers[0], v.Controller.StepPlugins[0], v.Controller.VolumeMounts[0], v.Controller.Volumes[0]
	if !strings.HasPrefix(ic.Image, repo+":") && !strings.HasPrefix(ic.Image, repo+"@sha256:") {
		t.Errorf("initContainer image %q, want %s", ic.Image, repo)
	}
	if len(ic.Command) != 0 || len(ic.Args) != 2 || ic.Args[0] != "install-plugin" || len(ic.VolumeMounts) != 1 ||
		ic.VolumeMounts[0].MountPath != ic.Args[1] || ic.VolumeMounts[0].Name != vol.Name || vm.Name != vol.Name || vol.EmptyDir == nil {
		t.Errorf("initContainer %+v: want the image's entrypoint with args [install-plugin <its mount of the emptyDir %s>]", ic, vol.Name)
	}
	if want := "file://" + vm.MountPath + "/" + install.Name; sp.Location != want || sp.Name != cluster.PluginName {
		t.Errorf("stepPlugins entry %s at %s, want %s at %s (the controller's mount of the emptyDir)", sp.Name, sp.Location, cluster.PluginName, want)
	}
	if ic.SecurityContext == nil || ic.SecurityContext.RunAsNonRoot == nil || !*ic.SecurityContext.RunAsNonRoot ||
		ic.SecurityContext.ReadOnlyRootFilesystem == nil || !*ic.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("initContainer securityContext %+v: want runAsNonRoot and readOnlyRootFilesystem", ic.SecurityContext)
	}

	// The host's image, its filesystem, and its entrypoint with the initContainer's args (the
	// emptyDir's path substituted).
	img := releaseImage(t, runtime.GOARCH)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	extractImage(t, img, rootfs)
	emptyDir := t.TempDir()
	args := append(slices.Clone(cf.Config.Entrypoint[1:]), ic.Args[0], emptyDir)
	entry := filepath.Join(rootfs, strings.TrimPrefix(cf.Config.Entrypoint[0], "/"))
	stdout, stderr, err := run(rootfs, entry, args...)
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", cf.Config.Entrypoint[0], args, err, stderr)
	}
	pluginPath := filepath.Join(emptyDir, install.Name)
	t.Logf("initContainer: %s", strings.TrimSpace(stdout))

	// The real controller on that file:// location.
	if _, err := cluster.RolloutsDir(cluster.RolloutsVersion); err != nil {
		cluster.SkipOrFail(t, err)
	}
	c := cluster.Start(t, cluster.Options{})
	cs := c.Client(t)
	kubelet := cluster.StartFakeKubelet(cs)
	t.Cleanup(kubelet.Stop)
	// The example's plugin args too (its opt-in policy: the ConfigMaps below carry the label).
	ctl, err := cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: pluginPath, PluginArgs: sp.Args})
	if err != nil {
		if errors.Is(err, cluster.ErrUnavailable) {
			cluster.SkipOrFail(t, err)
		}
		t.Fatalf("controller: %v", err)
	}
	t.Cleanup(func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("stopping the controller: %v", err)
		}
		if t.Failed() {
			t.Logf("controller log %s:\n%s", ctl.LogPath, ctl.LogTail(60))
		}
	})
	if want := "Copied plugin from " + pluginPath; !strings.Contains(ctl.Log(), want) {
		t.Errorf("controller log lacks %q:\n%s", want, ctl.LogTail(30))
	}

	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for rev := 1; rev <= 2; rev++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-config-%d", rev),
			Labels: map[string]string{"configmap-attacher/revisioned": "true"}}, Data: map[string]string{"rev": fmt.Sprint(rev)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := rolloutsclient.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.RolloutSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: podTemplate(1),
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: steps(1)}},
		},
	}
	if _, err := rc.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitUntil(t, ctx, 200*time.Millisecond, "revision 1 Healthy", func() (bool, string) {
		ro, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.ObservedGeneration == fmt.Sprint(ro.Generation), string(ro.Status.Phase) + " " + ro.Status.Message
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ro.Spec.Template, ro.Spec.Strategy.Canary.Steps = podTemplate(2), steps(2)
		_, err = rc.ArgoprojV1alpha1().Rollouts(ns).Update(ctx, ro, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var step v1alpha1.StepPluginStatus
	var hash string
	cluster.WaitUntil(t, ctx, 200*time.Millisecond, "the plugin step Successful on revision 2", func() (bool, string) {
		ro, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || ro.Status.Canary.StepPluginStatuses == nil {
			return false, fmt.Sprint(err)
		}
		for _, s := range ro.Status.Canary.StepPluginStatuses {
			if s.Index == 0 && s.Operation == v1alpha1.StepPluginOperationRun {
				if s.Phase == v1alpha1.StepPluginPhaseFailed {
					t.Fatalf("step failed: %s", s.Message)
				}
				step, hash = s, ro.Status.CurrentPodHash
				return s.Phase == v1alpha1.StepPluginPhaseSuccessful, string(s.Phase) + " " + s.Message
			}
		}
		return false, "no step status yet"
	})
	rs := "web-" + hash
	if want := "to ReplicaSet " + rs; !strings.Contains(step.Message, want) {
		t.Errorf("step message %q lacks %q", step.Message, want)
	}
	got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "web-config-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "ReplicaSet" || got.OwnerReferences[0].Name != rs {
		refs, _ := json.Marshal(got.OwnerReferences)
		t.Errorf("web-config-2 owner references %s, want ReplicaSet %s", refs, rs)
	}
	if !strings.Contains(ctl.Log(), "plugin.configmap-attacher") {
		t.Errorf("no plugin.configmap-attacher line in the controller log")
	}
	t.Logf("installed by the image's entrypoint, loaded by rollouts-controller %s: %q in %s", cluster.RolloutsVersion, step.Message, time.Since(start).Round(time.Millisecond))
}

func podTemplate(rev int) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1",
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("web-config-%d", rev)}}}}},
		},
	}
}

func steps(rev int) []v1alpha1.CanaryStep {
	cfg, _ := json.Marshal(map[string]any{"configMaps": []string{fmt.Sprintf("web-config-%d", rev)}})
	return []v1alpha1.CanaryStep{{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}}, {Pause: &v1alpha1.RolloutPause{}}}
}

// releaseImage is the shared release's image for linux/arch, from its OCI layout: what a node
// of that architecture pulls.
func releaseImage(t *testing.T, arch string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(filepath.Join(releaseDist(t), "configmap-attacher-image.oci"))
	if err != nil {
		t.Fatal(err)
	}
	lm, err := idx.IndexManifest()
	if err != nil || len(lm.Manifests) != 1 {
		t.Fatalf("the release's OCI layout: %+v %v, want one index", lm, err)
	}
	if idx, err = idx.ImageIndex(lm.Manifests[0].Digest); err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("the release's image index has no linux/%s", arch)
	return nil
}

// TestExamplesAgree: examples/argo-rollouts-config.yaml (no Helm) registers the plugin exactly
// as examples/helm-values.yaml does (the install TestInstallImageUnderController runs), and
// neither example downloads anything or runs a shell.
func TestExamplesAgree(t *testing.T) {
	root := moduleRoot(t)
	var v helmValues
	var cm corev1.ConfigMap
	for p, into := range map[string]any{"helm-values.yaml": &v, "argo-rollouts-config.yaml": &cm} {
		b, err := os.ReadFile(filepath.Join(root, "examples", p))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("examples/%s: %v", p, err)
		}
		var code []string // the lines that are not comments
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				code = append(code, l)
			}
		}
		for _, bad := range []string{"curl", "wget", "sh -c", `"sh"`, "sha256sum"} {
			if strings.Contains(strings.Join(code, "\n"), bad) {
				t.Errorf("examples/%s mentions %q: the install must not download or need a shell", p, bad)
			}
		}
	}
	var entries []struct {
		Name, Location string
		Args           []string
	}
	if err := yaml.Unmarshal([]byte(cm.Data["stepPlugins"]), &entries); err != nil || len(entries) != 1 || len(v.Controller.StepPlugins) != 1 {
		t.Fatalf("stepPlugins: %v %+v %+v", err, entries, v.Controller.StepPlugins)
	}
	e, h := entries[0], v.Controller.StepPlugins[0]
	if e.Name != h.Name || e.Location != h.Location || !slices.Equal(e.Args, h.Args) {
		t.Errorf("argo-rollouts-config.yaml registers %+v, helm-values.yaml %+v", e, h)
	}
}
