package controllermode

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The example manifests are valid for the apiserver as written (server-side dry run: schema,
// defaults, RBAC objects); the RBAC in them is what every other test of this package runs with.
func TestExampleManifests(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kubectl := filepath.Join(e.c.BinDir, "kubectl")
	for _, args := range [][]string{
		{"apply", "--dry-run=server", "-f", filepath.Join(cluster.RepoRoot(), "examples", "controller.yaml")},
		{"-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(cluster.RepoRoot(), "examples", "controller-namespaced.yaml")},
	} {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", e.c.KubeconfigPath}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl %v: %v\n%s", args, err, out)
		}
	}
}
