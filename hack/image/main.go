// Command image builds the configmap-attacher container image without a Docker engine: one OCI
// image index (a multi-arch tag) holding, per linux architecture, an image FROM scratch with one
// layer: the static binary (/configmap-attacher, the entrypoint), the step plugin alone
// (/configmap-attacher-step, which install-plugin copies), /etc/passwd and /etc/group for the
// nonroot user (65532), and an empty /tmp. The same image runs the command line (Job), the
// controller, and `install-plugin DIR` as the Argo Rollouts controller's initContainer.
//
// It writes an OCI image layout whose index.json names that one index, so `crane push` pushes
// the whole index as one tag and prints the digest this command printed:
//
//	for a in amd64 arm64; do
//	  CGO_ENABLED=0 GOOS=linux GOARCH=$a go build -trimpath -o bin/configmap-attacher-linux-$a .
//	  CGO_ENABLED=0 GOOS=linux GOARCH=$a go build -trimpath -o bin/configmap-attacher-step-linux-$a ./plugin/cmd/configmap-attacher-step
//	done
//	go run ./hack/image -tag ghcr.io/configmap-attacher/configmap-attacher:v1.0.0 \
//	    -binary linux/amd64=bin/configmap-attacher-linux-amd64 -step-binary linux/amd64=bin/configmap-attacher-step-linux-amd64 \
//	    -binary linux/arm64=bin/configmap-attacher-linux-arm64 -step-binary linux/arm64=bin/configmap-attacher-step-linux-arm64 \
//	    -revision "$(git rev-parse HEAD)" -oci-layout dist/configmap-attacher-image.oci
//	crane push dist/configmap-attacher-image.oci ghcr.io/configmap-attacher/configmap-attacher:v1.0.0
//
// Timestamps are SOURCE_DATE_EPOCH (or the Unix epoch), so the digest depends only on the
// binaries, the tag's version and the labels.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/configmap-attacher/configmap-attacher/hack/image/build"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var platforms []build.Platform
	fs.Func("binary", "linux/ARCH=PATH: a static linux binary (CGO_ENABLED=0) for ARCH (amd64 or arm64); repeat per platform, in index order", func(s string) error {
		plat, path, ok := strings.Cut(s, "=")
		arch, found := strings.CutPrefix(plat, "linux/")
		if !ok || !found || arch == "" || path == "" {
			return fmt.Errorf("%q: want linux/ARCH=PATH", s)
		}
		platforms = append(platforms, build.Platform{Arch: arch, Binary: path})
		return nil
	})
	steps := map[string]string{}
	fs.Func("step-binary", "linux/ARCH=PATH: the step plugin's own static linux binary (./plugin/cmd/configmap-attacher-step) for ARCH; one per -binary", func(s string) error {
		plat, path, ok := strings.Cut(s, "=")
		arch, found := strings.CutPrefix(plat, "linux/")
		if !ok || !found || arch == "" || path == "" {
			return fmt.Errorf("%q: want linux/ARCH=PATH", s)
		}
		steps[arch] = path
		return nil
	})
	tagStr := fs.String("tag", "", "image reference, e.g. ghcr.io/configmap-attacher/configmap-attacher:v1.0.0; its tag is the version label")
	ociDir := fs.String("oci-layout", "", "OCI image layout directory to write (replaced if it exists); `crane push DIR TAG` pushes the index")
	digestFile := fs.String("digest-file", "", "also write the index's digest (sha256:…) to this file")
	source := fs.String("source", build.DefaultSource, "org.opencontainers.image.source label")
	revision := fs.String("revision", "", "org.opencontainers.image.revision label (the commit)")
	licenses := fs.String("licenses", build.DefaultLicenses, "org.opencontainers.image.licenses label")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(platforms) == 0 || *tagStr == "" || *ociDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("-binary (at least one), -tag and -oci-layout are required; no arguments")
	}
	for i, p := range platforms {
		if platforms[i].StepBinary = steps[p.Arch]; platforms[i].StepBinary == "" {
			return fmt.Errorf("-binary linux/%s has no -step-binary linux/%s=PATH (build ./plugin/cmd/configmap-attacher-step)", p.Arch, p.Arch)
		}
		delete(steps, p.Arch)
	}
	for a := range steps {
		return fmt.Errorf("-step-binary linux/%s has no -binary linux/%s=PATH", a, a)
	}
	tag, err := name.NewTag(*tagStr, name.StrictValidation)
	if err != nil {
		return err
	}
	created, err := build.CreatedFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	idx, err := build.BuildIndex(build.Options{
		Version:  tag.TagStr(),
		Source:   *source,
		Revision: *revision,
		Licenses: *licenses,
		Created:  created,
	}, platforms)
	if err != nil {
		return err
	}

	if err := os.RemoveAll(*ociDir); err != nil {
		return fmt.Errorf("replacing %s: %w", *ociDir, err)
	}
	if err := os.MkdirAll(filepath.Dir(*ociDir), 0o755); err != nil {
		return err
	}
	p, err := layout.Write(*ociDir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing %s: %w", *ociDir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	})); err != nil {
		return fmt.Errorf("writing %s: %w", *ociDir, err)
	}

	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if *digestFile != "" {
		if err := os.WriteFile(*digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image:  %s\n", tag.Name())
	fmt.Fprintf(stdout, "oci:    %s  (crane push %s %s)\n", *ociDir, *ociDir, tag.Name())
	fmt.Fprintf(stdout, "digest: %s  (the index: %s@%s)\n", digest, tag.Context().Name(), digest)
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		n, err := compressedSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  %s: %s, layers %d bytes compressed\n", d.Platform, d.Digest, n)
	}
	return nil
}

func compressedSize(img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
