// Package build assembles the configmap-attacher container image from static linux binaries,
// without a Docker engine or a base image: per architecture, one layer on top of an empty image,
// holding the binary, /etc/passwd and /etc/group entries for the non-root user, and an empty
// /tmp; BuildIndex puts the images of several architectures into one OCI image index (what a
// multi-arch tag points to: the runtime pulls the manifest of its own platform).
//
// The image is reproducible: every timestamp (file modification times, the config's created
// time, the history entry, the created label) is Options.Created, so the same binaries give the
// same digests.
package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BinaryPath is where the binary is in the image, and the entrypoint.
	BinaryPath = "/configmap-attacher"
	// StepBinaryPath is the step plugin alone (plugin/cmd/configmap-attacher-step), which install-plugin
	// copies for the Argo Rollouts controller instead of the full binary.
	StepBinaryPath = "/configmap-attacher-step"
	// UID and GID of the nonroot user the image runs as (distroless's nonroot).
	UID = 65532
	GID = 65532
	// User is the image config's User.
	User = "65532:65532"
	// DefaultSource is the org.opencontainers.image.source label when Options.Source is empty.
	DefaultSource = "https://github.com/configmap-attacher/configmap-attacher"
	// Title is the org.opencontainers.image.title label.
	Title = "configmap-attacher"
	// DefaultLicenses is the org.opencontainers.image.licenses label when Options.Licenses is
	// empty (an SPDX expression).
	DefaultLicenses = "Apache-2.0"
	// Description is the org.opencontainers.image.description label.
	Description = "Argo Rollouts step plugin, command line (Job), controller and plugin installer (install-plugin DIR): one static binary, and the step plugin alone beside it"
)

// Passwd and Group are the image's /etc/passwd and /etc/group.
const (
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// Options describe the image to build.
type Options struct {
	// Binary is the path of the static (CGO_ENABLED=0) linux binary.
	Binary string
	// StepBinary is the path of the step plugin's own static linux binary (required: it is
	// what install-plugin gives the Rollouts controller).
	StepBinary string
	// Arch is the GOARCH the binary was built for: amd64 or arm64.
	Arch string
	// Version is the org.opencontainers.image.version label.
	Version string
	// Source is the org.opencontainers.image.source label; DefaultSource if empty.
	Source string
	// Revision is the org.opencontainers.image.revision label (the source's commit); omitted
	// if empty.
	Revision string
	// Licenses is the org.opencontainers.image.licenses label; DefaultLicenses if empty.
	Licenses string
	// Created is every timestamp in the image; the zero value means the Unix epoch.
	Created time.Time
}

// CreatedFromEnv returns the time SOURCE_DATE_EPOCH (https://reproducible-builds.org) names,
// or the Unix epoch when it is unset.
func CreatedFromEnv(getenv func(string) string) (time.Time, error) {
	s := getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a non-negative integer", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Build returns the image. The layer is built in memory; the binary is read once.
func Build(o Options) (v1.Image, error) {
	variant, machine := "", elf.EM_X86_64
	switch o.Arch {
	case "amd64":
	case "arm64":
		variant, machine = "v8", elf.EM_AARCH64
	default:
		return nil, fmt.Errorf("arch %q: want amd64 or arm64", o.Arch)
	}
	if o.Version == "" {
		return nil, fmt.Errorf("no version")
	}
	created := o.created()
	labels := o.Labels()
	if o.StepBinary == "" {
		return nil, fmt.Errorf("no step binary: build ./plugin/cmd/configmap-attacher-step for linux/%s and pass it", o.Arch)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin, machine); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Binary, err)
	}
	step, err := os.ReadFile(o.StepBinary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(step, machine); err != nil {
		return nil, fmt.Errorf("%s: %w", o.StepBinary, err)
	}

	// Compressed once, here (the go-containerregistry layer would compress again for the
	// digest and for every write); gzip's header carries no name and a zero mtime.
	layerTar, err := rootfs(bin, step, created)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer),
	)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Variant = variant
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "hack/image: " + BinaryPath + ", " + StepBinaryPath + ", /etc/passwd, /etc/group, /tmp",
			Comment:   "configmap-attacher " + o.Version,
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

func (o Options) created() time.Time {
	if o.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return o.Created.UTC()
}

// Labels are the image config's labels (and the index's annotations): the standard OCI ones.
func (o Options) Labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.licenses":    o.Licenses,
		"org.opencontainers.image.created":     o.created().Format(time.RFC3339),
		"org.opencontainers.image.title":       Title,
		"org.opencontainers.image.description": Description,
	}
	if l["org.opencontainers.image.source"] == "" {
		l["org.opencontainers.image.source"] = DefaultSource
	}
	if l["org.opencontainers.image.licenses"] == "" {
		l["org.opencontainers.image.licenses"] = DefaultLicenses
	}
	if o.Revision == "" {
		delete(l, "org.opencontainers.image.revision")
	}
	return l
}

// Platform is one image of an index: the static binaries built for linux/Arch.
type Platform struct {
	Arch       string // amd64 or arm64
	Binary     string
	StepBinary string
}

// BuildIndex returns an OCI image index holding one image per platform (each built by Build
// with o's labels and timestamps and the platform's binary and arch), in the given order, each
// manifest descriptor carrying its platform; the index carries the same labels as annotations.
func BuildIndex(o Options, platforms []Platform) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("no platforms")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, p := range platforms {
		if seen[p.Arch] {
			return nil, fmt.Errorf("platform linux/%s given twice", p.Arch)
		}
		seen[p.Arch] = true
		po := o
		po.Arch, po.Binary, po.StepBinary = p.Arch, p.Binary, p.StepBinary
		img, err := Build(po)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", p.Arch, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
			},
		})
	}
	return mutate.Annotations(idx, o.Labels()).(v1.ImageIndex), nil
}

// checkStatic fails unless bin is a linux ELF executable for machine that needs no dynamic
// loader (there is none in the image): build it with CGO_ENABLED=0 GOOS=linux.
func checkStatic(bin []byte, machine elf.Machine) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not a linux binary: %w", err)
	}
	if f.Machine != machine {
		return fmt.Errorf("built for %v, want %v", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (build with CGO_ENABLED=0)")
		}
	}
	return nil
}

// rootfs is the layer's uncompressed tar.
func rootfs(bin, step []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name     string
		mode     int64
		uid, gid int
		data     []byte
		dir      bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(Group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(Passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: BinaryPath[1:], mode: 0o755, data: bin},
		{name: StepBinaryPath[1:], mode: 0o755, data: step},
	}
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
