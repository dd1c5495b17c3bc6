package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// Versions of the Argo Rollouts controller that hack/build-binaries.sh builds.
const (
	RolloutsVersion    = "v1.10.2"
	RolloutsOldVersion = "v1.9.1"
)

// PluginName is the name the plugin is registered under and that Rollout steps use.
const PluginName = "configmap-attacher/configmap-attacher"

// ControllerNamespace is the Rollouts controller's namespace: argo-rollouts-config and the
// plugin's ServiceAccount live there.
const ControllerNamespace = "argo-rollouts"

// RolloutsControllerBinding binds the Argo Rollouts controller's own ClusterRole (applied from
// the module's manifests/role) to its ServiceAccount, as the argo-rollouts install manifests do.
// ApplyYAML with a namespace moves the subject into the test's namespace.
const RolloutsControllerBinding = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: argo-rollouts
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: argo-rollouts
subjects:
  - kind: ServiceAccount
    name: argo-rollouts
    namespace: argo-rollouts
`

// RolloutsDir returns <CacheDir>/rollouts-<version>, holding rollouts-controller and crds/.
// When they are missing it runs hack/build-binaries.sh (unless CMA_NO_BUILD=1); an error then
// wraps ErrUnavailable.
func RolloutsDir(version string) (string, error) {
	dir := filepath.Join(CacheDir(), "rollouts-"+version)
	ok := func() bool {
		fi, err := os.Stat(filepath.Join(dir, "rollouts-controller"))
		crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*-crd.yaml"))
		return err == nil && fi.Mode()&0o111 != 0 && len(crds) > 0
	}
	if ok() {
		return dir, nil
	}
	if os.Getenv("CMA_NO_BUILD") == "1" {
		return "", fmt.Errorf("%w: %s lacks rollouts-controller or crds/ and CMA_NO_BUILD=1", ErrUnavailable, dir)
	}
	comp, env := "rollouts-controller", "ROLLOUTS_VERSION="+version
	if version != RolloutsVersion {
		comp, env = "rollouts-controller-old", "ROLLOUTS_OLD_VERSION="+version
	}
	script := filepath.Join(RepoRoot(), "hack", "build-binaries.sh")
	fmt.Fprintf(os.Stderr, "test/support/cluster: %s lacks the Argo Rollouts controller; building with %s %s (several minutes when cold)\n", dir, script, comp)
	cmd := exec.Command("bash", script, comp)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CMA_CACHE="+CacheDir(), env)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: building the Argo Rollouts controller %s: %v", ErrUnavailable, version, err)
	}
	if !ok() {
		return "", fmt.Errorf("%w: %s still lacks rollouts-controller or crds/ after %s", ErrUnavailable, dir, script)
	}
	return dir, nil
}

// RolloutsModuleDir is the source directory of the argo-rollouts module this project requires:
// its CRDs and the controller's ClusterRole come from there, exactly as users install them.
func RolloutsModuleDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/argoproj/argo-rollouts")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the argo-rollouts module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RolloutsModuleDirAt is RolloutsModuleDir for another version of github.com/argoproj/argo-rollouts
// than the required one (from the module cache; downloaded through the module proxy if absent),
// for a Rollouts controller of that version.
func RolloutsModuleDirAt(version string) (string, error) {
	return ModuleDir("github.com/argoproj/argo-rollouts@" + version)
}

// ModuleDir is the directory of module@version (a bare module path: go.mod's version) in the
// module cache, downloaded through the module proxy when absent; the error carries go's own
// reason (the "Error" of go mod download -json, or its stderr).
func ModuleDir(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = RepoRoot()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr == nil && m.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", modVersion, m.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %v: %s", modVersion, err, strings.TrimSpace(stderr.String()))
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no Dir in %s", modVersion, out)
	}
	return m.Dir, nil
}

// InstallRolloutCRD applies the required module's Rollout CRD (InstallCRDFiles). A nil cluster
// is a no-op.
func InstallRolloutCRD(c *Cluster) error {
	if c == nil {
		return nil
	}
	dir, err := RolloutsModuleDir()
	if err != nil {
		return err
	}
	return InstallCRDFiles(c, filepath.Join(dir, "manifests", "crds", "rollout-crd.yaml"))
}

// InstallCRDs is InstallCRDFiles for every *-crd.yaml in dir (a RolloutsDir's crds/).
func InstallCRDs(c *Cluster, dir string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*-crd.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no *-crd.yaml in %s", dir)
	}
	return InstallCRDFiles(c, files...)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDFiles applies CRD manifests server-side (the Rollout CRD is too large for a
// client-side apply) and polls, up to 60 s, until each is Established (`kubectl wait` races
// the CRD's creation).
func InstallCRDFiles(c *Cluster, files ...string) error {
	var names []string
	for _, f := range files {
		if err := Kubectl(c, "apply", "--server-side", "-f", f); err != nil {
			return err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var m struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal(b, &m); err != nil || m.Metadata.Name == "" {
			return fmt.Errorf("%s: no metadata.name (%v)", f, err)
		}
		names = append(names, m.Metadata.Name)
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range names {
		for {
			crd, err := dyn.Resource(crdGVR).Get(context.Background(), n, metav1.GetOptions{})
			if err == nil && crdEstablished(crd.Object) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not Established after 60s (%v)", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func crdEstablished(obj map[string]any) bool {
	status, _ := obj["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// AsController returns the Rollout as the Rollouts controller passes it to a step plugin once
// rs is its new ReplicaSet: spec.template is rs's pod template (the plugin finds its target
// with argo-rollouts' FindNewReplicaSet, as the controller does) and status.currentPodHash is
// rs's hash. Tests that create ReplicaSets themselves stand in for the controller with it.
func AsController(ro *v1alpha1.Rollout, rs *appsv1.ReplicaSet) *v1alpha1.Rollout {
	r := ro.DeepCopy()
	r.Spec.Template = *rs.Spec.Template.DeepCopy()
	r.Status.CurrentPodHash = rs.Labels[v1alpha1.DefaultRolloutUniqueLabelKey]
	return r
}
