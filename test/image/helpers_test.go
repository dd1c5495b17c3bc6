package image

import (
	"archive/tar"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	version = cluster.ReleaseVersion
	repo    = "ghcr.io/configmap-attacher/configmap-attacher"
	ref     = repo + ":" + version
	epoch   = cluster.ReleaseEpoch // SOURCE_DATE_EPOCH
)

// archs are the image's platforms (linux/...), in index order.
var archs = []string{"amd64", "arm64"}

// releaseDist is the tests' shared `make release` (cluster.ReleaseDist: built once per source
// tree, the dist/ test/release checks too).
func releaseDist(t *testing.T) string {
	t.Helper()
	d, err := cluster.ReleaseDist()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// binaries returns the static linux binaries of every arch of the shared release, by arch.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	return distBinaries(t, "configmap-attacher-linux-")
}

// stepBinaries returns the step plugin's own static linux binaries of the shared release, by
// arch.
func stepBinaries(t *testing.T) map[string]string {
	t.Helper()
	return distBinaries(t, "configmap-attacher-step-linux-")
}

func distBinaries(t *testing.T, prefix string) map[string]string {
	t.Helper()
	dist := releaseDist(t)
	m := map[string]string{}
	for _, a := range archs {
		m[a] = filepath.Join(dist, prefix+a)
	}
	return m
}

func checkStatic(t *testing.T, bin, arch string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has %v: dynamically linked", bin, p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: needs %v", bin, libs)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != wantMachine || f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s: machine %v OS ABI %v, want %v", bin, f.Machine, f.OSABI, wantMachine)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" || settings["GOARCH"] != arch || settings["-trimpath"] != "true" {
		t.Errorf("%s: build settings %v, want CGO_ENABLED=0 GOOS=linux GOARCH=%s -trimpath", bin, settings, arch)
	}
}

// extract writes the regular files and directories of the flattened filesystem under dir and
// returns every entry's header by its cleaned relative name.
func extract(t *testing.T, r io.ReadCloser, dir string) map[string]*tar.Header {
	t.Helper()
	defer r.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if !filepath.IsLocal(n) {
			t.Fatalf("entry %q escapes the root", h.Name)
		}
		files[n] = h
		p := filepath.Join(dir, filepath.FromSlash(n))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var f *os.File
				if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)); err == nil {
					_, err = io.Copy(f, tr)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	d, err := moduleRootErr()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func moduleRootErr() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return "", fmt.Errorf("go env GOMOD: %q %v", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func hasLinePrefix(s, prefix string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func fileBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// extractImage writes img's flattened filesystem under dir.
func extractImage(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	extract(t, mutate.Extract(img), dir)
}

// exitCode is the exit status of a finished command's error (0 for nil, -1 when it did not run).
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
