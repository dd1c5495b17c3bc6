// Package image tests the container image hack/image builds: one OCI image index for
// linux/amd64 and linux/arm64. It builds both static binaries and the index, checks the index,
// each platform's config and filesystem, that two builds give the same digest, pushes it to an
// in-process registry (go-containerregistry's pkg/registry) exactly as `crane push` pushes an OCI
// layout and pulls it back by tag, runs the binary extracted from the image (-version and
// install-plugin DIR), and (controller_test.go) starts the real Argo Rollouts controller on the
// plugin that install-plugin put into DIR.
package image

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
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
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/configmap-attacher/configmap-attacher/hack/image/build"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// wantFS is every entry of the image's filesystem: no shell, no package manager, nothing else.
var wantFS = map[string]struct {
	typ      byte
	mode     int64
	uid, gid int
}{
	"configmap-attacher":      {tar.TypeReg, 0o755, 0, 0},
	"configmap-attacher-step": {tar.TypeReg, 0o755, 0, 0},
	"etc":                     {tar.TypeDir, 0o755, 0, 0},
	"etc/group":               {tar.TypeReg, 0o644, 0, 0},
	"etc/passwd":              {tar.TypeReg, 0o644, 0, 0},
	"home":                    {tar.TypeDir, 0o755, 0, 0},
	"home/nonroot":            {tar.TypeDir, 0o700, 65532, 65532},
	"tmp":                     {tar.TypeDir, 0o1777, 0, 0},
}

const revision = cluster.ReleaseRevision

func wantLabels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":      "https://github.com/configmap-attacher/configmap-attacher",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     "2023-11-14T22:13:20Z", // epoch
		"org.opencontainers.image.title":       "configmap-attacher",
		"org.opencontainers.image.description": build.Description,
	}
}

