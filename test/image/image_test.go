// Package image tests the container image hack/image builds: it builds the static binary and
// the image tarball into a temporary directory, reads the tarball back, checks the config and
// the filesystem, and runs the binary extracted from the image.
package image

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/configmap-attacher/configmap-attacher/hack/image/build"
)

const (
	version = "v0.0.0-imagetest"
	ref     = "ghcr.io/configmap-attacher/configmap-attacher:" + version
	epoch   = 1700000000 // SOURCE_DATE_EPOCH
	pkg     = "github.com/configmap-attacher/configmap-attacher"
)

// wantFS is every entry of the image's filesystem: no shell, no package manager, nothing else.
var wantFS = map[string]struct {
	typ      byte
	mode     int64
	uid, gid int
}{
	"configmap-attacher": {tar.TypeReg, 0o755, 0, 0},
	"etc":                {tar.TypeDir, 0o755, 0, 0},
	"etc/group":          {tar.TypeReg, 0o644, 0, 0},
	"etc/passwd":         {tar.TypeReg, 0o644, 0, 0},
	"home":               {tar.TypeDir, 0o755, 0, 0},
	"home/nonroot":       {tar.TypeDir, 0o700, 65532, 65532},
	"tmp":                {tar.TypeDir, 0o1777, 0, 0},
}

func TestImage(t *testing.T) {
	start := time.Now()
	root := moduleRoot(t)
	arch := runtime.GOARCH
	if arch != "amd64" && arch != "arm64" {
		arch = "amd64"
	}
	dir := t.TempDir()

	// The binary, as `make image` builds it.
	bin := filepath.Join(dir, "configmap-attacher-linux-"+arch)
	goCmd(t, root, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
		"build", "-trimpath", "-ldflags", "-s -w -X "+pkg+"/plugin.Version="+version, "-o", bin, ".")
	binInfo, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("binary built in %s", time.Since(start).Round(time.Millisecond))
	checkStatic(t, bin, arch)

	// The image, in process, and through the command (with SOURCE_DATE_EPOCH): same digest.
	img, err := build.Build(build.Options{Binary: bin, Arch: arch, Version: version, Created: time.Unix(epoch, 0)})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cliTar := filepath.Join(dir, "cli", "image.tar")
	out := goCmd(t, root, []string{"SOURCE_DATE_EPOCH=" + strconv.Itoa(epoch)},
		"run", "./hack/image", "-binary", bin, "-arch", arch, "-tag", ref, "-out", cliTar,
		"-oci-layout", filepath.Join(dir, "oci"))
	if !strings.Contains(out, "digest: "+want.String()) {
		t.Errorf("hack/image printed\n%s\nwant digest %s (the in-process build's): not reproducible", out, want)
	}

	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q (%v)", mt, err)
	}
	// The OCI layout keeps the manifest: same digest.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Digest != want ||
		im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Errorf("OCI layout index %+v (%v), want one manifest %s named %s", im, err, want, version)
	}

	// Read the tarball back. A docker tarball keeps the config and the layers, not the
	// manifest (docker load makes its own), so compare those.
	loaded, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(v1.Image) (v1.Hash, error){v1.Image.ConfigName, layerDigest, layerDiffID} {
		a, errA := f(img)
		b, errB := f(loaded)
		if errA != nil || errB != nil || a != b {
			t.Errorf("tarball: %v (%v), built: %v (%v)", b, errB, a, errA)
		}
	}
	if id, _ := img.ConfigName(); !strings.Contains(out, "id:     "+id.String()) {
		t.Errorf("hack/image printed\n%s\nwant id %s", out, id)
	}
	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/configmap-attacher"}) ||
		len(c.Cmd) != 0 || c.WorkingDir != "/" {
		t.Errorf("config: User %q Entrypoint %q Cmd %q WorkingDir %q", c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":  "https://github.com/configmap-attacher/configmap-attacher",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.title":   "configmap-attacher",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, c.Labels[k], v)
		}
	}
	if !cf.Created.Time.Equal(time.Unix(epoch, 0)) {
		t.Errorf("created %v, want %v", cf.Created.Time, time.Unix(epoch, 0).UTC())
	}
	layers, err := loaded.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	compressed, err := layers[0].Size()
	if err != nil {
		t.Fatal(err)
	}

	// The filesystem.
	rootfs := filepath.Join(dir, "rootfs")
	files := extract(t, mutate.Extract(loaded), rootfs)
	for n, w := range wantFS {
		h, ok := files[n]
		if !ok {
			t.Errorf("/%s: missing", n)
			continue
		}
		if h.Typeflag != w.typ || h.Mode&0o7777 != w.mode || h.Uid != w.uid || h.Gid != w.gid {
			t.Errorf("/%s: type %q mode %#o owner %d:%d, want type %q mode %#o owner %d:%d",
				n, h.Typeflag, h.Mode&0o7777, h.Uid, h.Gid, w.typ, w.mode, w.uid, w.gid)
		}
		if !h.ModTime.Equal(time.Unix(epoch, 0)) {
			t.Errorf("/%s: mtime %v", n, h.ModTime)
		}
	}
	for n := range files {
		if _, ok := wantFS[n]; !ok {
			t.Errorf("/%s: unexpected in the image", n)
		}
		if b := path.Base(n); b == "sh" || b == "bash" || b == "ash" || b == "busybox" {
			t.Errorf("/%s: a shell in the image", n)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	group, _ := os.ReadFile(filepath.Join(rootfs, "etc/group"))
	if !hasLinePrefix(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:65532:\n%s", passwd)
	}
	if !hasLinePrefix(string(group), "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot 65532:\n%s", group)
	}

	// The binary in the image: the one built, static, and it runs.
	imgBin := filepath.Join(rootfs, "configmap-attacher")
	if a, b := fileBytes(t, bin), fileBytes(t, imgBin); !bytes.Equal(a, b) {
		t.Errorf("/configmap-attacher in the image differs from the binary built")
	}
	checkStatic(t, imgBin, arch)
	if runtime.GOOS != "linux" || runtime.GOARCH != arch {
		t.Logf("not running the linux/%s binary on %s/%s", arch, runtime.GOOS, runtime.GOARCH)
	} else {
		cmd := exec.Command(imgBin, "-version")
		cmd.Dir = rootfs
		cmd.Env = []string{} // in particular no ARGO_ROLLOUTS_RPC_PLUGIN: the command-line mode
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("/configmap-attacher -version: %v\n%s", err, stderr.String())
		}
		if got := stdout.String(); got != "configmap-attacher "+version+"\n" {
			t.Errorf("/configmap-attacher -version printed %q, want %q", got, "configmap-attacher "+version+"\n")
		}
	}

	t.Logf("image %s digest %s: layer %d bytes compressed, binary %d bytes, in %s",
		ref, want, compressed, binInfo.Size(), time.Since(start).Round(time.Millisecond))
}

