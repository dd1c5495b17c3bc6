package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

// runBinary runs the built configmap-attacher binary and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(realapi.PluginBinary(t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestBinaryKubectlFlags: the binary's command line as kubectl users type it, against the
// real apiserver: --context picks the kubeconfig's context, --as impersonates, -o yaml is the
// report; the single-dash spelling of the same flags does the same.
func TestBinaryKubectlFlags(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	// A kubeconfig whose current context points nowhere; "cma" is the test cluster.
	kc, err := clientcmd.LoadFromFile(c.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: kc.Contexts["cma"].AuthInfo}
	kc.CurrentContext = "nowhere"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"audit", "-n", e.NS, "-o", "yaml", "--kubeconfig", path, "--context", "cma"},
		{"audit", "-namespace", e.NS, "-o=yaml", "-kubeconfig=" + path, "-context", "cma"},
		{"audit", "--kubeconfig", path, "--namespace=" + e.NS, "--context=cma", "--output", "yaml"},
	} {
		code, out, stderr := runBinary(t, args...)
		var rep map[string]any
		if code != 0 || yaml.Unmarshal([]byte(out), &rep) != nil || rep["summary"] == nil {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	// The current context: nothing listens there.
	if code, _, stderr := runBinary(t, "audit", "-n", e.NS, "--kubeconfig", path); code != 1 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("without --context: exit %d, stderr %q", code, stderr)
	}
	// --as: the apiserver answers as that user, who may read nothing here.
	nobody := "system:serviceaccount:" + e.NS + ":nobody"
	if code, _, stderr := runBinary(t, "audit", "-n", e.NS, "--kubeconfig", path, "--context", "cma", "--as", nobody); code != 1 || !strings.Contains(stderr, nobody) || !strings.Contains(stderr, "forbidden") {
		t.Errorf("--as %s: exit %d, stderr %q", nobody, code, stderr)
	}
}

// TestBinaryHelpAndCompletion: the top-level help lists every command, completion bash
// produces a script that completes them, version prints the version.
func TestBinaryHelpAndCompletion(t *testing.T) {
	commands := []string{"audit", "cleanup", "completion", "controller", "doctor", "install-plugin", "version"}
	code, out, _ := runBinary(t, "--help")
	for _, c := range commands {
		if code != 0 || !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("--help: exit %d, lacks %s:\n%s", code, c, out)
		}
	}
	code, script, _ := runBinary(t, "completion", "bash")
	if code != 0 || !strings.Contains(script, "complete -o default -F __start_configmap-attacher configmap-attacher") {
		t.Errorf("completion bash: exit %d:\n%.400s", code, script)
	}
	// What the script asks the binary for when the user presses tab.
	code, out, _ = runBinary(t, "__complete", "")
	for _, c := range commands {
		if code != 0 || !strings.Contains(out, c+"\t") {
			t.Errorf("completion of the commands lacks %s:\n%s", c, out)
		}
	}
	if code, out, _ = runBinary(t, "version"); code != 0 || !strings.HasPrefix(out, "configmap-attacher ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}