func TestImageIndex(t *testing.T) {
	start := time.Now()
	root := moduleRoot(t)
	bins, steps := binaries(t), stepBinaries(t)
	dir := t.TempDir()
	var binaryArgs []string
	for _, a := range archs {
		checkStatic(t, bins[a], a)
		checkStatic(t, steps[a], a)
		binaryArgs = append(binaryArgs, "-binary", "linux/"+a+"="+bins[a], "-step-binary", "linux/"+a+"="+steps[a])
	}

	// The shared release's image (make release ran hack/image on these binaries), and the same
	// binaries through the command again (with SOURCE_DATE_EPOCH): one digest. The command is
	// built without -race, as make runs it: this test binary's race instrumentation makes gzip
	// several times slower, and the images are about 90 MB of binaries per platform.
	ociDir := filepath.Join(releaseDist(t), "configmap-attacher-image.oci")
	lp, err := layout.ImageIndexFromPath(ociDir)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := lp.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(lm.Manifests) != 1 {
		t.Fatalf("OCI layout index.json %+v, want one image index", lm)
	}
	want := lm.Manifests[0].Digest
	digestFile := filepath.Join(dir, "digest")
	imageCmd := func(epoch int, layout string) string {
		// As the Makefile's GO_RUN: the build configuration whose packages are compiled already.
		return goCmd(t, root, []string{"SOURCE_DATE_EPOCH=" + strconv.Itoa(epoch), "CGO_ENABLED=0"},
			append([]string{"run", "-trimpath", "./hack/image", "-tag", ref, "-revision", revision, "-oci-layout", layout, "-digest-file", digestFile}, binaryArgs...)...)
	}
	if out := imageCmd(epoch, filepath.Join(dir, "again.oci")); !strings.Contains(out, "digest: "+want.String()) {
		t.Errorf("hack/image printed\n%s\nwant digest %s (make release's): not reproducible", out, want)
	}
	if b, err := os.ReadFile(digestFile); err != nil || string(b) != want.String()+"\n" {
		t.Errorf("-digest-file holds %q (%v), want %q", b, err, want.String()+"\n")
	}
	// A different SOURCE_DATE_EPOCH must change the digest: the timestamps are really in it.
	if out := imageCmd(epoch+1, filepath.Join(dir, "other.oci")); strings.Contains(out, "digest: "+want.String()) || !strings.Contains(out, "digest: sha256:") {
		t.Errorf("another SOURCE_DATE_EPOCH: hack/image printed\n%s\nwant a digest other than %s", out, want)
	}
	idx, err := lp.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}

	// The index: OCI, one manifest per platform in order, each descriptor's platform right,
	// annotated with the labels.
	checkIndex(t, idx, bins)

	// The layout on disk: index.json names the one index (so `crane push DIR TAG` pushes it as
	// one tag without --index), with the tag's version as its ref name.
	if lm.Manifests[0].MediaType != types.OCIImageIndex || lm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("OCI layout index.json %+v, want one image index %s named %s", lm, want, version)
	}

	// Push as crane push does for a directory (cmd/crane/cmd/push.go loadImage: one entry whose
	// media type is an index → remote.WriteIndex), to an in-process registry; pull by tag.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(u.Host + "/configmap-attacher/configmap-attacher:" + version)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatalf("push %s: %v", tag, err)
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull %s: %v", tag, err)
	}
	if d, _ := pulled.Digest(); d != want {
		t.Errorf("pulled %s: digest %s, pushed %s", tag, d, want)
	}
	desc, err := remote.Head(tag)
	if err != nil || desc.MediaType != types.OCIImageIndex || desc.Digest != want {
		t.Errorf("HEAD %s: %+v (%v), want an OCI index %s", tag, desc, err, want)
	}
	checkIndex(t, pulled, bins)
	// What a node pulls: the manifest of its platform, from the one tag.
	for _, a := range archs {
		img, err := remote.Image(tag, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: a}))
		if err != nil {
			t.Fatalf("pull %s for linux/%s: %v", tag, a, err)
		}
		cf, err := img.ConfigFile()
		if err != nil || cf.Architecture != a {
			t.Errorf("pull %s for linux/%s: got architecture %q (%v)", tag, a, cf.Architecture, err)
		}
	}

	// Each platform's filesystem, from the pulled index; the host's binary is run.
	im, _ := pulled.IndexManifest()
	var sizes []string
	for i, d := range im.Manifests {
		a := archs[i]
		img, err := pulled.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("linux/%s: %d layers (%v), want 1", a, len(layers), err)
		}
		n, _ := layers[0].Size()
		sizes = append(sizes, "linux/"+a+" "+d.Digest.String()+" "+strconv.FormatInt(n, 10)+" bytes compressed")
		rootfs := filepath.Join(dir, "rootfs-"+a)
		checkFilesystem(t, img, rootfs, a, bins[a], steps[a])
		if a == runtime.GOARCH && runtime.GOOS == "linux" {
			runEntrypoint(t, rootfs)
		}
	}
	t.Logf("index %s digest %s (%s), built, pushed and pulled in %s", ref, want, strings.Join(sizes, "; "), time.Since(start).Round(time.Millisecond))
}

