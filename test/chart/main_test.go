// Package chart tests charts/configmap-attacher with the real helm (built from Go modules by
// hack/build-binaries.sh helm) against the real control plane (test/support/cluster): helm lint, helm
// template of every values combination applied with a server-side dry run (the ServiceMonitor
// and PrometheusRule CRDs come from the prometheus-operator Go module), and helm install, after
// which the built binary runs on the host with exactly the arguments the chart rendered into its
// Deployment and a TokenRequest token of the chart's ServiceAccount (there is no container
// runtime): it must adopt an opted-in ConfigMap under the chart's RBAC, and every metric the
// chart's dashboard and alerts query must be in its /metrics scrape.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	// HelmVersion is the helm hack/build-binaries.sh builds.
	HelmVersion = "v3.22.0"
	// PrometheusOperatorVersion is the prometheus-operator module the monitoring CRDs come from.
	PrometheusOperatorVersion = "v0.85.0"
)

var (
	shared    *cluster.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "chart", Shared: &shared, Err: &sharedErr}))
}

// repoRoot is the module root (two directories above this file).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func chartDir() string { return filepath.Join(repoRoot(), "charts", "configmap-attacher") }

// helmBin returns <CacheDir>/helm-<HelmVersion>/helm, building it with hack/build-binaries.sh
// when missing (unless CMA_NO_BUILD=1); without it the test is skipped, or fails when
// cluster.Required().
func helmBin(t *testing.T) string {
	t.Helper()
	return builtBin(t, filepath.Join(cluster.CacheDir(), "helm-"+HelmVersion, "helm"), "helm", "HELM_VERSION="+HelmVersion)
}

// kubectlBin returns the control plane's kubectl (in CMA_KUBE_BIN_DIR, else
// <CacheDir>/kube-<KubeVersion>), building kubectl alone with hack/build-binaries.sh when
// missing (unless CMA_NO_BUILD=1), for tests that run it without a cluster (`kubectl
// kustomize`); without it the test is skipped, or fails when cluster.Required().
func kubectlBin(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CMA_KUBE_BIN_DIR"); d != "" {
		p := filepath.Join(d, "kubectl")
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			cluster.SkipOrFail(t, fmt.Errorf("%w: CMA_KUBE_BIN_DIR=%s lacks kubectl", cluster.ErrUnavailable, d))
		}
		return p
	}
	return builtBin(t, filepath.Join(cluster.CacheDir(), "kube-"+cluster.KubeVersion, "kubectl"), "kubectl", "KUBE_VERSION="+cluster.KubeVersion)
}

// builtBin returns the executable p, building it with `hack/build-binaries.sh component`
// (env added to the script's) when missing, unless CMA_NO_BUILD=1; without it the test is
// skipped, or fails when cluster.Required().
func builtBin(t *testing.T, p, component string, env ...string) string {
	t.Helper()
	if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
		return p
	}
	var err error
	if os.Getenv("CMA_NO_BUILD") == "1" {
		err = fmt.Errorf("%w: %s missing and CMA_NO_BUILD=1", cluster.ErrUnavailable, p)
	} else {
		script := filepath.Join(repoRoot(), "hack", "build-binaries.sh")
		fmt.Fprintf(os.Stderr, "test/chart: %s missing; building with %s %s\n", p, script, component)
		cmd := exec.Command("bash", script, component)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Env = append(append(os.Environ(), "CMA_CACHE="+cluster.CacheDir()), env...)
		if rerr := cmd.Run(); rerr != nil {
			err = fmt.Errorf("%w: building %s: %v", cluster.ErrUnavailable, component, rerr)
		} else if _, serr := os.Stat(p); serr != nil {
			err = fmt.Errorf("%w: %s still missing after %s", cluster.ErrUnavailable, p, script)
		}
	}
	if err != nil {
		cluster.SkipOrFail(t, err)
	}
	return p
}

// helm runs the helm binary with an isolated HOME/cache (no repositories, no plugins) and
// returns stdout; stderr is in the error.
func helm(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// kubectl runs the cluster's kubectl as admin with stdin.
func kubectl(c *cluster.Cluster, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// prometheusOperatorCRDs returns the ServiceMonitor and PrometheusRule CRD files of the
// prometheus-operator module (downloaded through the module proxy when not cached).
func prometheusOperatorCRDs(t *testing.T) []string {
	t.Helper()
	dir := moduleDir(t, "github.com/prometheus-operator/prometheus-operator@"+PrometheusOperatorVersion)
	var files []string
	for _, n := range []string{"servicemonitors", "prometheusrules"} {
		files = append(files, filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+n+".yaml"))
	}
	return files
}

// moduleDir is module@version's directory in the module cache (a bare module path: go.mod's
// version), downloaded through the module proxy when missing; when it cannot be had the test
// is skipped, or fails under CI=true.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	dir, err := cluster.ModuleDir(modVersion)
	if err != nil {
		cluster.SkipOrFail(t, fmt.Errorf("%w: %v", cluster.ErrUnavailable, err))
	}
	return dir
}
