package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// KubeVersion is the Kubernetes version of the control-plane binaries: what a Cluster runs
// unless Options.KubeVersion names another.
const KubeVersion = "v1.34.5"

// OldKubeVersion is the oldest Kubernetes version the tests run: the chart's kubeVersion floor.
// It is the latest v1.31 patch whose modules the module proxy serves in full: it lists
// k8s.io/kubernetes v1.31.14, but answers 403 for that patch's k8s.io/kube-controller-manager,
// k8s.io/endpointslice and k8s.io/kube-scheduler v0.31.14, which kube-controller-manager imports. Its binaries are built like
// KubeVersion's, into their own cache directory; test/chart installs the chart on it and runs
// the controller's adoption and the step's attach once.
const OldKubeVersion = "v1.31.13"

// KubeVersions are the Kubernetes versions the tests run, newest first.
var KubeVersions = []string{KubeVersion, OldKubeVersion}

// Binaries are the executables BinDir guarantees.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"}

// ErrUnavailable marks errors meaning "no control-plane binaries on this machine and they
// could not be built": tests skip on it unless Required() is true.
var ErrUnavailable = errors.New("control-plane binaries unavailable")

// Required reports whether a missing control plane must fail tests instead of skipping them:
// CI=true or CMA_REQUIRE_CLUSTER=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("CMA_REQUIRE_CLUSTER") == "1"
}

// CacheDir is the root of the binary cache: $CMA_CACHE or $HOME/.cache/configmap-attacher.
func CacheDir() string {
	if d := os.Getenv("CMA_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "configmap-attacher")
}

// binLookup is one version's FindBinDirFor result, looked up (and built) once per test binary.
type binLookup struct {
	once sync.Once
	dir  string
	err  error
}

var (
	binMu      sync.Mutex
	binLookups = map[string]*binLookup{}
)

// BinDir returns the directory holding KubeVersion's etcd, kube-apiserver,
// kube-controller-manager and kubectl (CMA_KUBE_BIN_DIR, else <CacheDir>/kube-<KubeVersion>).
// Missing binaries are built once per test binary with hack/build-binaries.sh, its progress
// going to stderr (a cold build takes several minutes: run `make`/the script beforehand or
// raise -timeout). If they are missing and cannot be built, BinDir skips the test, or fails it
// when Required().
func BinDir(t testing.TB) string {
	t.Helper()
	return BinDirFor(t, KubeVersion)
}

// BinDirFor is BinDir for the Kubernetes version given (one of KubeVersions):
// <CacheDir>/kube-<version>; CMA_KUBE_BIN_DIR replaces only KubeVersion's directory.
func BinDirFor(t testing.TB, version string) string {
	t.Helper()
	d, err := FindBinDirFor(version)
	if err != nil {
		SkipOrFail(t, err)
	}
	return d
}

// FindBinDir is BinDir without a testing.TB (for TestMain). The error wraps ErrUnavailable
// when the binaries are missing and cannot be built.
func FindBinDir() (string, error) { return FindBinDirFor(KubeVersion) }

// FindBinDirFor is BinDirFor without a testing.TB.
func FindBinDirFor(version string) (string, error) {
	binMu.Lock()
	l, ok := binLookups[version]
	if !ok {
		l = &binLookup{}
		binLookups[version] = l
	}
	binMu.Unlock()
	l.once.Do(func() { l.dir, l.err = findBinDir(version) })
	return l.dir, l.err
}

// KubeBinDir is the cache directory of a Kubernetes version's binaries,
// <CacheDir>/kube-<version>: what hack/build-binaries.sh writes with KUBE_VERSION=version.
func KubeBinDir(version string) string { return filepath.Join(CacheDir(), "kube-"+version) }

// SkipOrFail ends the test because of err: a skip when err is ErrUnavailable and the cluster
// is not Required(), a failure otherwise.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && !Required() {
		t.Skipf("skipping: no real control plane: %v (set CI=true or CMA_REQUIRE_CLUSTER=1 to fail instead)", err)
	}
	t.Fatalf("real control plane: %v", err)
}

func missing(dir string) []string {
	var out []string
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			out = append(out, b)
		}
	}
	return out
}

func findBinDir(version string) (string, error) {
	if !slices.Contains(KubeVersions, version) {
		return "", fmt.Errorf("kube version %q: not one of the tested versions %v (cluster.KubeVersions)", version, KubeVersions)
	}
	if d := os.Getenv("CMA_KUBE_BIN_DIR"); d != "" && version == KubeVersion {
		if m := missing(d); len(m) > 0 {
			return "", fmt.Errorf("%w: CMA_KUBE_BIN_DIR=%s lacks %v", ErrUnavailable, d, m)
		}
		return d, nil
	}
	dir := KubeBinDir(version)
	m := missing(dir)
	if len(m) == 0 {
		return dir, nil
	}
	if os.Getenv("CMA_NO_BUILD") == "1" {
		return "", fmt.Errorf("%w: %s lacks %v and CMA_NO_BUILD=1", ErrUnavailable, dir, m)
	}
	script, err := buildScript()
	if err != nil {
		return "", fmt.Errorf("%w: %s lacks %v and %v", ErrUnavailable, dir, m, err)
	}
	fmt.Fprintf(os.Stderr, "test/support/cluster: %s lacks %v; building with %s %v (several minutes when cold)\n", dir, m, script, m)
	cmd := exec.Command("bash", append([]string{script}, m...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CMA_CACHE="+CacheDir(), "KUBE_VERSION="+version)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s lacks %v and %s failed: %v", ErrUnavailable, dir, m, script, err)
	}
	if m := missing(dir); len(m) > 0 {
		return "", fmt.Errorf("%w: %s still lacks %v after %s", ErrUnavailable, dir, m, script)
	}
	return dir, nil
}

// buildScript returns RepoRoot()/hack/build-binaries.sh, or an error when it does not exist.
func buildScript() (string, error) {
	p := filepath.Join(RepoRoot(), "hack", "build-binaries.sh")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("hack/build-binaries.sh not found above the working directory")
	}
	return p, nil
}

// RepoRoot is the module root: three directories above this source file (test/support/cluster) when the build kept
// its path, else the first directory above the working directory (go test runs in the package
// directory) with a go.mod and hack/build-binaries.sh.
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := wd; ; {
		_, errMod := os.Stat(filepath.Join(d, "go.mod"))
		_, errScript := os.Stat(filepath.Join(d, "hack", "build-binaries.sh"))
		if errMod == nil && errScript == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return wd
		}
		d = parent
	}
}
