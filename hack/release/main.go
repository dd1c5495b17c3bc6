// Command release writes what `make release` puts in dist/ after the binaries and the image
// (docs/release.md lists it): install.md, what a platform engineer pastes to install the
// plugin — the argo-rollouts-config entry for each linux architecture with the real sha256 of
// its binary (from checksums.txt, verified against the files), the image by digest (the
// multi-arch index hack/image printed), and the values for the argo-helm argo-rollouts chart;
// with -helm and -cyclonedx-gomod also the chart packaged (normalised to be reproducible),
// install.yaml and install-namespaced.yaml, the Kustomize base, the SBOMs, the version's
// changelog section and checksums.txt of every file:
//
//	go run ./hack/release -dist dist -version v1.0.0 -image ghcr.io/configmap-attacher/configmap-attacher \
//	    -helm ~/.cache/configmap-attacher/helm-v3.22.0/helm -cyclonedx-gomod "$(hack/tool.sh cyclonedx-gomod ...)"
//
// `check-version [-want vX.Y.Z]` and `set-version vX.Y.Z` check and rewrite the version's
// mentions in the tree against hack/release/VERSION (hack/release/stamp).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/hack/image/build"
	"github.com/configmap-attacher/configmap-attacher/hack/release/notes"
	"github.com/configmap-attacher/configmap-attacher/hack/release/stamp"
)

// Archs are the linux architectures of the image and of the argo-rollouts-config entries
// (-archs; a release has both, the tests' one-platform reproducibility build one).
var Archs = []string{"amd64", "arm64"}

// parseArchs reads -archs: a comma-separated list of amd64 and arm64, each once.
func parseArchs(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a != "amd64" && a != "arm64" || slices.Contains(out, a) {
			return nil, fmt.Errorf("-archs %q: %q is not amd64 or arm64, or is listed twice (want e.g. -archs amd64,arm64)", s, a)
		}
		out = append(out, a)
	}
	return out, nil
}

// Platforms is how install.md and the Kustomize base name the image's platforms, e.g.
// "linux/amd64 and linux/arm64".
func Platforms(archs []string) string {
	ps := make([]string, len(archs))
	for i, a := range archs {
		ps[i] = "linux/" + a
	}
	if len(ps) < 2 {
		return strings.Join(ps, "")
	}
	return strings.Join(ps[:len(ps)-1], ", ") + " and " + ps[len(ps)-1]
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "check-version":
			return checkVersion(args[1:], stdout)
		case "set-version":
			return setVersion(args[1:], stdout)
		}
	}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "directory with checksums.txt, the binaries and configmap-attacher-image.oci.digest")
	version := fs.String("version", "", "the release's version (its git tag)")
	image := fs.String("image", "ghcr.io/configmap-attacher/configmap-attacher", "the image repository")
	digestFile := fs.String("digest-file", "", "file with the image index's digest (default DIST/configmap-attacher-image.oci.digest)")
	urlBase := fs.String("download-url", "https://github.com/configmap-attacher/configmap-attacher/releases/download/", "base URL of release assets; VERSION/ASSET is appended")
	out := fs.String("out", "", "file to write (default DIST/install.md)")
	helm := fs.String("helm", "", "the helm binary (hack/build-binaries.sh helm): packages the chart and renders install.yaml; empty: write install.md only")
	cdx := fs.String("cyclonedx-gomod", "", "the cyclonedx-gomod binary (hack/tool.sh cyclonedx-gomod ...): the SBOMs; required with -helm")
	chartDir := fs.String("chart", "charts/configmap-attacher", "the chart to package")
	changelog := fs.String("changelog", "docs/changelog.md", "the changelog whose section of -version becomes DIST/changelog.md")
	kbase := fs.String("kustomize-base", "examples/kustomize/controller", "the Kustomize base copied to DIST/kustomize with the release's chart and image")
	archs := fs.String("archs", strings.Join(Archs, ","), "the linux architectures of the image and the binaries in DIST, comma-separated")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *version == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("-version is required; no arguments")
	}
	var err error
	if Archs, err = parseArchs(*archs); err != nil {
		return err
	}
	if *digestFile == "" {
		*digestFile = filepath.Join(*dist, "configmap-attacher-image.oci.digest")
	}
	if *out == "" {
		*out = filepath.Join(*dist, "install.md")
	}
	r, err := Load(*dist, *version, *image, *digestFile, *urlBase)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := notes.Render(&buf, r); err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (image %s@%s)\n", *out, r.Image, r.Digest)
	if *helm == "" {
		return nil
	}
	if *cdx == "" {
		return fmt.Errorf("-helm needs -cyclonedx-gomod (hack/tool.sh cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0)")
	}
	if err := stamp.Validate(*version); err != nil {
		return fmt.Errorf("-version: %w", err)
	}
	created, err := build.CreatedFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	return artifacts{dist: *dist, version: *version, image: *image, digest: r.Digest, helm: *helm, cyclonedx: *cdx,
		chartDir: *chartDir, changelog: *changelog, kbase: *kbase, created: created, stdout: stdout}.write()
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Load reads checksums.txt and the digest file, and checks each linux binary's sha256 against
// the file itself.
func Load(dist, version, image, digestFile, urlBase string) (notes.Release, error) {
	r := notes.Release{Version: version, Image: image, DownloadURL: strings.TrimSuffix(urlBase, "/") + "/" + version + "/", Platforms: Platforms(Archs)}
	d, err := os.ReadFile(digestFile)
	if err != nil {
		return r, fmt.Errorf("image digest: %w (run hack/image with -digest-file first)", err)
	}
	r.Digest = strings.TrimSpace(string(d))
	if !digestRE.MatchString(r.Digest) {
		return r, fmt.Errorf("%s: %q is not a sha256 digest", digestFile, r.Digest)
	}
	sums, err := readChecksums(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		return r, err
	}
	for _, a := range Archs {
		// The step plugin alone: what the controller downloads and runs (the full binary serves
		// the step too, but links every other mode).
		n := "configmap-attacher-step-linux-" + a
		want, ok := sums[n]
		if !ok {
			return r, fmt.Errorf("checksums.txt has no %s", n)
		}
		got, err := fileSHA256(filepath.Join(dist, n))
		if err != nil {
			return r, err
		}
		if got != want {
			return r, fmt.Errorf("%s: sha256 %s, checksums.txt says %s", n, got, want)
		}
		r.Assets = append(r.Assets, notes.Asset{Arch: a, Name: n, SHA256: want})
	}
	return r, nil
}

func readChecksums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || len(fields[0]) != 64 {
			return nil, fmt.Errorf("%s: bad line %q (want sha256sum output)", path, sc.Text())
		}
		m[strings.TrimPrefix(fields[1], "*")] = fields[0]
	}
	return m, sc.Err()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
