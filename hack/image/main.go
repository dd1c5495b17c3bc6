// Command image builds the configmap-attacher container image (the command-line/Job mode)
// without a Docker engine: FROM scratch, one layer with the static binary, /etc/passwd and
// /etc/group for the nonroot user (65532), and an empty /tmp. It writes a tarball that
// `docker load`, `podman load` and `crane push` accept, and optionally an OCI image layout.
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -o bin/configmap-attacher-linux-amd64 .
//	go run ./hack/image -binary bin/configmap-attacher-linux-amd64 -arch amd64 \
//	    -tag ghcr.io/configmap-attacher/configmap-attacher:v1.0.0 -out dist/configmap-attacher-image-amd64.tar
//
// Timestamps are SOURCE_DATE_EPOCH (or the Unix epoch), so the digest depends only on the
// binary, the arch and the tag's version.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/configmap-attacher/configmap-attacher/hack/image/build"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "static linux binary (CGO_ENABLED=0) to put at "+build.BinaryPath)
	arch := fs.String("arch", "amd64", "architecture the binary was built for: amd64 or arm64")
	tagStr := fs.String("tag", "", "image reference, e.g. ghcr.io/configmap-attacher/configmap-attacher:v1.0.0; its tag is the version label")
	out := fs.String("out", "", "tarball to write (docker load / podman load / crane push)")
	ociDir := fs.String("oci-layout", "", "also write an OCI image layout to this directory (replaced if it exists)")
	source := fs.String("source", build.DefaultSource, "org.opencontainers.image.source label")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *binary == "" || *tagStr == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("-binary, -tag and -out are required; no arguments")
	}
	tag, err := name.NewTag(*tagStr, name.StrictValidation)
	if err != nil {
		return err
	}
	created, err := build.CreatedFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	img, err := build.Build(build.Options{
		Binary:  *binary,
		Arch:    *arch,
		Version: tag.TagStr(),
		Source:  *source,
		Created: created,
	})
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, tag, img); err != nil {
		return err
	}
	if *ociDir != "" {
		if err := os.RemoveAll(*ociDir); err != nil {
			return err
		}
		p, err := layout.Write(*ociDir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag.TagStr(),
			"io.containerd.image.name":          tag.Name(),
		})); err != nil {
			return err
		}
	}

	digest, err := img.Digest()
	if err != nil {
		return err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var compressed int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return err
		}
		compressed += n
	}
	fmt.Printf("image:  %s\n", tag.Name())
	fmt.Printf("tar:    %s\n", *out)
	if *ociDir != "" {
		fmt.Printf("oci:    %s\n", *ociDir)
	}
	// The OCI manifest's digest: the image's digest once pushed from the OCI layout. A docker
	// tarball keeps no manifest (docker load / crane push make their own); the image ID
	// (`docker images --no-trunc`, `podman images --no-trunc`) is the config's digest.
	fmt.Printf("digest: %s\n", digest)
	fmt.Printf("id:     %s\n", configDigest)
	fmt.Printf("layers: %d bytes compressed\n", compressed)
	return nil
}
