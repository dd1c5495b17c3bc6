package rollouts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// quickStartNamespace is the namespace docs/quickstart.md creates.
const quickStartNamespace = "quickstart"

// TestQuickStart runs docs/quickstart.md's `sh` blocks, in order, in one bash (-e, pipefail)
// with the PATH and KUBECONFIG the page tells a reader to set: the control plane's kubectl, the
// built configmap-attacher, the admin kubeconfig. The components are those `make demo KEEP=1`
// leaves running: this package's control plane, the Argo Rollouts controller with the step
// plugin registered and the fake kubelet, plus the controller mode started here as hack/demo
// starts it (examples/controller.yaml's identity, no leader election), limited to the page's
// namespace so that it leaves this package's other tests alone. Every expectation of the page
// is a command that fails when it does not hold (a wait with a timeout), so a page that drifts
// from the product fails here.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shBlocks(string(b))
	if len(blocks) < 4 {
		t.Fatalf("docs/quickstart.md has %d sh blocks, want at least 4", len(blocks))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := e.c.Client(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: quickStartNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), quickStartNamespace, metav1.DeleteOptions{})
	})
	kc, err := cluster.ControllerModeIdentity(ctx, e.c, cs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mode, err := cluster.StartController(e.plugin, "quickstart", filepath.Join(dir, "controller.log"), 30*time.Second,
		[]string{"KUBECONFIG=/nonexistent"}, "-kubeconfig", kc, "-leader-elect=false", "-namespaces", quickStartNamespace)
	if mode != nil {
		defer mode.Stop()
	}
	if err != nil {
		t.Fatalf("controller mode: %v", err)
	}
	// The page's PATH: kubectl from the control plane's binaries, configmap-attacher as `make`
	// builds it (bin/configmap-attacher; here the tests' build of the same sources).
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.plugin, filepath.Join(bin, "configmap-attacher")); err != nil {
		t.Fatal(err)
	}
	script := "set -euo pipefail\n" + strings.Join(blocks, "\n")
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.c.KubeconfigPath, "PATH="+e.c.BinDir+":"+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("docs/quickstart.md, its sh blocks run in order:\n%s", out)
	if err != nil {
		t.Fatalf("the Quick Start failed: %v\ncontroller mode log tail:\n%s", err, mode.LogTail(30))
	}
	// What the page says the reader sees, beyond its own waits.
	for _, want := range []string{
		"is owned by: ",                          // section 1: the owners
		"was collected with its last ReplicaSet", // section 1: the collection
		"attached 1 ConfigMap",                   // section 2: the step's message
		"api-config-v2",                          // … and the failed step names the object
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the Quick Start's output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`web-config-\w+ is owned by: .*ReplicaSet/web-`).Match(out) {
		t.Error("section 1: the ConfigMap is not shown owned by the Deployment's ReplicaSet")
	}
}

// shBlocks are the bodies of a Markdown page's ```sh fenced blocks (not ```console: those show
// what the reader types or sees elsewhere).
func shBlocks(md string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return out
}
