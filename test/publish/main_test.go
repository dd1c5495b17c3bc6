// Package publish proves hack/release/publish.sh end to end on 127.0.0.1: the tests' shared
// release (cluster.ReleaseDist, the dist/ test/image and test/release check) is pushed by the
// script with the real crane, helm and cosign to a local OCI registry (go-containerregistry's
// pkg/registry, plain HTTP, in this test process) and signed with a throwaway cosign key pair,
// offline (no transparency log; every other host is unreachable through a dead proxy); then
// `cosign verify` passes for the image, its SBOM attestation and the chart (and fails for an
// unsigned index and for another key), and `helm install oci://127.0.0.1:PORT/...` installs the
// chart into the real control plane with the image by the pushed digest. There is no container
// runtime: the test pulls that digest from the registry, unpacks this host's platform and runs
// its entrypoint with exactly the container args and env the installed Deployment has (as
// test/chart does with the built binary), and the controller adopts an opted-in ConfigMap.
package publish

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The tools publish.sh runs, each built from the Go module proxy at the version the release
// workflow builds (.github/workflows/release.yaml; TestToolPins checks they agree) and cached
// under cluster.CacheDir() (hack/tool.sh, hack/build-binaries.sh).
const (
	CosignPackage = "github.com/sigstore/cosign/v3/cmd/cosign"
	CosignVersion = "v3.0.6"
	CranePackage  = "github.com/google/go-containerregistry/cmd/crane"
	CraneVersion  = "v0.22.1"
	HelmVersion   = "v3.22.0"
)

var (
	shared    *cluster.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "publish", Shared: &shared, Err: &sharedErr}))
}

// goTool returns the binary of pkg@version built by hack/tool.sh (cached; built from the module
// proxy when missing, unless CMA_NO_BUILD=1). When it cannot be had the test is skipped, or
// fails under CI=true.
func goTool(t *testing.T, name, pkg, version string) string {
	t.Helper()
	p := filepath.Join(cluster.CacheDir(), "tools", name+"-"+version, name)
	if isExecutable(p) {
		return p
	}
	if os.Getenv("CMA_NO_BUILD") == "1" {
		cluster.SkipOrFail(t, fmt.Errorf("%w: %s missing and CMA_NO_BUILD=1", cluster.ErrUnavailable, p))
	}
	cmd := exec.Command("bash", filepath.Join(cluster.RepoRoot(), "hack", "tool.sh"), name, pkg+"@"+version)
	cmd.Env = append(os.Environ(), "CMA_CACHE="+cluster.CacheDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != p {
		cluster.SkipOrFail(t, fmt.Errorf("%w: hack/tool.sh %s %s@%s: %v (printed %q)", cluster.ErrUnavailable, name, pkg, version, err, out))
	}
	return p
}

// helmBin returns the helm of hack/build-binaries.sh (the one test/chart runs), building it
// when missing.
func helmBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(cluster.CacheDir(), "helm-"+HelmVersion, "helm")
	if isExecutable(p) {
		return p
	}
	err := fmt.Errorf("%w: %s missing and CMA_NO_BUILD=1", cluster.ErrUnavailable, p)
	if os.Getenv("CMA_NO_BUILD") != "1" {
		cmd := exec.Command("bash", filepath.Join(cluster.RepoRoot(), "hack", "build-binaries.sh"), "helm")
		cmd.Env = append(os.Environ(), "CMA_CACHE="+cluster.CacheDir(), "HELM_VERSION="+HelmVersion)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if rerr := cmd.Run(); rerr != nil {
			err = fmt.Errorf("%w: building helm: %v", cluster.ErrUnavailable, rerr)
		} else if isExecutable(p) {
			return p
		}
	}
	cluster.SkipOrFail(t, err)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// TestToolPins: the release workflow and `make test` build the crane and cosign this test
// runs, so that the path proven here is the one a release takes.
func TestToolPins(t *testing.T) {
	for file, wants := range map[string][]string{
		".github/workflows/release.yaml": {
			"hack/tool.sh crane " + CranePackage + "@" + CraneVersion,
			"hack/tool.sh cosign " + CosignPackage + "@" + CosignVersion,
			"helm-" + HelmVersion + "/helm",
		},
		"Makefile": {"CRANE_PKG ?= " + CranePackage + "@" + CraneVersion, "COSIGN_PKG ?= " + CosignPackage + "@" + CosignVersion},
	} {
		b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s lacks %q: it must build the tools test/publish proves", file, want)
			}
		}
	}
}
