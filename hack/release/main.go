// Command release writes dist/install.md for a release: what a platform engineer pastes to
// install the plugin — the argo-rollouts-config entry for each linux architecture with the real
// sha256 of its binary (from checksums.txt, verified against the files), the image by digest
// (the multi-arch index hack/image printed), and the values for the argo-helm argo-rollouts
// chart. `make release` runs it after building the binaries and the image:
//
//	go run ./hack/release -dist dist -version v1.0.0 -image ghcr.io/configmap-attacher/configmap-attacher
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
	"strings"
	"text/template"
)

// Archs are the linux architectures the argo-rollouts-config entries are written for.
var Archs = []string{"amd64", "arm64"}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// Release is what install.md is rendered from.
type Release struct {
	Version     string
	Image       string // repository, e.g. ghcr.io/configmap-attacher/configmap-attacher
	Digest      string // the index's digest, sha256:…
	DownloadURL string // base URL of the release's assets, ending in /
	Assets      []Asset
}

// Asset is one linux step-plugin binary of the release (what the controller downloads).
type Asset struct {
	Arch, Name, SHA256 string
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "directory with checksums.txt, the binaries and configmap-attacher-image.oci.digest")
	version := fs.String("version", "", "the release's version (its git tag)")
	image := fs.String("image", "ghcr.io/configmap-attacher/configmap-attacher", "the image repository")
	digestFile := fs.String("digest-file", "", "file with the image index's digest (default DIST/configmap-attacher-image.oci.digest)")
	urlBase := fs.String("download-url", "https://github.com/configmap-attacher/configmap-attacher/releases/download/", "base URL of release assets; VERSION/ASSET is appended")
	out := fs.String("out", "", "file to write (default DIST/install.md)")
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
	if err := Render(&buf, r); err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (image %s@%s)\n", *out, r.Image, r.Digest)
	return nil
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Load reads checksums.txt and the digest file, and checks each linux binary's sha256 against
// the file itself.
func Load(dist, version, image, digestFile, urlBase string) (Release, error) {
	r := Release{Version: version, Image: image, DownloadURL: strings.TrimSuffix(urlBase, "/") + "/" + version + "/"}
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
		r.Assets = append(r.Assets, Asset{Arch: a, Name: n, SHA256: want})
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

// Render writes install.md.
func Render(w io.Writer, r Release) error {
	return tmpl.Execute(w, r)
}

var tmpl = template.Must(template.New("install.md").Parse(`# configmap-attacher {{.Version}}: install

Image (one multi-arch index, linux/amd64 and linux/arm64; the Job, the controller and the plugin
installer): ` + "`{{.Image}}@{{.Digest}}`" + ` (tag ` + "`{{.Image}}:{{.Version}}`" + `).

Step plugins need Argo Rollouts ≥ 1.8; tested with v1.10.2 and v1.9.1. Full instructions,
RBAC and verification: docs/install.md.

## 1. From the image (any architecture, no egress)

An initContainer of the Argo Rollouts controller copies the plugin out of the image into an
emptyDir with ` + "`install-plugin`" + `; every node pulls its own architecture from the index, so this is
the way for clusters with **mixed architectures**. With the argo-helm ` + "`argo-rollouts`" + ` chart
(≥ 2.39.1 for ` + "`controller.stepPlugins`" + `; since 2.39.4 ` + "`helm upgrade`" + ` restarts the controller when
the ConfigMap changes):

` + "```yaml" + `
controller:
  image:
    tag: v1.9.1   # chart 2.41.0 installs v1.9.0 with v1.9 CRDs; for v1.10.2 install its CRDs and set installCRDs: false
  stepPlugins:
    - name: configmap-attacher/configmap-attacher
      location: file:///home/argo-rollouts/plugins/configmap-attacher
      # Owner references only on objects labelled configmap-attacher/revisioned=true.
      args: ["--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"]
  initContainers:
    - name: install-configmap-attacher
      image: {{.Image}}@{{.Digest}}
      args: ["install-plugin", "/plugins"]
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: ["ALL"]}
      volumeMounts:
        - {name: configmap-attacher-plugin, mountPath: /plugins}
  volumes:
    - {name: configmap-attacher-plugin, emptyDir: {}}
  volumeMounts:
    - {name: configmap-attacher-plugin, mountPath: /home/argo-rollouts/plugins, readOnly: true}
providerRBAC:
  enabled: true   # additionalRules are rendered only when true
  additionalRules:
    - apiGroups: [""]
      resources: ["configmaps", "secrets"]
      verbs: ["patch"]
    - apiGroups: ["apps"]
      resources: ["statefulsets", "daemonsets"]
      verbs: ["list"]
    - apiGroups: ["batch"]
      resources: ["cronjobs"]
      verbs: ["list"]
` + "```" + `

Keep ` + "`controller.createConfigmap`" + ` and ` + "`controller.createClusterRole`" + ` true: false silently drops
these settings.

## 2. Downloaded by the controller (one architecture)

The controller downloads the binary at every start and refuses to start on a sha256 mismatch.
The binary is per architecture: a cluster whose controller may be scheduled on nodes of
**mixed architectures** must use the image (1.) instead, which picks the right binary.
Add the entry for your nodes' architecture to ` + "`stepPlugins`" + ` in ` + "`argo-rollouts-config`" + ` (or
` + "`controller.stepPlugins`" + ` of the chart), then restart the controller.
{{range .Assets}}
linux/{{.Arch}}:

` + "```yaml" + `
stepPlugins: |-
  - name: configmap-attacher/configmap-attacher
    location: {{$.DownloadURL}}{{.Name}}
    sha256: "{{.SHA256}}"
    args: ["--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"]
` + "```" + `
{{end}}
## Checksums

| asset | sha256 |
|---|---|
{{range .Assets}}| ` + "`{{.Name}}`" + ` | ` + "`{{.SHA256}}`" + ` |
{{end}}| image index ` + "`{{.Image}}:{{.Version}}`" + ` | ` + "`{{.Digest}}`" + ` |

All assets: checksums.txt. The controller logs ` + "`Downloading plugin configmap-attacher/configmap-attacher from: …`" + `
and ` + "`Download complete`" + ` (or ` + "`Copied plugin from …`" + ` for the image install), then the plugin's
` + "`configmap-attacher step plugin initialised`" + ` line on the first step.
`))
