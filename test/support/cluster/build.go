package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvPluginBinary names a prebuilt configmap-attacher binary for the tests to run instead of
// building one: `make test` and `make bench` pass bin/configmap-attacher from `make build`, so
// a full run builds the binary once. A relative path is relative to RepoRoot().
const EnvPluginBinary = "CMA_PLUGIN_BINARY"

// EnvStepPluginBinary names a prebuilt step-plugin binary (bin/configmap-attacher-step of
// `make build`), as EnvPluginBinary does for the full one.
const EnvStepPluginBinary = "CMA_STEP_PLUGIN_BINARY"

// StepPluginPackage is the step plugin's own main package: the binary the image ships as
// /configmap-attacher-step and install-plugin copies for the Rollouts controller.
const StepPluginPackage = "./plugin/cmd/configmap-attacher-step"

// PluginBuild says which configmap-attacher binary to build. The zero value is the binary of
// `make build` (static, -trimpath, stripped) for this machine, with the default version.
type PluginBuild struct {
	GOOS, GOARCH string // empty: runtime.GOOS, runtime.GOARCH
	Version      string // plugin.Version (-X); empty: the source's default ("dev")
	// Package is the main package: "" the full binary (the module root), StepPluginPackage
	// the step plugin alone.
	Package string
}

func (b PluginBuild) pkg() string {
	if b.Package == "" {
		return "."
	}
	return b.Package
}

// binaryName is the file name the build writes: the image's name for it.
func (b PluginBuild) binaryName() string {
	if b.Package == StepPluginPackage {
		return "configmap-attacher-step"
	}
	return "configmap-attacher"
}

// PluginBinary returns the configmap-attacher binary the tests run as the Rollouts
// controller's step plugin, the controller mode, the Job and the command line: $CMA_PLUGIN_BINARY
// when set, else BuildPluginCached(PluginBuild{}).
func PluginBinary() (string, error) {
	return prebuiltOr(EnvPluginBinary, PluginBuild{})
}

// StepPluginBinary returns the step plugin's own binary, the one the image's install-plugin
// puts where the Rollouts controller runs it: $CMA_STEP_PLUGIN_BINARY when set, else
// BuildPluginCached(PluginBuild{Package: StepPluginPackage}).
func StepPluginBinary() (string, error) {
	return prebuiltOr(EnvStepPluginBinary, PluginBuild{Package: StepPluginPackage})
}

func prebuiltOr(env string, b PluginBuild) (string, error) {
	if p := os.Getenv(env); p != "" {
		if !filepath.IsAbs(p) {
			p = filepath.Join(RepoRoot(), p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", env, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s: not an executable", env, p)
		}
		return p, nil
	}
	return BuildPluginCached(b)
}

var (
	builtMu sync.Mutex
	built   = map[PluginBuild]string{}
)

// BuildPluginCached builds the binary b describes, as `make build` does, once per source tree:
// the binary is kept in RepoRoot()/bin/test-binaries/<key>, the key hashing the toolchain, the
// build options and every file the binary is compiled from (go list -deps), so a second test
// package, or a second run on unchanged sources, reuses it instead of linking it again (the
// link alone takes several seconds on 2 cores; the plugin was linked about six times a run).
// Concurrent test binaries (go test -p) wait on a lock file for the one that builds. Entries
// unused for a day are removed.
func BuildPluginCached(b PluginBuild) (string, error) {
	if b.GOOS == "" {
		b.GOOS = runtime.GOOS
	}
	if b.GOARCH == "" {
		b.GOARCH = runtime.GOARCH
	}
	builtMu.Lock()
	defer builtMu.Unlock()
	if p, ok := built[b]; ok {
		return p, nil
	}
	root := RepoRoot()
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS="+b.GOOS, "GOARCH="+b.GOARCH)
	key, err := sourceKey(root, env, b)
	if err != nil {
		return "", err
	}
	cache := filepath.Join(root, "bin", "test-binaries")
	dir := filepath.Join(cache, key)
	out := filepath.Join(dir, b.binaryName())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err != nil {
		start := time.Now()
		ldflags := "-s -w"
		if b.Version != "" {
			ldflags += " -X github.com/configmap-attacher/configmap-attacher/plugin.Version=" + b.Version
		}
		tmp := out + ".tmp"
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", tmp, b.pkg())
		cmd.Dir, cmd.Env = root, env
		if o, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s/%s: %v\n%s", b.GOOS, b.GOARCH, err, o)
		}
		if err := os.Rename(tmp, out); err != nil {
			return "", err
		}
		fmt.Fprintf(os.Stderr, "test/support/cluster: built %s in %v\n", out, time.Since(start).Round(time.Millisecond))
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // marks the entry as used for pruneBinaries
	pruneBinaries(cache, key)
	built[b] = out
	return out, nil
}

// sourceKey hashes what the binary is built from: the toolchain, the build options, go.mod,
// go.sum, and the content of every Go and embedded file of the module's packages the binary
// imports (as go list -deps sees them for the target platform).
func sourceKey(root string, env []string, b PluginBuild) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{"\n"}}{{end}}{{end}}`, b.pkg())
	cmd.Dir, cmd.Env = root, env
	list, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps: %v", err)
	}
	ver, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s|%+v|GOFLAGS=%s|GOEXPERIMENT=%s\n", strings.TrimSpace(string(ver)), b, os.Getenv("GOFLAGS"), os.Getenv("GOEXPERIMENT"))
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(line)
		for _, n := range f[1:] {
			files = append(files, filepath.Join(f[0], n))
		}
	}
	for _, f := range files {
		c, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s %d\n", rel, len(c))
		h.Write(c)
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// pruneBinaries removes the cache's entries other than keep that were not used for a day
// (older source trees), so that bin/test-binaries does not grow with every edit.
func pruneBinaries(cache, keep string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == keep {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}
