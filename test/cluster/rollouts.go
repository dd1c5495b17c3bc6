package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
)

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

// RolloutsModuleDir is the source directory of the argo-rollouts module this project requires:
// its CRDs and the controller's ClusterRole come from there, exactly as users install them.
func RolloutsModuleDir() (string, error) {
	script, err := buildScript() // hack/build-binaries.sh: its grandparent is the module root
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/argoproj/argo-rollouts")
	cmd.Dir = filepath.Dir(filepath.Dir(script))
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the argo-rollouts module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// InstallRolloutCRD applies the module's Rollout CRD server-side (it is too large for a
// client-side apply) and waits until it is Established. It polls, because `kubectl wait`
// races the CRD's creation. A nil cluster is a no-op.
func InstallRolloutCRD(c *Cluster) error {
	if c == nil {
		return nil
	}
	dir, err := RolloutsModuleDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(c.BinDir, "kubectl")
	crd := filepath.Join(dir, "manifests", "crds", "rollout-crd.yaml")
	if out, err := exec.Command(kubectl, "--kubeconfig", c.KubeconfigPath, "apply", "--server-side", "-f", crd).CombinedOutput(); err != nil {
		return fmt.Errorf("applying %s: %v: %s", crd, err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command(kubectl, "--kubeconfig", c.KubeconfigPath, "get", "crd", "rollouts.argoproj.io",
			"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`).Output()
		if string(out) == "True" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD rollouts.argoproj.io not established after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
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