// checkIndex checks an index: OCI media type, the labels as annotations, one manifest per
// arch in order with its platform, each config's platform and labels, and each image's binary.
func checkIndex(t *testing.T, idx v1.ImageIndex, bins map[string]string) {
	t.Helper()
	if mt, err := idx.MediaType(); err != nil || mt != types.OCIImageIndex {
		t.Errorf("index media type %q (%v), want %q", mt, err, types.OCIImageIndex)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range wantLabels() {
		if im.Annotations[k] != v {
			t.Errorf("index annotation %s=%q, want %q", k, im.Annotations[k], v)
		}
	}
	if len(im.Manifests) != len(archs) {
		t.Fatalf("index has %d manifests, want %d (%v)", len(im.Manifests), len(archs), archs)
	}
	for i, d := range im.Manifests {
		a := archs[i]
		variant := map[string]string{"arm64": "v8"}[a]
		if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil || d.Platform.OS != "linux" ||
			d.Platform.Architecture != a || d.Platform.Variant != variant {
			t.Errorf("manifest %d: media type %s platform %+v, want %s linux/%s %q", i, d.MediaType, d.Platform, types.OCIManifestSchema1, a, variant)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != a || cf.Variant != variant {
			t.Errorf("linux/%s config: platform %s/%s/%s", a, cf.OS, cf.Architecture, cf.Variant)
		}
		c := cf.Config
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/configmap-attacher"}) ||
			len(c.Cmd) != 0 || c.WorkingDir != "/" {
			t.Errorf("linux/%s config: User %q Entrypoint %q Cmd %q WorkingDir %q", a, c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
		}
		for k, v := range wantLabels() {
			if c.Labels[k] != v {
				t.Errorf("linux/%s label %s=%q, want %q", a, k, c.Labels[k], v)
			}
		}
		if !cf.Created.Time.Equal(time.Unix(epoch, 0)) {
			t.Errorf("linux/%s created %v, want %v", a, cf.Created.Time, time.Unix(epoch, 0).UTC())
		}
	}
}

// checkFilesystem extracts img under rootfs and checks every entry and the binary.
func checkFilesystem(t *testing.T, img v1.Image, rootfs, arch, bin, step string) {
	t.Helper()
	files := extract(t, mutate.Extract(img), rootfs)
	for n, w := range wantFS {
		h, ok := files[n]
		if !ok {
			t.Errorf("linux/%s /%s: missing", arch, n)
			continue
		}
		if h.Typeflag != w.typ || h.Mode&0o7777 != w.mode || h.Uid != w.uid || h.Gid != w.gid {
			t.Errorf("linux/%s /%s: type %q mode %#o owner %d:%d, want type %q mode %#o owner %d:%d",
				arch, n, h.Typeflag, h.Mode&0o7777, h.Uid, h.Gid, w.typ, w.mode, w.uid, w.gid)
		}
		if !h.ModTime.Equal(time.Unix(epoch, 0)) {
			t.Errorf("linux/%s /%s: mtime %v", arch, n, h.ModTime)
		}
	}
	for n := range files {
		if _, ok := wantFS[n]; !ok {
			t.Errorf("linux/%s /%s: unexpected in the image", arch, n)
		}
		if b := path.Base(n); b == "sh" || b == "bash" || b == "ash" || b == "busybox" {
			t.Errorf("linux/%s /%s: a shell in the image", arch, n)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	group, _ := os.ReadFile(filepath.Join(rootfs, "etc/group"))
	if !hasLinePrefix(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("linux/%s /etc/passwd has no nonroot 65532:65532:\n%s", arch, passwd)
	}
	if !hasLinePrefix(string(group), "nonroot:x:65532:") {
		t.Errorf("linux/%s /etc/group has no nonroot 65532:\n%s", arch, group)
	}
	for n, built := range map[string]string{"configmap-attacher": bin, "configmap-attacher-step": step} {
		imgBin := filepath.Join(rootfs, n)
		if !bytes.Equal(fileBytes(t, built), fileBytes(t, imgBin)) {
			t.Errorf("linux/%s: /%s in the image differs from the binary built", arch, n)
		}
		checkStatic(t, imgBin, arch)
	}
}

// runEntrypoint runs the image's entrypoint from the extracted filesystem as a container runtime
// would (working directory /, an empty environment: in particular no ARGO_ROLLOUTS_RPC_PLUGIN):
// -version, then install-plugin into a directory as the controller's initContainer does: it
// installs the step plugin alone, /configmap-attacher-step, as configmap-attacher.
func runEntrypoint(t *testing.T, rootfs string) {
	t.Helper()
	entry := filepath.Join(rootfs, "configmap-attacher")
	stdout, stderr, err := run(rootfs, entry, "-version")
	if err != nil || stdout != "configmap-attacher "+version+"\n" {
		t.Errorf("/configmap-attacher -version: %q %v\n%s", stdout, err, stderr)
	}
	dst := t.TempDir()
	stdout, stderr, err = run(rootfs, entry, "install-plugin", dst)
	if err != nil {
		t.Fatalf("/configmap-attacher install-plugin %s: %v\n%s", dst, err, stderr)
	}
	installed := filepath.Join(dst, "configmap-attacher")
	step := filepath.Join(rootfs, "configmap-attacher-step")
	if !strings.HasPrefix(stdout, "installed "+installed+" from "+step+" (") {
		t.Errorf("install-plugin printed %q", stdout)
	}
	fi, err := os.Stat(installed)
	if err != nil || fi.Mode() != 0o755 || !bytes.Equal(fileBytes(t, installed), fileBytes(t, step)) {
		t.Errorf("installed %s: %v %v, want a 0755 copy of /configmap-attacher-step", installed, fi, err)
	}
	// Run by hand, the step plugin alone says what it is and exits 2.
	if _, stderr, err := run(rootfs, step); exitCode(err) != 2 || !strings.Contains(stderr, "the step plugin alone") {
		t.Errorf("/configmap-attacher-step without the controller: %v, stderr %q", err, stderr)
	}
	if _, stderr, err := run(rootfs, entry, "install-plugin", filepath.Join(dst, "missing")); err == nil ||
		!strings.Contains(stderr, "does not exist") {
		t.Errorf("install-plugin into a missing directory: %v, stderr %q", err, stderr)
	}
}

func run(dir, bin string, args ...string) (string, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
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
	// Each case is wrong in one way only (the others as in a good build), and must be refused for
	// that reason: a check that failed on another field would pass by accident. The good binary
	// is a small static one: the accepted builds compress it in this -race binary, where gzip
	// of the real 29 MB step binary took minutes.
	good := tinyStatic(t)
	for _, tc := range []struct {
		o    build.Options
		want string
	}{
		{build.Options{Binary: good, StepBinary: good, Arch: "386", Version: "v1"}, `arch "386"`},
		{build.Options{Binary: bin, StepBinary: good, Arch: runtime.GOARCH, Version: "v1"}, "not a linux binary"},
		{build.Options{Binary: self, StepBinary: good, Arch: other, Version: "v1"}, "built for"},
		{build.Options{Binary: good, StepBinary: good, Arch: runtime.GOARCH}, "no version"},
		{build.Options{Binary: bin + ".missing", StepBinary: good, Arch: runtime.GOARCH, Version: "v1"}, "no such file"},
		{build.Options{Binary: good, Arch: runtime.GOARCH, Version: "v1"}, "no step binary"},
		{build.Options{Binary: good, StepBinary: bin, Arch: runtime.GOARCH, Version: "v1"}, "not a linux binary"},
	} {
		if _, err := build.Build(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v): %v, want an error with %q", tc.o, err, tc.want)
		}
	}
	if _, err := build.Build(build.Options{Binary: good, StepBinary: good, Arch: runtime.GOARCH, Version: "v1"}); err != nil {
		t.Errorf("the good build: %v", err)
	}
	for _, ps := range [][]build.Platform{
		nil,
		{{Arch: other, Binary: self, StepBinary: self}},
		{{Arch: runtime.GOARCH, Binary: good, StepBinary: good}, {Arch: runtime.GOARCH, Binary: good, StepBinary: good}},
	} {
		if _, err := build.BuildIndex(build.Options{Version: "v1"}, ps); err == nil {
			t.Errorf("BuildIndex(%+v): no error", ps)
		}
	}
	if _, err := build.CreatedFromEnv(func(string) string { return "yesterday" }); err == nil {
		t.Errorf("SOURCE_DATE_EPOCH=yesterday: no error")
	}
}

// tinyStatic builds an empty Go program as the image's binaries are built (CGO_ENABLED=0
// GOOS=linux, this machine's arch, -trimpath): a static linux executable of about 1.5 MB.
func tinyStatic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tiny")
	goCmd(t, dir, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH, "GO111MODULE=off"}, "build", "-trimpath", "-o", out, "main.go")
	return out
}