func TestBuildRejects(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable() // this test binary: linux/GOARCH, not always static
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	for _, o := range []build.Options{
		{Binary: bin, Arch: "386", Version: "v1"},
		{Binary: bin, Arch: "amd64", Version: "v1"}, // not ELF
		{Binary: self, Arch: other, Version: "v1"},  // wrong arch (or not linux)
		{Binary: bin, Arch: "amd64"},
		{Binary: bin + ".missing", Arch: "amd64", Version: "v1"},
	} {
		if _, err := build.Build(o); err == nil {
			t.Errorf("Build(%+v): no error", o)
		}
	}
	if _, err := build.CreatedFromEnv(func(string) string { return "yesterday" }); err == nil {
		t.Errorf("SOURCE_DATE_EPOCH=yesterday: no error")
	}
}

// checkStatic fails unless bin is a linux/arch Go binary built with CGO_ENABLED=0 that
// needs no dynamic loader and no shared library.
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

func layerDigest(img v1.Image) (v1.Hash, error) {
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		return v1.Hash{}, fmt.Errorf("%d layers (%v), want 1", len(ls), err)
	}
	return ls[0].Digest()
}

func layerDiffID(img v1.Image) (v1.Hash, error) {
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		return v1.Hash{}, fmt.Errorf("%d layers (%v), want 1", len(ls), err)
	}
	return ls[0].DiffID()
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
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %q %v", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
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
